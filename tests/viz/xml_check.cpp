// SPDX-License-Identifier: Apache-2.0
#include "xml_check.hpp"

#include <algorithm>
#include <set>
#include <vector>

#include <fmt/format.h>

namespace joule::viz::test {

namespace {

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Checks character data (text or an attribute value) for a stray '<' or an unknown entity.
std::string check_text(std::string_view text, size_t offset) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<') {
      return fmt::format("'<' in character data at {}", offset + i);
    }
    if (text[i] != '&') {
      continue;
    }
    const size_t end = text.find(';', i);
    if (end == std::string_view::npos) {
      return fmt::format("unterminated entity at {}", offset + i);
    }
    const std::string_view entity = text.substr(i + 1, end - i - 1);
    const bool named =
        entity == "amp" || entity == "lt" || entity == "gt" || entity == "quot" || entity == "apos";
    const bool decimal =
        entity.size() > 1 && entity[0] == '#' &&
        std::all_of(entity.begin() + 1, entity.end(), [](char c) { return c >= '0' && c <= '9'; });
    const bool hexadecimal =
        entity.size() > 2 && entity[0] == '#' && entity[1] == 'x' &&
        std::all_of(entity.begin() + 2, entity.end(), [](char c) {
          return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        });
    if (!named && !decimal && !hexadecimal) {
      return fmt::format("unknown entity '&{};' at {}", entity, offset + i);
    }
    i = end;
  }
  return "";
}

}  // namespace

std::string xml_problem(std::string_view xml) {
  size_t pos = 0;
  if (xml.substr(0, 5) == "<?xml") {
    pos = xml.find("?>");
    if (pos == std::string_view::npos) {
      return "unterminated XML declaration";
    }
    pos += 2;
  }
  std::vector<std::string_view> open;
  int roots = 0;
  while (pos < xml.size()) {
    const size_t lt = xml.find('<', pos);
    const std::string_view text = xml.substr(pos, (lt == std::string_view::npos ? xml.size() : lt) - pos);
    if (open.empty() && !std::all_of(text.begin(), text.end(), is_space)) {
      return fmt::format("text outside the root element at {}", pos);
    }
    if (auto problem = check_text(text, pos); !problem.empty()) {
      return problem;
    }
    if (lt == std::string_view::npos) {
      break;
    }
    pos = lt + 1;
    if (xml.substr(lt, 4) == "<!--") {
      const size_t end = xml.find("-->", lt + 4);
      if (end == std::string_view::npos) {
        return fmt::format("unterminated comment at {}", lt);
      }
      pos = end + 3;
      continue;
    }
    const bool closing = pos < xml.size() && xml[pos] == '/';
    pos += closing ? 1 : 0;
    const size_t name_start = pos;
    if (pos >= xml.size() || !is_name_start(xml[pos])) {
      return fmt::format("bad tag name at {}", pos);
    }
    while (pos < xml.size() && is_name_char(xml[pos])) {
      ++pos;
    }
    const std::string_view name = xml.substr(name_start, pos - name_start);
    if (closing) {
      while (pos < xml.size() && is_space(xml[pos])) {
        ++pos;
      }
      if (pos >= xml.size() || xml[pos] != '>') {
        return fmt::format("bad closing tag </{}> at {}", name, lt);
      }
      if (open.empty() || open.back() != name) {
        return fmt::format("</{}> at {} closes {}", name, lt,
                           open.empty() ? std::string("nothing") : fmt::format("<{}>", open.back()));
      }
      open.pop_back();
      ++pos;
      continue;
    }
    if (open.empty() && ++roots > 1) {
      return fmt::format("a second root element <{}> at {}", name, lt);
    }
    std::set<std::string_view> attributes;
    for (;;) {
      const size_t before = pos;
      while (pos < xml.size() && is_space(xml[pos])) {
        ++pos;
      }
      if (pos >= xml.size()) {
        return fmt::format("unterminated tag <{}> at {}", name, lt);
      }
      if (xml.substr(pos, 2) == "/>") {
        pos += 2;
        break;
      }
      if (xml[pos] == '>') {
        open.push_back(name);
        ++pos;
        break;
      }
      if (pos == before || !is_name_start(xml[pos])) {
        return fmt::format("bad attribute in <{}> at {}", name, pos);
      }
      const size_t attribute_start = pos;
      while (pos < xml.size() && is_name_char(xml[pos])) {
        ++pos;
      }
      const std::string_view attribute = xml.substr(attribute_start, pos - attribute_start);
      if (!attributes.insert(attribute).second) {
        return fmt::format("attribute {} repeated in <{}> at {}", attribute, name, attribute_start);
      }
      if (pos + 1 >= xml.size() || xml[pos] != '=' || (xml[pos + 1] != '"' && xml[pos + 1] != '\'')) {
        return fmt::format("attribute {} in <{}> at {} needs =\"value\"", attribute, name, attribute_start);
      }
      const char quote = xml[pos + 1];
      const size_t end = xml.find(quote, pos + 2);
      if (end == std::string_view::npos) {
        return fmt::format("unterminated value of {} at {}", attribute, pos);
      }
      if (auto problem = check_text(xml.substr(pos + 2, end - pos - 2), pos + 2); !problem.empty()) {
        return problem;
      }
      pos = end + 1;
    }
  }
  if (!open.empty()) {
    return fmt::format("<{}> is never closed", open.back());
  }
  if (roots == 0) {
    return "no root element";
  }
  return "";
}

}  // namespace joule::viz::test
