// SPDX-License-Identifier: Apache-2.0
// Private: how a completion's answer is read, shared by the whole answer (openai.cpp) and the streamed one
// (stream.cpp): the usage fields, each checked in range with the field named, and the words for a failure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "joule/core/json.hpp"
#include "joule/loadgen/openai.hpp"

namespace joule::loadgen::detail {

/// usage's token count `key`: absent (nullopt), or a whole number from 0 to kMaxUsageTokens; anything else
/// sets `error` (the first such field) naming the field.
std::optional<int64_t> usage_count(const nlohmann::json& usage, const char* key, std::string& error);
/// joule's extension: usage.energy's time `key`, absent, null or seconds from 0 to kMaxServerSeconds.
std::optional<double> usage_seconds(const nlohmann::json& energy, const char* key, std::string& error);
/// usage.energy's ttft_s, tpot_s and energy_j (joule's extension), when usage has an energy object, into
/// `answer`'s server_* fields; a value out of range sets `error`.
void read_server_energy(const nlohmann::json& usage, Completion& answer, std::string& error);
/// @return a failed completion.
Completion refused(Outcome outcome, std::string error);
/// @return what parse_json() refused of a response `body`, in words ("the response is not JSON: …").
std::string unparsable(const JsonError& error, const std::string& body);
/// @return the completion of a request that got no answer (timeout, connection, over the cap).
Completion no_answer(const http::Failure& failure, const LimitNames& names);

}  // namespace joule::loadgen::detail
