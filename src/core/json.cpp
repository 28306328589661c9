// SPDX-License-Identifier: Apache-2.0
// Bounded JSON parsing: nlohmann's SAX parser (which keeps its own state on the heap, not the stack) feeding
// a document builder that refuses to open a container past the depth limit, so no recursive algorithm (dump,
// comparison, destruction, our own readers) ever meets a deep document.
#include "joule/core/json.hpp"

#include <vector>

#include <fmt/format.h>

#include "joule/core/strings.hpp"

namespace joule {

namespace {

using nlohmann::json;

// One open container of the document being built, and where its next value goes.
struct Frame {
  json* container = nullptr;
  std::string key;  // objects: the key read last
};

class BoundedBuilder {
 public:
  BoundedBuilder(json& root, int max_depth) : root_(root), max_depth_(max_depth) {}

  bool null() { return add(nullptr) != nullptr; }
  bool boolean(bool value) { return add(value) != nullptr; }
  bool number_integer(json::number_integer_t value) { return add(value) != nullptr; }
  bool number_unsigned(json::number_unsigned_t value) { return add(value) != nullptr; }
  bool number_float(json::number_float_t value, const json::string_t& /*text*/) {
    return add(value) != nullptr;
  }
  bool string(json::string_t& value) { return add(std::move(value)) != nullptr; }
  bool binary(json::binary_t& value) { return add(json::binary(std::move(value))) != nullptr; }

  bool start_object(size_t /*elements*/) { return open(json::object()); }
  bool key(json::string_t& name) {
    frames_.back().key = std::move(name);
    return true;
  }
  bool end_object() {
    frames_.pop_back();
    return true;
  }
  bool start_array(size_t /*elements*/) { return open(json::array()); }
  bool end_array() {
    frames_.pop_back();
    return true;
  }

  bool parse_error(size_t position, const std::string& last_token, const nlohmann::detail::exception& error) {
    error_.byte = position > 0 ? position - 1 : 0;
    error_.path = path();
    const std::string where = error_.path.empty() ? std::string() : error_.path + ": ";
    // nlohmann's number overflow (out_of_range.406) and its syntax errors (parse_error.1xx).
    if (error.id == 406) {
      error_.kind = JsonError::Kind::kNumberOutOfRange;
      error_.message = fmt::format(
          "{}the number {} is out of range (a finite number within ±1.8e308 is "
          "expected)",
          where, printable_excerpt(last_token, 40));
      return false;
    }
    error_.kind = JsonError::Kind::kSyntax;
    std::string what = error.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: …; last read: '<token>'": drop the
    // tag, and cut the echoed token, which can be a whole (huge) string.
    if (const auto tag_end = what.find("] ");
        what.starts_with("[json.exception") && tag_end != std::string::npos) {
      what = what.substr(tag_end + 2);
    }
    if (const auto last = what.find("; last read: '"); last != std::string::npos) {
      what = what.substr(0, last) + "; last read: '" + printable_excerpt(last_token, 40) + "'";
    }
    error_.message = printable_excerpt(what, 300);
    return false;
  }

  bool too_deep() const { return too_deep_; }
  JsonError& error() { return error_; }

