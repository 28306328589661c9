// SPDX-License-Identifier: Apache-2.0
// The load generator of `joule infer bench` (joule/loadgen): what it plans to send, how it reads answers,
// its summary, and one short run against a loopback fake OpenAI server on a simulated GPU.
#include "joule/loadgen/bench.hpp"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "joule/core/clock.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/loadgen/openai.hpp"

#include "loadgen/fake_openai_server.hpp"

namespace joule::loadgen {
namespace {

using test::FakeOpenAiServer;

TEST(LoadgenPlan, ScalesArrivalsCutsAtTheDurationAndBoundsThePrompts) {
  const std::vector<TraceRequest> trace = {{10, 5, 3}, {11, 6, 4}, {12, 7, 5}, {13, 8, 6}};
  const auto plan = plan_requests(trace, {.rate_scale = 2, .duration_s = 1.2});
  ASSERT_TRUE(plan) << plan.error().message();
  ASSERT_EQ(plan->size(), 3u);  // at 0, 0.5, 1.0 s; 1.5 s is cut
  EXPECT_DOUBLE_EQ((*plan)[1].scheduled_s, 0.5);
  EXPECT_EQ((*plan)[2].requested_prompt_tokens, 7);
  EXPECT_EQ((*plan)[2].max_tokens, 5);
  EXPECT_EQ((*plan)[0].completion.outcome, Outcome::kPending);
  EXPECT_TRUE(plan_requests({}, {})->empty());
  const std::vector<TraceRequest> heavy(101, TraceRequest{0, 10'000'000, 1});
  const auto refused = plan_requests(heavy, {});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(refused.error().message().find("more than 1000000000 prompt tokens in all"), std::string::npos);
}

TEST(LoadgenEndpoint, AcceptsHttpHostPortOnly) {
  const auto endpoint = parse_endpoint("http://127.0.0.1:8000/");
  ASSERT_TRUE(endpoint) << endpoint.error().message();
  EXPECT_EQ(endpoint->origin, "http://127.0.0.1:8000");
  EXPECT_EQ(endpoint->port, 8000);
  for (const auto& [text, why] :
       std::vector<std::pair<std::string, std::string>>{{"https://h:1", "https is not supported"},
                                                        {"h:1", "not an http:// URL"},
                                                        {"http://h", "no port"},
                                                        {"http://h:1/v1", "a path is not allowed"},
                                                        {"http://h:0", "'0' is not a port"},
                                                        {"http://:1", "no host"}}) {
    const auto refused = parse_endpoint(text);
    ASSERT_FALSE(refused) << text;
    EXPECT_EQ(refused.error().message().rfind(fmt::format("'{}': {}", text, why), 0), 0u)
        << refused.error().message();
  }
}

// A completion with the first fields given (the rest default).
Completion answered(Outcome outcome, std::string error, int64_t prompt, int64_t completion,
                    std::optional<double> ttft_s, std::optional<double> tpot_s) {
  Completion answer;
  answer.outcome = outcome;
  answer.error = std::move(error);
  answer.prompt_tokens = prompt;
  answer.completion_tokens = completion;
  answer.ttft_s = ttft_s;
  answer.tpot_s = tpot_s;
  return answer;
}

http::Response answer(int status, std::string body) {
  return {status, std::move(body), {}};
}

TEST(LoadgenCompletion, ReadsTheServersFiguresAndRefusesWhatIsOutOfRange) {
  const LimitNames names{"--timeout-s", "--max-response-mib"};
  const auto ok = read_completion(
      answer(200, R"({"usage": {"prompt_tokens": 5, "completion_tokens": 7, "energy": {"ttft_s": 0.25}}})"),
      names);
  EXPECT_EQ(ok.outcome, Outcome::kOk);
  EXPECT_EQ(ok.prompt_tokens, 5);
  EXPECT_EQ(ok.completion_tokens, 7);
  EXPECT_EQ(ok.ttft_s, 0.25);
  EXPECT_FALSE(ok.tpot_s);
  const auto error = read_completion(answer(400, R"({"error": {"message": "thirteen is unlucky"}})"), names);
  EXPECT_EQ(error.outcome, Outcome::kHttpError);
  EXPECT_EQ(error.error, "HTTP 400: thirteen is unlucky");
  const auto huge = read_completion(answer(200, R"({"usage": {"completion_tokens": -1}})"), names);
  EXPECT_EQ(huge.outcome, Outcome::kBadResponse);
  EXPECT_EQ(huge.error,
            "the response's usage.completion_tokens must be a whole number from 0 to 1000000000, got -1");
  EXPECT_EQ(read_completion(answer(200, "[1]"), names).error,
            "the response is not a JSON object: an array of 1 item");
  const auto late = read_completion(
      tl::make_unexpected(http::Failure{http::Failure::Kind::kTimeout, "no complete response within 1 s"}),
      names);
  EXPECT_EQ(late.outcome, Outcome::kTimeout);
  EXPECT_EQ(late.error, "no complete response within 1 s (--timeout-s)");
}

TEST(LoadgenRecord, FirstTokenAndFinishComeFromTheServersTimesAndPhasesFromTheTokensRule) {
  RequestRecord record;
  record.start_s = 1;
  record.end_s = 3;
  record.energy_j = 10;
  record.completion = answered(Outcome::kOk, "", 30, 10, 0.5, 0.1);
  const measure::RequestEnergy energy = measure::to_request_energy(record.finished(), "r");
  EXPECT_DOUBLE_EQ(energy.first_token_s, 1.5);
  EXPECT_DOUBLE_EQ(energy.finish_s, 1.5 + 0.1 * 9);
  EXPECT_DOUBLE_EQ(energy.prefill_energy_j, 7.5);  // 30 of the 40 tokens
  EXPECT_DOUBLE_EQ(energy.decode_energy_j, 2.5);
  record.completion.ttft_s.reset();
  EXPECT_EQ(measure::to_request_energy(record.finished()).first_token_s, -1);
  EXPECT_DOUBLE_EQ(record.finished().finish_s, 3);
}

TEST(LoadgenSummary, CountsOutcomesTokensAndPercentiles) {
  std::vector<RequestRecord> records(3);
  records[0].completion = answered(Outcome::kOk, "", 4, 8, std::nullopt, std::nullopt);
  records[0].end_s = 0.2;
  records[1].completion = answered(Outcome::kHttpError, "HTTP 500: later", 0, 0, std::nullopt, std::nullopt);
  records[1].end_s = 0.9;
  records[2].completion = answered(Outcome::kTimeout, "first", 0, 0, std::nullopt, std::nullopt);
  records[2].end_s = 0.5;
  records[2].late = true;
  const auto summary = summarize(records);
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->ok, 1);
  EXPECT_EQ(summary->http_errors, 1);
  EXPECT_EQ(summary->timeouts, 1);
  EXPECT_EQ(summary->late, 1);
  EXPECT_EQ(summary->first_error, "first");  // ended first
  EXPECT_EQ(summary->output_tokens, 8);
  EXPECT_DOUBLE_EQ(*summary->latency_s[0], 0.2);
  EXPECT_FALSE(summary->ttft_s[0]);
}

TEST(LoadgenRun, SendsAPlanToAFakeServerAndAttributesTheEnergy) {
  FakeOpenAiServer server;
  const auto endpoint = parse_endpoint(server.url());
  ASSERT_TRUE(endpoint);
  http::RequestLimits limits;
  limits.timeout_s = 10;
  const auto model = resolve_model(*endpoint, "", limits);
  ASSERT_TRUE(model) << model.error().message();
  EXPECT_EQ(*model, "fake-model");
  // Four requests at once; the third asks for 13 tokens, which the fake server refuses.
  const std::vector<TraceRequest> trace = {{0, 3, 1}, {0, 4, 2}, {0, 5, 13}, {0, 6, 3}};
  auto plan = plan_requests(trace, {});
  ASSERT_TRUE(plan);
  auto clock = std::shared_ptr<Clock>(&SteadyClock::instance(), [](Clock*) {});
  auto gpus = device::sim::open_sim_gpus(device::sim::parse_spec("v100").value(), clock);
  ASSERT_TRUE(gpus) << gpus.error().message();
  std::vector<device::Gpu*> measured = {gpus->front().get()};
  BenchOptions options;
  options.limits = limits;
  options.sampling_period = std::chrono::milliseconds(10);
  const auto run = run_bench(measured, *clock, *endpoint, *model, std::move(*plan), options);
  ASSERT_TRUE(run) << run.error().message();
  ASSERT_EQ(run->requests.size(), 4u);
  EXPECT_EQ(run->requests[2].completion.outcome, Outcome::kHttpError);
  for (const size_t i : {0u, 1u, 3u}) {
    const RequestRecord& record = run->requests[i];
    EXPECT_EQ(record.completion.outcome, Outcome::kOk) << record.completion.error;
    EXPECT_EQ(record.completion.completion_tokens, trace[i].output_tokens);
    EXPECT_EQ(record.completion.prompt_tokens, trace[i].prompt_tokens);  // the fake counts words
    EXPECT_GE(record.latency_s(), 0.02);
    EXPECT_GT(record.energy_j, 0);
    // Streamed by default: the first token after the fake's 20 ms, timed here.
    EXPECT_TRUE(record.completion.streamed);
    EXPECT_FALSE(record.completion.tokens_counted);
    ASSERT_TRUE(record.completion.ttft_s);
    EXPECT_GE(*record.completion.ttft_s, 0.02);
    EXPECT_LE(*record.completion.ttft_s, record.latency_s());
    EXPECT_EQ(record.completion.tpot_s.has_value(), trace[i].output_tokens > 1);
  }
  EXPECT_EQ(server.bodies()[0]["stream"], true);
  EXPECT_EQ(server.bodies()[0]["stream_options"]["include_usage"], true);
  EXPECT_EQ(run->attribution, Attribution::kWork);
  EXPECT_EQ(server.bodies().size(), 4u);
  EXPECT_EQ(server.bodies()[0]["model"], "fake-model");
  EXPECT_GE(run->workers, 4u);
  ASSERT_EQ(run->gpus.size(), 1u);
  EXPECT_GT(run->energy_j, 0);
  EXPECT_NEAR(run->attributed_energy_j + run->idle_energy_j, run->energy_j, 1e-6 * run->energy_j);
  double shares_j = 0;
  for (const RequestRecord& record : run->requests) {
    shares_j += record.energy_j;
  }
  EXPECT_NEAR(shares_j + run->idle_energy_j, run->energy_j, 1e-9 * run->energy_j);

  // Not streamed, shared equally: one JSON body each, no time of its own for the first token.
  auto again = plan_requests(trace, {});
  options.stream = false;
  options.attribution = Attribution::kEqual;
  const auto whole = run_bench(measured, *clock, *endpoint, *model, std::move(*again), options);
  ASSERT_TRUE(whole) << whole.error().message();
  EXPECT_EQ(server.bodies().back()["stream"], false);
  EXPECT_FALSE(whole->requests[0].completion.streamed);
  EXPECT_FALSE(whole->requests[0].completion.ttft_s);
  EXPECT_EQ(whole->requests[0].completion.completion_tokens, 1);
  EXPECT_NEAR(whole->attributed_energy_j + whole->idle_energy_j, whole->energy_j, 1e-6 * whole->energy_j);
}

TEST(LoadgenAttribution, ParsesItsNames) {
  EXPECT_EQ(parse_attribution("server").value(), Attribution::kServer);
  EXPECT_EQ(to_string(Attribution::kEqual), "equal");
  EXPECT_EQ(parse_attribution("fair").error().message(),
            "unknown attribution 'fair': expected work, equal or server");
}

}  // namespace
}  // namespace joule::loadgen
