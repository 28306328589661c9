// SPDX-License-Identifier: Apache-2.0
// A small parser of the Prometheus text exposition format, for checking what /metrics renders.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::test {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> help;  // family → HELP text
  std::map<std::string, std::string> type;  // family → TYPE
  std::vector<Sample> samples;

  /// @return the value of the one sample `name` whose labels include `labels`, if exactly one matches.
  std::optional<double> value(const std::string& name,
                              const std::map<std::string, std::string>& labels = {}) const {
    std::optional<double> found;
    for (const auto& sample : samples) {
      if (sample.name != name) {
        continue;
      }
      bool match = true;
      for (const auto& [key, want] : labels) {
        const auto it = sample.labels.find(key);
        match = match && it != sample.labels.end() && it->second == want;
      }
      if (match) {
        if (found) {
          return std::nullopt;
        }
        found = sample.value;
      }
    }
    return found;
  }

  /// @return how many samples are called `name`.
  size_t count(const std::string& name) const {
    size_t n = 0;
    for (const auto& sample : samples) {
      n += sample.name == name ? 1 : 0;
    }
    return n;
  }
};

/// Parses `text`. @throws std::runtime_error naming the line for anything malformed.
inline Exposition parse_exposition(const std::string& text) {
  Exposition out;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    const auto bad = [&](const std::string& why) {
      return std::runtime_error("line " + std::to_string(number) + " (" + line + "): " + why);
    };
    if (line.empty()) {
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const std::string rest = line.substr(7);
      const auto space = rest.find(' ');
      if (space == std::string::npos) {
        throw bad("no text after the name");
      }
      (line[2] == 'H' ? out.help : out.type)[rest.substr(0, space)] = rest.substr(space + 1);
      continue;
    }
    if (line[0] == '#') {
      continue;
    }
    Sample sample;
    size_t pos = line.find_first_of("{ ");
    if (pos == std::string::npos) {
      throw bad("no value");
    }
    sample.name = line.substr(0, pos);
    if (line[pos] == '{') {
      ++pos;
      while (line[pos] != '}') {
        const auto equals = line.find('=', pos);
        if (equals == std::string::npos || line[equals + 1] != '"') {
          throw bad("malformed label");
        }
        const std::string key = line.substr(pos, equals - pos);
        std::string value;
        size_t i = equals + 2;
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        if (i >= line.size()) {
          throw bad("unterminated label value");
        }
        sample.labels[key] = value;
        pos = i + 1;
        if (line[pos] == ',') {
          ++pos;
        }
      }
      ++pos;
    }
    const std::string value = line.substr(pos + 1);
    sample.value = value == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(value);
    out.samples.push_back(std::move(sample));
  }
  return out;
}

}  // namespace joule::test
