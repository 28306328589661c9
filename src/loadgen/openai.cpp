// SPDX-License-Identifier: Apache-2.0
#include "joule/loadgen/openai.hpp"

#include <charconv>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/json.hpp"
#include "joule/core/strings.hpp"
#include "joule/http/errors.hpp"

#include "loadgen/completion_fields.hpp"

namespace joule::loadgen {

Result<Endpoint> parse_endpoint(const std::string& text) {
  const auto refuse = [&](std::string_view why) {
    return fail(ErrorCode::kInvalidArgument,
                "'{}': {}: expected http://HOST:PORT (e.g. http://127.0.0.1:8000)", text, why);
  };
  constexpr std::string_view kScheme = "http://";
  if (text.rfind(kScheme, 0) != 0) {
    return refuse(text.rfind("https://", 0) == 0 ? "https is not supported" : "not an http:// URL");
  }
  std::string rest = text.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') {
    rest.pop_back();
  }
  if (rest.find('/') != std::string::npos) {
    return refuse("a path is not allowed (the endpoint's /v1/… paths are used)");
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) {
    return refuse("no port");
  }
  Endpoint endpoint;
  endpoint.host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), endpoint.port);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || endpoint.port < 1 ||
      endpoint.port > 65535) {
    return refuse(fmt::format("'{}' is not a port", port));
  }
  if (endpoint.host.empty() || endpoint.host.find_first_of("@?#") != std::string::npos) {
    return refuse("no host");
  }
  endpoint.origin = fmt::format("http://{}:{}", endpoint.host, endpoint.port);
  return endpoint;
}

std::string failure_text(const http::Failure& failure, const LimitNames& names) {
  const std::string* name = nullptr;
  if (failure.kind == http::Failure::Kind::kTooLarge) {
    name = &names.max_response;
  } else if (failure.kind == http::Failure::Kind::kTimeout) {
    name = &names.timeout;
  }
  return name == nullptr || name->empty() ? failure.message : fmt::format("{} ({})", failure.message, *name);
}

Result<std::string> resolve_model(const Endpoint& endpoint, const std::string& model,
                                  const http::RequestLimits& limits, const LimitNames& names) {
  http::Connection connection(endpoint.host, endpoint.port);
  const auto response = connection.get("/v1/models", {{"Accept", "application/json"}}, limits);
  if (!response) {
    const http::Failure& failure = response.error();
    if (failure.kind != http::Failure::Kind::kTooLarge && failure.kind != http::Failure::Kind::kTimeout) {
      return fail(ErrorCode::kIo, "cannot reach the endpoint {} (GET /v1/models: {})", endpoint.origin,
                  failure_text(failure, names));
    }
    return fail(ErrorCode::kIo, "{} GET /v1/models: {}", endpoint.origin, failure_text(failure, names));
  }
  if (!model.empty()) {
    return model;
  }
  if (response->status != 200) {
    return fail(ErrorCode::kIo, "{} GET /v1/models: HTTP {}: {} (name the model with --model)",
                endpoint.origin, response->status, http::server_error_text(response->body));
  }
  const auto json = parse_json(response->body);
  const nlohmann::json* id = nullptr;
  if (json && json->is_object()) {
    const auto data = json->find("data");
    if (data != json->end() && data->is_array() && !data->empty() && (*data)[0].is_object()) {
      const auto found = (*data)[0].find("id");
      id = found != (*data)[0].end() && found->is_string() ? &*found : nullptr;
    }
  }
  if (id == nullptr) {
    return fail(ErrorCode::kParse, "{} GET /v1/models lists no model id (name the model with --model)",
                endpoint.origin);
  }
  // The id is printed in reports: refuse one that would need escaping or flood them.
  const auto& name = id->get_ref<const std::string&>();
  if (name.empty() || name.size() > kMaxModelIdBytes || printable_excerpt(name, kMaxModelIdBytes) != name) {
    return fail(ErrorCode::kParse,
                "{} GET /v1/models: the first model id {} is not a printable name of 1 to {} bytes (name the "
                "model with --model)",
                endpoint.origin, quoted_excerpt(name), kMaxModelIdBytes);
  }
  return name;
}

