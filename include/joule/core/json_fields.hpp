// SPDX-License-Identifier: Apache-2.0
// joule/core/json_fields.hpp — reading wire objects (Zeus's pydantic models and joule's) field by field:
// every error names the field's path ("trials[2].status: field required") in pydantic's wording, so that a
// server can answer FastAPI's 422 with the field named.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"

namespace joule {

/// Throws joule::Exception(code, "<where>: <message>") (just the message if `where` is empty): how a
/// JsonFields parse stops; catch_json_fields() turns it into a Result.
[[noreturn]] inline void throw_json_field_error(ErrorCode code, const std::string& where,
                                                std::string_view message) {
  throw Exception(code, where.empty() ? std::string(message) : fmt::format("{}: {}", where, message));
}

/// Reads the fields of one JSON object (a wire object of an HTTP API); every error names the field's path
/// (e.g. "trials[2].status") and uses
// pydantic's wording where Zeus's API would.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& value, std::string path, ErrorCode code)
      : object_(value), path_(std::move(path)), code_(code) {
    if (!object_.is_object()) {
      throw_json_field_error(code_, path_, "value is not a valid dict");
    }
  }

  std::string where(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  ErrorCode code() const { return code_; }

  /// @return the value, or nullptr if the key is absent.
  const nlohmann::json* find(std::string_view key) const {
    const auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  const nlohmann::json& require(std::string_view key) const {
    const nlohmann::json* value = find(key);
    if (value == nullptr) {
      throw_json_field_error(code_, where(key), "field required");
    }
    return *value;
  }
  /// @return the value, or nullptr if it is absent or null (an optional field left unset).
  const nlohmann::json* optional(std::string_view key) const {
    const nlohmann::json* value = find(key);
    return value == nullptr || value->is_null() ? nullptr : value;
  }

  int64_t integer(std::string_view key) const { return to_integer(require(key), where(key)); }
  double number(std::string_view key) const { return to_number(require(key), where(key)); }
  bool boolean(std::string_view key) const { return to_boolean(require(key), where(key)); }
  std::string string(std::string_view key) const { return to_string_value(require(key), where(key)); }

  int64_t to_integer(const nlohmann::json& value, const std::string& at) const {
    if (value.is_number_integer() && !value.is_number_unsigned()) {
      return value.get<int64_t>();
    }
    if (value.is_number_unsigned() && value.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) {
      return static_cast<int64_t>(value.get<uint64_t>());
    }
    if (value.is_null()) {
      throw_json_field_error(code_, at, "none is not an allowed value");
    }
    throw_json_field_error(code_, at, "value is not a valid integer");
  }
  double to_number(const nlohmann::json& value, const std::string& at) const {
    if (value.is_number()) {
      return value.get<double>();
    }
    if (value.is_null()) {
      throw_json_field_error(code_, at, "none is not an allowed value");
    }
    throw_json_field_error(code_, at, "value is not a valid float");
  }
  bool to_boolean(const nlohmann::json& value, const std::string& at) const {
    if (value.is_boolean()) {
      return value.get<bool>();
    }
    if (value.is_null()) {
      throw_json_field_error(code_, at, "none is not an allowed value");
    }
    throw_json_field_error(code_, at, "value could not be parsed to a boolean");
  }
  std::string to_string_value(const nlohmann::json& value, const std::string& at) const {
    if (value.is_string()) {
      return value.get<std::string>();
    }
    if (value.is_null()) {
      throw_json_field_error(code_, at, "none is not an allowed value");
    }
    throw_json_field_error(code_, at, "str type expected");
  }

 private:
  const nlohmann::json& object_;
  std::string path_;
  ErrorCode code_;
};

/// Runs `parse` and turns a thrown joule::Exception (throw_json_field_error()) into the Result's error.
template <class T, class Parse>
Result<T> catch_json_fields(Parse&& parse) {
  try {
    return parse();
  } catch (const Exception& e) {
    return tl::make_unexpected(e.error());
  }
}

}  // namespace joule
