// SPDX-License-Identifier: Apache-2.0
// Private parts of the pipeline planner's routes: the stored pipeline document, and its frontier, planned
// once per profile (planning can take seconds) and kept in memory and in the store for every route and
// server that needs it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <tl/expected.hpp>

#include "joule/client/pipeline_spec.hpp"
#include "joule/core/error.hpp"
#include "joule/server/service.hpp"
#include "joule/store/store.hpp"

#include "server/service_internal.hpp"

namespace joule::server::detail {

/// What the store holds for one pipeline (kind kPipelineKind).
struct PipelineDocument {
  client::PipelineSpec spec;           ///< pipeline_id set
  std::optional<std::string> profile;  ///< canonical CSV (plan::profile_csv)
  int64_t profile_revision = 0;        ///< +1 per changed upload
  std::string profile_token;           ///< drawn at every changed upload: names the frontier it determines
  std::string frontier_token;          ///< the profile_token whose frontier is stored
  std::optional<double> straggler_time_s;
  int64_t registered_unix_ns = 0;

  std::string dump() const;
  /// Parses what dump() wrote. @return kParse naming the pipeline `key`.
  static Result<PipelineDocument> parse(std::string_view key, std::string_view body);
};

/// A pipeline as load_pipeline() finds it: nullopt if there is none.
using LoadedPipeline = std::optional<PipelineDocument>;

/// Reads and locks pipeline `id`. @return the store's errors, or kParse for a corrupt document.
Result<LoadedPipeline> load_pipeline(store::Transaction& transaction, const std::string& id);

/// The 404 of a pipeline id nobody registered.
Response unknown_pipeline(const std::string& id);
/// Runs `work` on pipeline `id` in a read-only transaction (Service::Impl::transact_read): the pipeline's
/// unknown_pipeline() 404 if there is none.
Response read_pipeline(Service::Impl& impl, const Request& request, const std::string& id,
                       const std::function<Result<Response>(store::Transaction&, PipelineDocument&)>& work);
/// A 400 with the error's message.
Response bad_request(const Error& error);

/// A pipeline with its frontier (planned now, or found in memory or in the store).
struct Planned {
  PipelineDocument document;
  std::shared_ptr<const CachedFrontier> frontier;
  bool cached = true;  ///< false: planned by this request
};

/// @return pipeline `id` with the frontier of its current profile: from the memory cache, else from the
/// store, else planned now (once per profile in this process, however many requests wait for it) and
/// stored for every server on the database unless the profile changed meanwhile. The error is the
/// response to give: 404 (unknown pipeline), 409 (no profile yet), 400 (a profile the planner refuses),
/// 500/503 (planning or store failures).
tl::expected<Planned, Response> ensure_frontier(Service::Impl& impl, const Request& request,
                                                const std::string& id);

}  // namespace joule::server::detail
