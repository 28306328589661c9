// SPDX-License-Identifier: Apache-2.0
// `joule infer govern`: the sidecar beside a serving engine (docs/inference.md "With vLLM / SGLang / TGI").
#pragma once

#include <CLI/CLI.hpp>

#include "common.hpp"

namespace joule::cli {

/// Registers `govern` under the `infer` command.
void add_infer_govern_command(CLI::App& infer_command, const GlobalOptions& global, int& exit_code);

}  // namespace joule::cli
