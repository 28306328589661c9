// SPDX-License-Identifier: Apache-2.0
// `joule infer bench`: the energy benchmark of an OpenAI-compatible completions endpoint (docs/inference.md).
#pragma once

#include <CLI/CLI.hpp>

#include "common.hpp"

namespace joule::cli {

/// Registers `bench` under the `infer` command.
void add_infer_bench_command(CLI::App& infer_command, const GlobalOptions& global, int& exit_code);

}  // namespace joule::cli
