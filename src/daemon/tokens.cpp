// SPDX-License-Identifier: Apache-2.0
#include "joule/daemon/tokens.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include "joule/core/strings.hpp"

#include "safe_files.hpp"

namespace joule::daemon {

namespace {

using device::daemon_protocol::Right;

// A word of a token file as a message may show it: quoted when short, else only its length, so that a token
// written in the wrong column is never printed.
std::string shown(std::string_view word) {
  constexpr size_t kLongestShown = 20;
  return word.size() <= kLongestShown ? quoted_excerpt(word)
                                      : fmt::format("a {}-character word", word.size());
}

bool name_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '@' || c == '-';
}

// The whitespace-separated words of `line`.
std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> words;
  size_t at = 0;
  while (at < line.size()) {
    while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) {
      ++at;
    }
    const size_t start = at;
    while (at < line.size() && line[at] != ' ' && line[at] != '\t') {
      ++at;
    }
    if (at > start) {
      words.push_back(line.substr(start, at - start));
    }
  }
  return words;
}

}  // namespace

std::string_view to_string(Scope scope) {
  switch (scope) {
    case Scope::kRead:
      return "read";
    case Scope::kControl:
      return "control";
    case Scope::kAdmin:
      return "admin";
  }
  return "read";
}

std::optional<Scope> scope_from_string(std::string_view text) {
  for (const Scope scope : {Scope::kRead, Scope::kControl, Scope::kAdmin}) {
    if (text == to_string(scope)) {
      return scope;
    }
  }
  return std::nullopt;
}

Right right_of(Scope scope) {
  return scope == Scope::kRead ? Right::kRead : Right::kControl;
}

Result<TokenTable> TokenTable::parse(std::string_view text, const std::string& source) {
  TokenTable table;
  std::map<std::string, size_t, std::less<>> name_lines;
  std::map<std::string, std::pair<size_t, std::string>, std::less<>> token_lines;  // token → (line, name)
  size_t line_number = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    const auto words = words_of(line);
    if (words.empty() || words.front().front() == '#') {
      continue;
    }
    if (words.size() != 3) {
      return fail(ErrorCode::kParse, "{}:{}: expected NAME SCOPE TOKEN, found {} word{}", source, line_number,
                  words.size(), words.size() == 1 ? "" : "s");
    }
    const std::string_view name = words[0];
    const std::string_view scope_text = words[1];
    const std::string_view token = words[2];
    if (name.size() > kMaxNameChars) {
      return fail(ErrorCode::kParse, "{}:{}: a name of {} characters (at most {})", source, line_number,
                  name.size(), kMaxNameChars);
    }
    for (const char c : name) {
      if (!name_character(c)) {
        return fail(ErrorCode::kParse, "{}:{}: the name {} may only hold letters, digits and . _ @ -", source,
                    line_number, shown(name));
      }
    }
    const auto scope = scope_from_string(scope_text);
    if (!scope) {
      return fail(ErrorCode::kParse, "{}:{}: unknown scope {} for {} (read, control or admin)", source,
                  line_number, shown(scope_text), name);
    }
    if (const auto seen = name_lines.find(name); seen != name_lines.end()) {
      return fail(ErrorCode::kParse, "{}:{}: {} is named twice (first on line {})", source, line_number, name,
                  seen->second);
    }
    if (token == kCertificateWord) {
      // Not a secret: the client proves itself with a certificate of the daemon's client authority.
      name_lines.emplace(std::string(name), line_number);
      table.entries_.push_back({std::string(name), *scope, std::string(), true});
      continue;
    }
    for (size_t i = 0; i < token.size(); ++i) {
      const auto c = static_cast<unsigned char>(token[i]);
      if (c < 0x21 || c > 0x7E) {
        return fail(ErrorCode::kParse,
                    "{}:{}: the token of {} holds a character that is not printable ASCII (its character {})",
                    source, line_number, name, i + 1);
      }
    }
    if (token.size() < kMinTokenChars || token.size() > kMaxTokenChars) {
      return fail(ErrorCode::kParse,
                  "{}:{}: the token of {} has {} characters: {} to {} are accepted (make one with `openssl "
                  "rand -hex 32`)",
                  source, line_number, name, token.size(), kMinTokenChars, kMaxTokenChars);
    }
    if (const auto seen = token_lines.find(token); seen != token_lines.end()) {
      return fail(ErrorCode::kParse,
                  "{}:{}: the token of {} is also {}'s (line {}): each client needs its own token", source,
                  line_number, name, seen->second.second, seen->second.first);
    }
    name_lines.emplace(std::string(name), line_number);
    token_lines.emplace(std::string(token), std::pair{line_number, std::string(name)});
    table.entries_.push_back({std::string(name), *scope, std::string(token), false});
  }
  if (table.entries_.empty()) {
    return fail(ErrorCode::kParse,
                "{}: no token (each line is NAME SCOPE TOKEN, or NAME SCOPE certificate; # starts a comment)",
                source);
  }
  return table;
}

Result<TokenTable> TokenTable::load(const std::string& path, uid_t daemon_uid) {
  const auto text =
      JOULE_TRY(read_private_file(path, {"token file", "its tokens are secrets"}, daemon_uid, kMaxFileBytes));
  return parse(text, path);
}

std::optional<TokenEntry> TokenTable::find(std::string_view presented) const {
  // Every entry is compared over its whole length, whatever matched before: the time depends on the
  // lengths only.
  std::optional<size_t> match;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].by_certificate) {
      continue;
    }
    const std::string& token = entries_[i].token;
    unsigned difference = presented.size() != token.size() ? 1U : 0U;
    for (size_t j = 0; j < token.size(); ++j) {
      const char given = j < presented.size() ? presented[j] : '\0';
      difference |= static_cast<unsigned char>(token[j]) ^ static_cast<unsigned char>(given);
    }
    if (difference == 0) {
      match = i;
    }
  }
  if (!match) {
    return std::nullopt;
  }
  return entries_[*match];
}

std::optional<TokenEntry> TokenTable::find_certificate(std::string_view common_name) const {
  const auto found = std::find_if(entries_.begin(), entries_.end(), [common_name](const TokenEntry& entry) {
    return entry.by_certificate && entry.name == common_name;
  });
  if (found == entries_.end()) {
    return std::nullopt;
  }
  return *found;
}

std::string TokenTable::describe() const {
  std::vector<std::string> parts;
  parts.reserve(entries_.size());
  for (const auto& entry : entries_) {
    parts.push_back(fmt::format("{} ({}{})", entry.name, to_string(entry.scope),
                                entry.by_certificate ? ", certificate" : ""));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace joule::daemon
