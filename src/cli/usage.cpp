// SPDX-License-Identifier: Apache-2.0
#include "usage.hpp"

#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "joule/core/strings.hpp"

namespace joule::cli {

namespace {

// Where the words on the command line led: the deepest command reached, and the first word that was neither
// an option, an option's value, nor one of that command's subcommands (when it has subcommands).
struct Reached {
  const CLI::App* command = nullptr;
  std::optional<std::string> unknown_command;
};

const CLI::Option* find_option(const CLI::App* command, const std::string& name) {
  for (const CLI::App* app = command; app != nullptr; app = app->get_parent()) {
    if (const CLI::Option* option = app->get_option_no_throw(name)) {
      return option;
    }
  }
  return nullptr;
}

Reached walk(const CLI::App& app, int argc, char** argv) {
  Reached reached{&app, std::nullopt};
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") {
      break;
    }
    if (word.size() > 1 && word[0] == '-') {
      if (word.find('=') == std::string::npos) {
        const CLI::Option* option = find_option(reached.command, word);
        if (option != nullptr && option->get_items_expected_min() > 0) {
          ++i;  // its value
        }
      }
      continue;
    }
    const CLI::App* sub = nullptr;
    for (const CLI::App* candidate : reached.command->get_subcommands({})) {
      if (candidate->check_name(word)) {
        sub = candidate;
      }
    }
    if (sub != nullptr) {
      reached.command = sub;
      continue;
    }
    if (!reached.command->get_subcommands({}).empty()) {
      reached.unknown_command = word;
      return reached;
    }
  }
  return reached;
}

}  // namespace

std::string command_word(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.size() < 2 || word[0] != '-') {
      return word;
    }
    const CLI::Option* option = word.find('=') == std::string::npos ? app.get_option_no_throw(word) : nullptr;
    if (option != nullptr && option->get_items_expected_min() > 0) {
      ++i;  // its value
    }
  }
  return "";
}

namespace {

std::string command_path(const CLI::App* command) {
  std::vector<std::string> names;
  for (const CLI::App* app = command; app != nullptr; app = app->get_parent()) {
    names.insert(names.begin(), app->get_name());
  }
  return fmt::format("{}", fmt::join(names, " "));
}

std::vector<std::string> subcommand_names(const CLI::App* command) {
  std::vector<std::string> names;
  for (const CLI::App* sub : command->get_subcommands({})) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::vector<std::string> option_names(const CLI::App* command) {
  std::vector<std::string> names;
  for (const CLI::App* app = command; app != nullptr; app = app->get_parent()) {
    for (const CLI::Option* option : app->get_options({})) {
      for (const auto& name : option->get_lnames()) {
        names.push_back("--" + name);
      }
      for (const auto& name : option->get_snames()) {
        names.push_back("-" + name);
      }
    }
  }
  return names;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const auto match = closest_match(word, candidates);
  return match ? fmt::format("; did you mean '{}'?", *match) : std::string();
}

std::string unexpected(const CLI::App* command, const std::string& word) {
  const std::string path = command_path(command);
  if (word.size() > 1 && word[0] == '-') {
    std::string name = word.substr(0, word.find('='));
    // Compared without the dashes, so that "--" does not make unrelated names look alike.
    const auto bare = [](const std::string& option) { return option.substr(option.find_first_not_of('-')); };
    std::vector<std::string> bare_names;
    for (const auto& option : option_names(command)) {
      bare_names.push_back(bare(option));
    }
    // One or two letters are too short to guess from.
    const auto match = bare(name).size() < 3 ? std::nullopt : closest_match(bare(name), bare_names);
    const std::string hint =
        match ? fmt::format("; did you mean '{}{}'?", match->size() == 1 ? "-" : "--", *match)
              : std::string();
    return fmt::format("unknown option '{}' for '{}'{}", name, path, hint);
  }
  return fmt::format("unexpected argument '{}' for '{}'", word, path);
}

// CLI11 writes "NAME: message" for a value its validator refused; "NAME message" reads as a sentence.
std::string without_colon_after_name(const std::string& text) {
  if (!text.empty() && text[0] == '-') {
    if (const auto colon = text.find(": "); colon != std::string::npos && text.find(' ') > colon) {
      return text.substr(0, colon) + " " + text.substr(colon + 2);
    }
  }
  return text;
}

std::string explain(const Reached& reached, const CLI::ParseError& error) {
  const std::string text = error.what();
  if (reached.unknown_command) {
    const auto names = subcommand_names(reached.command);
    const auto hint = did_you_mean(*reached.unknown_command, names);
    if (!hint.empty()) {
      return fmt::format("unknown command '{}'{}", *reached.unknown_command, hint);
    }
    return fmt::format("unknown command '{}' (commands: {})", *reached.unknown_command,
                       fmt::join(names, ", "));
  }
  if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr &&
      text.find("subcommand") != std::string::npos) {
    return fmt::format("'{}' needs a command: {}", command_path(reached.command),
                       fmt::join(subcommand_names(reached.command), ", "));
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    // "The following argument(s) was/were not expected: a b"
    const auto colon = text.find(": ");
    const std::string first =
        colon == std::string::npos ? text : text.substr(colon + 2, text.find(' ', colon + 2) - colon - 2);
    return unexpected(reached.command, first);
  }
  if (dynamic_cast<const CLI::ConversionError*>(&error) != nullptr) {
    // "Could not convert: --interval-ms = x"
    const std::string prefix = "Could not convert: ";
    if (text.rfind(prefix, 0) == 0) {
      const std::string rest = text.substr(prefix.size());
      const auto equals = rest.find(" = ");
      if (equals != std::string::npos) {
        return fmt::format("{} expects a number, got '{}'", rest.substr(0, equals), rest.substr(equals + 3));
      }
    }
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr) {
    // "--gpus: 1 required TEXT missing"
    if (const auto colon = text.find(": ");
        colon != std::string::npos && text.find("missing") != std::string::npos) {
      return fmt::format("{} needs a value", text.substr(0, colon));
    }
  }
  return without_colon_after_name(text);
}

}  // namespace

std::string explain_parse_error(const CLI::App& app, const CLI::ParseError& error, int argc, char** argv) {
  const Reached reached = walk(app, argc, argv);
  return fmt::format("{} (see '{} --help')", explain(reached, error), command_path(reached.command));
}

void set_examples(CLI::App& command, const std::vector<std::string>& examples) {
  std::string text = examples.size() == 1 ? "Example:\n" : "Examples:\n";
  for (const auto& example : examples) {
    text += "  " + example + "\n";
  }
  command.footer(text + "\n" + kExitCodesHelp);
}

void mark_required_options(CLI::App& app) {
  for (CLI::Option* option : app.get_options({})) {
    const std::string text = option->get_option_text();
    if (option->get_required() && !text.empty() && text.find("REQUIRED") == std::string::npos) {
      option->option_text(text + " REQUIRED");
    }
  }
  for (CLI::App* command : app.get_subcommands({})) {
    mark_required_options(*command);
  }
}

CLI::Validator one_of(std::vector<std::string> names) {
  const std::string listed = fmt::format("{}", fmt::join(names, ", "));
  return CLI::Validator(
      [names = std::move(names), listed](std::string& value) -> std::string {
        for (const auto& name : names) {
          if (value == name) {
            return {};
          }
        }
        return fmt::format("must be one of {} (got '{}')", listed, value);
      },
      "{" + listed + "}");
}

}  // namespace joule::cli
