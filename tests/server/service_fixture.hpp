// SPDX-License-Identifier: Apache-2.0
// The fixture of the service's unit tests (service_test.cpp, service_limits_test.cpp): a Service over a
// fresh store of the parameter's kind (memory: or a SQLite file), and helpers that call it like HTTP would.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "joule/server/service.hpp"

#include "server/server_test_util.hpp"
#include "test_util.hpp"

namespace joule::test {

using nlohmann::json;
using server::Request;
using server::Response;

class ServiceTest : public ::testing::TestWithParam<std::string> {
 protected:
  /// The service's options (tests change them before SetUp runs through make_service()).
  virtual server::ServiceOptions service_options() { return {}; }

  void SetUp() override {
    std::string url = GetParam();
    if (url.starts_with("sqlite:")) {
      url = "sqlite:" + dir_.path() + "/service.db";
    }
    auto opened = store::open_store(url);
    if (!opened) {
      GTEST_SKIP() << "store " << url << " unavailable: " << opened.error().message();
    }
    store_ = std::shared_ptr<store::Store>(std::move(*opened));
    service_ = std::make_unique<server::Service>(store_, service_options());
  }

  Response call(const std::string& method, const std::string& path, const std::string& body = "",
                std::map<std::string, std::string> query = {}, std::optional<std::string> request_id = {}) {
    Request request;
    request.method = method;
    request.path = path;
    request.body = body;
    request.query = std::move(query);
    request.request_id = std::move(request_id);
    if (!body.empty()) {
      request.content_type = "application/json";
    }
    return service_->handle(request);
  }
  Response call(const std::string& method, const std::string& path, const char* body,
                std::map<std::string, std::string> query = {}, std::optional<std::string> request_id = {}) {
    return call(method, path, std::string(body), std::move(query), std::move(request_id));
  }
  Response call(const std::string& method, const std::string& path, const json& body,
                std::optional<std::string> request_id = {}) {
    return call(method, path, body.dump(), {}, std::move(request_id));
  }

  std::string register_job(const std::string& job_id, std::optional<uint64_t> seed = 7) {
    const Response response =
        call("POST", "/jobs", register_body(synthetic_spec(job_id, seed), synthetic_gpu()));
    EXPECT_EQ(response.status, 201) << response.body;
    return job_id;
  }
  Response next(const std::string& job_id, std::optional<std::string> request_id = {}) {
    return call("GET", "/jobs/batch_size", "", {{"job_id", job_id}}, std::move(request_id));
  }
  json status(const std::string& job_id) {
    const Response response = call("GET", "/jobs/" + job_id);
    EXPECT_EQ(response.status, 200) << response.body;
    return json::parse(response.body);
  }

  TempDir dir_;
  std::shared_ptr<store::Store> store_;
  std::unique_ptr<server::Service> service_;
};

inline json parsed(const Response& response) {
  return json::parse(response.body);
}

}  // namespace joule::test