 private:
  // Places `value` where the document expects the next value. @return where it now lives.
  json* add(json value) {
    if (frames_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Frame& frame = frames_.back();
    if (frame.container->is_array()) {
      frame.container->push_back(std::move(value));
      return &frame.container->back();
    }
    json& slot = (*frame.container)[frame.key];
    slot = std::move(value);
    return &slot;
  }

  bool open(json empty) {
    if (static_cast<int>(frames_.size()) >= max_depth_) {
      too_deep_ = true;
      error_.kind = JsonError::Kind::kTooDeep;
      error_.path = path();
      error_.message = fmt::format("{}{}the document is nested deeper than {} levels", error_.path,
                                   error_.path.empty() ? "" : ": ", max_depth_);
      return false;
    }
    json* container = add(std::move(empty));
    frames_.push_back({container, {}});
    return true;
  }

  // "rows[3].time_s": the path of the value being parsed now (its first 120 characters).
  std::string path() const {
    std::string text;
    for (size_t i = 0; i < frames_.size() && text.size() < 120; ++i) {
      const Frame& frame = frames_[i];
      if (frame.container->is_array()) {
        // An open child is the array's last item; otherwise the next value becomes item size().
        const size_t size = frame.container->size();
        text += fmt::format("[{}]", i + 1 < frames_.size() && size > 0 ? size - 1 : size);
      } else {
        if (!text.empty()) {
          text += '.';
        }
        text += printable_excerpt(frame.key, 40);
      }
    }
    return text.size() < 120 ? text : text.substr(0, 120) + "…";
  }

  json& root_;
  int max_depth_;
  std::vector<Frame> frames_;
  bool too_deep_ = false;
  JsonError error_;
};

}  // namespace

tl::expected<nlohmann::json, JsonError> parse_json(std::string_view text, int max_depth) {
  json root;
  BoundedBuilder builder(root, max_depth);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const json::exception& error) {
    // sax_parse reports through parse_error(); anything thrown besides is still bad input, not a crash.
    JsonError failure;
    failure.message = printable_excerpt(error.what(), 300);
    return tl::make_unexpected(std::move(failure));
  }
  if (!ok) {
    // The byte offset of a too-deep document is not known to the builder; the path says where.
    return tl::make_unexpected(std::move(builder.error()));
  }
  return root;
}

std::string describe_json(const nlohmann::json& value, size_t max_chars) {
  switch (value.type()) {
    case json::value_t::object: {
      if (value.empty()) {
        return "an empty object {}";
      }
      std::string keys;
      size_t shown = 0;
      for (const auto& [key, item] : value.items()) {
        if (shown == 3 || keys.size() > max_chars) {
          keys += ", …";
          break;
        }
        keys += fmt::format("{}{}", shown == 0 ? "" : ", ", quoted_excerpt(key, 24));
        ++shown;
      }
      return fmt::format("an object with {} key{} ({})", value.size(), value.size() == 1 ? "" : "s", keys);
    }
    case json::value_t::array:
      return value.empty() ? "an empty array []"
                           : fmt::format("an array of {} item{}", value.size(), value.size() == 1 ? "" : "s");
    case json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      if (text.size() <= max_chars) {
        return quoted_excerpt(text, max_chars);
      }
      return fmt::format("a string of {} bytes {}", text.size(), quoted_excerpt(text, max_chars / 2));
    }
    case json::value_t::binary:
      return fmt::format("binary data of {} bytes", value.get_binary().size());
    case json::value_t::discarded:
      return "a discarded value";
    default:
      // null, booleans and numbers: their JSON text is short.
      return printable_excerpt(value.dump(), max_chars);
  }
}

namespace {

// Where an error body keeps its message: the first string among "error", "message" and "detail" (or their
// "message" field), else the first of those keys present (`message` null), else nothing.
struct ErrorBodyField {
  const std::string* message = nullptr;
  const json* value = nullptr;
};

ErrorBodyField error_body_field(const json& body) {
  ErrorBodyField found;
  if (!body.is_object()) {
    return found;
  }
  for (const char* key : {"error", "message", "detail"}) {
    const auto it = body.find(key);
    if (it == body.end()) {
      continue;
    }
    if (it->is_string()) {
      return {&it->get_ref<const std::string&>(), &*it};
    }
    if (it->is_object()) {
      const auto message = it->find("message");
      if (message != it->end() && message->is_string()) {
        return {&message->get_ref<const std::string&>(), &*message};
      }
    }
    found.value = found.value != nullptr ? found.value : &*it;
  }
  return found;
}

}  // namespace

std::string error_body_message(std::string_view body, size_t max_chars) {
  if (body.empty()) {
    return "empty body";
  }
  const auto parsed = parse_json(body);
  const std::string* message = parsed ? error_body_field(*parsed).message : nullptr;
  return printable_excerpt(message != nullptr ? std::string_view(*message) : body, max_chars);
}

std::string parsed_error_body_message(const nlohmann::json& body, size_t max_chars) {
  const ErrorBodyField field = error_body_field(body);
  if (field.message != nullptr) {
    return printable_excerpt(*field.message, max_chars);
  }
  return describe_json(field.value != nullptr ? *field.value : body, max_chars);
}

std::string describe_json_error(const JsonError& error, std::string_view text, int max_depth) {
  switch (error.kind) {
    case JsonError::Kind::kTooDeep:
      return fmt::format("is JSON nested deeper than {} levels", max_depth);
    case JsonError::Kind::kNumberOutOfRange:
      return fmt::format("is not usable JSON: {}", error.message);
    case JsonError::Kind::kSyntax:
      break;
  }
  return fmt::format("is not JSON: {}", quoted_excerpt(text, 60));
}

}  // namespace joule