std::string synthetic_prompt(int64_t tokens, size_t request, bool words) {
  static constexpr std::string_view kWords[] = {"the",  "of",  "and", "to", "in",   "is",
                                                "that", "for", "it",  "as", "with", "was",
                                                "on",   "be",  "at",  "by", "this", "from"};
  constexpr size_t kWordCount = sizeof(kWords) / sizeof(kWords[0]);
  uint64_t state = 0x9E3779B97F4A7C15ULL * (request + 1);
  const auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  std::string prompt;
  prompt.reserve(static_cast<size_t>(tokens) * (words ? 5 : 1));
  for (int64_t i = 0; i < tokens; ++i) {
    if (words) {
      if (i > 0) {
        prompt += ' ';
      }
      prompt += kWords[next() % kWordCount];
    } else {
      prompt += static_cast<char>('a' + next() % 26);
    }
  }
  return prompt;
}

std::string completion_body(const std::string& model, const std::string& prompt, int64_t max_tokens,
                            bool stream) {
  nlohmann::json body = {
      {"model", model}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", stream}};
  if (stream) {
    // The token counts in a last chunk (vLLM, SGLang, TGI and llama.cpp's server send it when asked).
    body["stream_options"] = {{"include_usage", true}};
  }
  return body.dump();
}

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::kPending:
      return "not_sent";
    case Outcome::kOk:
      return "ok";
    case Outcome::kHttpError:
      return "http_error";
    case Outcome::kTimeout:
      return "timeout";
    case Outcome::kConnectionError:
      return "connection_error";
    case Outcome::kBadResponse:
      return "bad_response";
  }
  return "ok";
}

namespace detail {

// usage's token count `key`: absent (nullopt), or a whole number from 0 to kMaxUsageTokens; anything else
// sets `error` (the first such field) naming the field.
std::optional<int64_t> usage_count(const nlohmann::json& usage, const char* key, std::string& error) {
  const auto it = usage.find(key);
  if (it == usage.end()) {
    return std::nullopt;
  }
  // nlohmann keeps integers from 2^63 up as unsigned, negative ones as signed.
  bool in_range = false;
  if (it->is_number_unsigned()) {
    in_range = it->get<uint64_t>() <= kMaxUsageTokens;
  } else if (it->is_number_integer()) {
    in_range = it->get<int64_t>() >= 0 && it->get<int64_t>() <= kMaxUsageTokens;
  }
  if (!in_range) {
    if (error.empty()) {
      error = fmt::format("the response's usage.{} must be a whole number from 0 to {}, got {}", key,
                          kMaxUsageTokens, describe_json(*it));
    }
    return std::nullopt;
  }
  return it->get<int64_t>();
}

// joule's extension (examples/serve_llm.py): usage.energy's time `key`, absent, null (tpot_s of a one-token
// answer) or a number of seconds from 0 to kMaxServerSeconds; anything else sets `error`, naming the field,
// so that no figure of a report (a sum in the metrics) becomes inf.
std::optional<double> usage_seconds(const nlohmann::json& energy, const char* key, std::string& error) {
  const auto it = energy.find(key);
  if (it == energy.end() || it->is_null()) {
    return std::nullopt;
  }
  if (it->is_number() && it->get<double>() >= 0 && it->get<double>() <= kMaxServerSeconds) {
    return it->get<double>();
  }
  if (error.empty()) {
    error = fmt::format(
        "the response's usage.energy.{} must be a number of seconds from 0 to {:g} (a day), got {}", key,
        kMaxServerSeconds, describe_json(*it));
  }
  return std::nullopt;
}

Completion refused(Outcome outcome, std::string error) {
  Completion completion;
  completion.outcome = outcome;
  completion.error = std::move(error);
  return completion;
}

// A body that parse_json() refused, in words.
std::string unparsable(const JsonError& error, const std::string& body) {
  switch (error.kind) {
    case JsonError::Kind::kTooDeep:
      return fmt::format("the response is JSON nested deeper than {} levels", kMaxJsonDepth);
    case JsonError::Kind::kNumberOutOfRange:
      return fmt::format("the response is not usable JSON: {}", error.message);
    case JsonError::Kind::kSyntax:
      break;
  }
  return fmt::format("the response is not JSON: {}", quoted_excerpt(body, 60));
}

Completion no_answer(const http::Failure& failure, const LimitNames& names) {
  switch (failure.kind) {
    case http::Failure::Kind::kTimeout:
      return refused(Outcome::kTimeout, failure_text(failure, names));
    case http::Failure::Kind::kTooLarge:
      return refused(Outcome::kBadResponse, failure_text(failure, names));
    default:
      return refused(Outcome::kConnectionError, failure_text(failure, names));
  }
}

std::optional<double> usage_joules(const nlohmann::json& energy, std::string& error) {
  const auto it = energy.find("energy_j");
  if (it == energy.end() || it->is_null()) {
    return std::nullopt;
  }
  if (it->is_number() && it->get<double>() >= 0 && it->get<double>() <= kMaxServerJoules) {
    return it->get<double>();
  }
  if (error.empty()) {
    error =
        fmt::format("the response's usage.energy.energy_j must be a number of joules from 0 to {:g}, got {}",
                    kMaxServerJoules, describe_json(*it));
  }
  return std::nullopt;
}

void read_server_energy(const nlohmann::json& usage, Completion& answer, std::string& error) {
  const auto energy = usage.find("energy");
  if (energy == usage.end() || !energy->is_object()) {
    return;
  }
  answer.server_ttft_s = usage_seconds(*energy, "ttft_s", error);
  answer.server_tpot_s = usage_seconds(*energy, "tpot_s", error);
  answer.server_energy_j = usage_joules(*energy, error);
}

}  // namespace detail

