// SPDX-License-Identifier: Apache-2.0
#include "joule/loadgen/stream.hpp"

#include <cmath>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/json.hpp"

#include "loadgen/completion_fields.hpp"

namespace joule::loadgen {

CompletionStream::CompletionStream(std::function<double()> now_s, double sent_s, double bin_s)
    : now_s_(std::move(now_s)), sent_s_(sent_s), bin_s_(bin_s) {}

bool CompletionStream::on_body(std::string_view piece) {
  const auto fed = parser_.feed(piece, [this](std::string_view data) { return on_event(data); });
  if (!fed) {
    error_ = fed.error().message();
  }
  return fed.has_value();
}

Result<void> CompletionStream::on_event(std::string_view data) {
  ++events_;
  if (done_) {
    return {};  // nothing after [DONE] counts
  }
  if (data == "[DONE]") {
    done_ = true;
    return {};
  }
  const double at_s = now_s_();
  const auto parsed = parse_json(data);
  if (!parsed) {
    return fail(ErrorCode::kParse, "the stream's event {} {}", events_,
                describe_json_error(parsed.error(), data));
  }
  const nlohmann::json& chunk = *parsed;
  if (!chunk.is_object()) {
    return fail(ErrorCode::kParse, "the stream's event {} is not a JSON object: {}", events_,
                describe_json(chunk));
  }
  if (chunk.contains("error")) {
    return fail(ErrorCode::kParse, "the server sent an error in the stream: {}",
                parsed_error_body_message(chunk));
  }
  std::optional<int64_t> running;  // this chunk's usage.completion_tokens
  const auto usage = chunk.find("usage");
  if (usage != chunk.end() && usage->is_object()) {
    std::string error;
    const auto prompt = detail::usage_count(*usage, "prompt_tokens", error);
    running = detail::usage_count(*usage, "completion_tokens", error);
    detail::read_server_energy(*usage, server_, error);
    if (!error.empty()) {
      return fail(ErrorCode::kOutOfRange, "{}", error);
    }
    prompt_tokens_ = prompt ? prompt : prompt_tokens_;
  }
  const auto choices = chunk.find("choices");
  if (choices != chunk.end() && choices->is_array() && !choices->empty() && (*choices)[0].is_object()) {
    const auto reason = (*choices)[0].find("finish_reason");
    finished_ = finished_ || (reason != (*choices)[0].end() && reason->is_string());
    const auto text = (*choices)[0].find("text");
    if (text != (*choices)[0].end() && text->is_string() && !text->get_ref<const std::string&>().empty()) {
      // A running usage count (vLLM's continuous_usage_stats) says how many tokens this chunk holds.
      const int64_t tokens = running && completion_tokens_ && *running > *completion_tokens_
                                 ? *running - *completion_tokens_
                                 : 1;
      add_chunk(at_s, tokens);
    }
  }
  if (running) {
    completion_tokens_ = running;
  }
  return {};
}

void CompletionStream::add_chunk(double at_s, int64_t tokens) {
  ++chunks_;
  counted_tokens_ += tokens;
  if (!first_token_s_) {
    first_token_s_ = at_s;
  }
  last_token_s_ = at_s;
  const auto bin = static_cast<int64_t>(std::floor(at_s / bin_s_));
  if (bin == last_bin_ && !arrivals_.empty()) {
    arrivals_.back().tokens += static_cast<double>(tokens);
  } else {
    arrivals_.push_back({at_s, static_cast<double>(tokens)});
    last_bin_ = bin;
  }
}

Completion CompletionStream::finish(const tl::expected<http::Response, http::Failure>& result,
                                    const LimitNames& names) {
  if (!result) {
    if (result.error().kind == http::Failure::Kind::kStopped && !error_.empty()) {
      return detail::refused(Outcome::kBadResponse, error_);
    }
    return detail::no_answer(result.error(), names);
  }
  if (result->status < 200 || result->status >= 300) {
    return read_completion(result, names);
  }
  const auto ended = parser_.finish([this](std::string_view data) { return on_event(data); });
  if (!ended) {
    return detail::refused(Outcome::kBadResponse, ended.error().message());
  }
  // TGI before 2.2 ends its stream after the chunk with a finish_reason, without [DONE]: a whole HTTP body
  // that says it finished is complete.
  if (!done_ && !finished_) {
    if (result->header("Content-Type").rfind("application/json", 0) == 0) {
      return detail::refused(Outcome::kBadResponse,
                             "the server answered with one JSON body, not a stream of server-sent events "
                             "(run with --no-stream)");
    }
    return detail::refused(Outcome::kBadResponse,
                           fmt::format("the stream ended without data: [DONE] (after {} events)", events_));
  }
  Completion answer = std::move(server_);
  answer.outcome = Outcome::kOk;
  answer.streamed = true;
  answer.prompt_tokens = prompt_tokens_.value_or(0);
  answer.tokens_counted = !completion_tokens_;
  answer.completion_tokens = completion_tokens_.value_or(chunks_);
  answer.first_token_s = first_token_s_;
  answer.last_token_s = last_token_s_;
  if (first_token_s_) {
    answer.ttft_s = *first_token_s_ - sent_s_;
    if (answer.completion_tokens > 1) {
      answer.tpot_s = (*last_token_s_ - *first_token_s_) / static_cast<double>(answer.completion_tokens - 1);
    }
  }
  // The arrivals carry the reported count: a server whose chunks hold several tokens each is scaled.
  if (counted_tokens_ > 0 && counted_tokens_ != answer.completion_tokens) {
    const double scale = static_cast<double>(answer.completion_tokens) / static_cast<double>(counted_tokens_);
    for (measure::TokenArrival& arrival : arrivals_) {
      arrival.tokens *= scale;
    }
  }
  answer.arrivals = std::move(arrivals_);
  return answer;
}

}  // namespace joule::loadgen
