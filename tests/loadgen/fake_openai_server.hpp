// SPDX-License-Identifier: Apache-2.0
// A fake OpenAI-compatible completions server on loopback, shared by the load generator's tests
// (tests/loadgen) and those of `joule infer bench` (tests/integration).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

namespace joule::test {

// A fake OpenAI-compatible server on loopback: GET /v1/models lists "fake-model"; POST /v1/completions
// answers after 20 ms + 2 ms per output token with usage (prompt tokens = words of the prompt) and no
// energy extension; max_tokens 13 is refused with an OpenAI-style 400. With "stream": true it streams
// server-sent events as vLLM does: the first chunk after 20 ms, then one chunk of one token every 2 ms, a
// usage chunk when stream_options.include_usage asks, then data: [DONE]. It records every body it got.
class FakeOpenAiServer {
 public:
  FakeOpenAiServer() {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& response) {
      response.set_content(R"({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})",
                           "application/json");
    });
    server_.Post("/v1/completions", [this](const httplib::Request& request, httplib::Response& response) {
      const auto body = nlohmann::json::parse(request.body);
      {
        std::lock_guard lock(mutex_);
        bodies_.push_back(body);
      }
      const int64_t max_tokens = body.at("max_tokens").get<int64_t>();
      if (max_tokens == 13) {
        response.status = 400;
        response.set_content(
            R"({"error": {"message": "thirteen is unlucky", "type": "invalid_request_error"}})",
            "application/json");
        return;
      }
      const std::string prompt = body.at("prompt").get<std::string>();
      const auto words = static_cast<int64_t>(std::count(prompt.begin(), prompt.end(), ' ') + 1);
      if (body.value("stream", false)) {
        const bool usage =
            body.contains("stream_options") && body["stream_options"].value("include_usage", false);
        response.set_chunked_content_provider(
            "text/event-stream", [max_tokens, words, usage](size_t, httplib::DataSink& sink) {
              for (int64_t i = 0; i < max_tokens; ++i) {
                std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? 20 : 2));
                const nlohmann::json chunk = {
                    {"id", "cmpl-1"},
                    {"object", "text_completion"},
                    {"choices", {{{"text", " tok"}, {"index", 0}, {"finish_reason", nullptr}}}},
                    {"usage", nullptr}};
                const std::string event = "data: " + chunk.dump() + "\n\n";
                sink.write(event.data(), event.size());
              }
              if (usage) {
                const nlohmann::json last = {{"id", "cmpl-1"},
                                             {"choices", nlohmann::json::array()},
                                             {"usage",
                                              {{"prompt_tokens", words},
                                               {"completion_tokens", max_tokens},
                                               {"total_tokens", words + max_tokens}}}};
                const std::string event = "data: " + last.dump() + "\n\n";
                sink.write(event.data(), event.size());
              }
              const std::string done = "data: [DONE]\n\n";
              sink.write(done.data(), done.size());
              sink.done();
              return true;
            });
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + 2 * max_tokens));
      const nlohmann::json answer = {
          {"id", "cmpl-1"},
          {"object", "text_completion"},
          {"choices", {{{"text", "…"}, {"index", 0}, {"finish_reason", "length"}}}},
          {"usage",
           {{"prompt_tokens", words},
            {"completion_tokens", max_tokens},
            {"total_tokens", words + max_tokens}}}};
      response.set_content(answer.dump(), "application/json");
    });
    // One request per connection: the bench's idle keep-alive connections must not hold the server's threads.
    server_.set_keep_alive_max_count(1);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeOpenAiServer() {
    server_.stop();
    thread_.join();
  }
  FakeOpenAiServer(const FakeOpenAiServer&) = delete;
  FakeOpenAiServer& operator=(const FakeOpenAiServer&) = delete;

  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  std::vector<nlohmann::json> bodies() const {
    std::lock_guard lock(mutex_);
    return bodies_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::vector<nlohmann::json> bodies_;
};

}  // namespace joule::test
