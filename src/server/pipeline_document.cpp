// SPDX-License-Identifier: Apache-2.0
// The stored pipeline document and the responses every pipeline route shares.
#include <utility>

#include <fmt/format.h>

#include "server/pipeline_internal.hpp"

namespace joule::server::detail {

namespace {

using client::PipelineSpec;
using nlohmann::json;

constexpr std::string_view kPipelineFormat = "joule.server.pipeline";
constexpr int kPipelineFormatVersion = 1;

}  // namespace

std::string PipelineDocument::dump() const {
  return json{{"format", kPipelineFormat},
              {"version", kPipelineFormatVersion},
              {"spec", spec.to_json()},
              {"profile", profile ? json(*profile) : json(nullptr)},
              {"profile_revision", profile_revision},
              {"profile_token", profile_token},
              {"frontier_token", frontier_token},
              {"straggler_time_s", straggler_time_s ? json(*straggler_time_s) : json(nullptr)},
              {"registered_unix_ns", registered_unix_ns}}
      .dump();
}

Result<PipelineDocument> PipelineDocument::parse(std::string_view key, std::string_view body) {
  try {
    const json document = json::parse(body);
    if (document.value("format", "") != kPipelineFormat ||
        document.value("version", 0) != kPipelineFormatVersion) {
      return fail(ErrorCode::kParse, "the stored pipeline {} is not a version {} {} document", key,
                  kPipelineFormatVersion, kPipelineFormat);
    }
    PipelineDocument parsed;
    auto spec = PipelineSpec::from_json(document.at("spec"));
    if (!spec) {
      return fail(ErrorCode::kParse, "the stored pipeline {} is corrupt: {}", key, spec.error().message());
    }
    parsed.spec = std::move(*spec);
    if (!document.at("profile").is_null()) {
      parsed.profile = document.at("profile").get<std::string>();
    }
    parsed.profile_revision = document.at("profile_revision").get<int64_t>();
    parsed.profile_token = document.at("profile_token").get<std::string>();
    parsed.frontier_token = document.at("frontier_token").get<std::string>();
    if (!document.at("straggler_time_s").is_null()) {
      parsed.straggler_time_s = document.at("straggler_time_s").get<double>();
    }
    parsed.registered_unix_ns = document.at("registered_unix_ns").get<int64_t>();
    return parsed;
  } catch (const json::exception& error) {
    return fail(ErrorCode::kParse, "the stored pipeline {} is corrupt: {}", key, error.what());
  }
}

Result<LoadedPipeline> load_pipeline(store::Transaction& transaction, const std::string& id) {
  auto found = transaction.get_for_update(kPipelineKind, id);
  if (!found) {
    return tl::make_unexpected(found.error());
  }
  if (!*found) {
    return std::optional<PipelineDocument>();
  }
  auto document = JOULE_TRY(PipelineDocument::parse(id, (*found)->body));
  return std::optional<PipelineDocument>(std::move(document));
}

Response unknown_pipeline(const std::string& id) {
  return message_response(404,
                          fmt::format("Unknown pipeline({}). Register it first with POST /pipelines", id));
}

Response read_pipeline(Service::Impl& impl, const Request& request, const std::string& id,
                       const std::function<Result<Response>(store::Transaction&, PipelineDocument&)>& work) {
  return impl.transact_read(request, [&](store::Transaction& transaction) -> Result<Response> {
    auto document = load_pipeline(transaction, id);
    if (!document) {
      return tl::make_unexpected(document.error());
    }
    if (!*document) {
      return unknown_pipeline(id);
    }
    return work(transaction, **document);
  });
}

Response bad_request(const Error& error) {
  return message_response(400, error.message());
}

}  // namespace joule::server::detail