using detail::no_answer;
using detail::refused;
using detail::unparsable;
using detail::usage_count;

Completion read_completion(const tl::expected<http::Response, http::Failure>& result,
                           const LimitNames& names) {
  if (!result) {
    return no_answer(result.error(), names);
  }
  const http::Response& response = *result;
  if (response.status < 200 || response.status >= 300) {
    return refused(Outcome::kHttpError,
                   fmt::format("HTTP {}: {}", response.status, http::server_error_text(response.body)));
  }
  const auto parsed = parse_json(response.body);
  if (!parsed) {
    return refused(Outcome::kBadResponse, unparsable(parsed.error(), response.body));
  }
  const nlohmann::json& json = *parsed;
  if (!json.is_object()) {
    return refused(Outcome::kBadResponse,
                   fmt::format("the response is not a JSON object: {}", describe_json(json)));
  }
  const auto usage = json.find("usage");
  if (usage == json.end() || !usage->is_object()) {
    return refused(Outcome::kBadResponse, "the response has no usage object (token counts)");
  }
  std::string error;
  const auto prompt = usage_count(*usage, "prompt_tokens", error);
  const auto completion = usage_count(*usage, "completion_tokens", error);
  if (!error.empty()) {
    return refused(Outcome::kBadResponse, std::move(error));
  }
  if (!completion) {
    return refused(Outcome::kBadResponse, "the response has no usage.completion_tokens");
  }
  Completion answer;
  detail::read_server_energy(*usage, answer, error);
  if (!error.empty()) {
    return refused(Outcome::kBadResponse, std::move(error));
  }
  // Not streamed: the server's times are the only ones.
  answer.ttft_s = answer.server_ttft_s;
  answer.tpot_s = answer.server_tpot_s;
  answer.prompt_tokens = prompt.value_or(0);
  answer.completion_tokens = *completion;
  answer.outcome = Outcome::kOk;
  return answer;
}

measure::FinishedRequest RequestRecord::finished() const {
  measure::FinishedRequest request;
  request.arrival_s = start_s;
  request.finish_s = end_s;
  if (completion.first_token_s) {
    request.first_token_s = completion.first_token_s;
    request.finish_s = completion.last_token_s.value_or(end_s);
  } else if (completion.ttft_s) {
    request.first_token_s = start_s + *completion.ttft_s;
    if (completion.tpot_s && completion.completion_tokens > 1) {
      request.finish_s =
          *request.first_token_s + *completion.tpot_s * static_cast<double>(completion.completion_tokens - 1);
    }
  }
  request.prompt_tokens = completion.prompt_tokens;
  request.output_tokens = completion.completion_tokens;
  request.energy_j = energy_j;
  return request;
}

}  // namespace joule::loadgen
