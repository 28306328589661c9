// SPDX-License-Identifier: Apache-2.0
// Usage errors a person can act on: CLI11's parse errors rewritten into one line that names the flag or
// command, suggests the likely one for a typo, and points at the help of the command being used.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace joule::cli {

/// The exit codes of every subcommand (also printed by `joule --help`).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  ///< a runtime error: a device, file, server or store failed
inline constexpr int kExitUsage = 2;    ///< a usage error: an unknown command, flag or name, a bad value

/// The exit codes, as every help page ends with them (docs/measure.md#exit-codes says the same).
inline constexpr const char* kExitCodesHelp =
    "Exit codes: 0 success; 1 a runtime error (a device, file, server or store failed); 2 a usage error (an "
    "unknown command, flag or name - GPU, model, workload, country -, a bad value, an output path that "
    "cannot "
    "be written), found before any work; 'joule measure' exits with the command's own code (128 + N if "
    "signal "
    "N ended it, 126 or 127 if it could not run).";

/// Ends `command`'s help with its examples (one command line each), then the exit codes. Every command and
/// subcommand has at least one example (a test walks every help page).
void set_examples(CLI::App& command, const std::vector<std::string>& examples);

/// Shows REQUIRED after the value's name of every required option of `app` and its subcommands (CLI11 hides
/// its own mark when an option has a custom value name). Call once every command is registered.
void mark_required_options(CLI::App& app);

/// @return the message for `error`, raised while parsing `argv` with `app`: e.g. "unknown command 'devcies';
/// did you mean 'devices'? (see 'joule --help')", "--format must be one of text, json, csv (got 'xml') (see
/// 'joule devices --help')". No "joule: error: " prefix and no newline.
std::string explain_parse_error(const CLI::App& app, const CLI::ParseError& error, int argc, char** argv);

/// @return the first word of `argv` that is neither an option of `app` nor an option's value: the command
/// asked for (checked by the parse, not here), or "" when there is none (`joule --help`, `joule --sim v100`).
std::string command_word(const CLI::App& app, int argc, char** argv);

/// A CLI11 validator: the value must be one of `names` (compared as written). Its failure reads "must be
/// one of a, b, c (got 'x')"; explain_parse_error puts the flag's name in front.
CLI::Validator one_of(std::vector<std::string> names);

}  // namespace joule::cli
