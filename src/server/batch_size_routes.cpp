// SPDX-License-Identifier: Apache-2.0
// Zeus's batch-size optimizer routes (zeus/optimizer/batch_size/server/router.py), with Zeus's status codes
// and messages: POST /jobs, GET /jobs/batch_size, POST /report, PATCH /trials, DELETE /jobs; plus
// GET /jobs/{id} for operators. The decisions are the library's (joule/optimize/batch_size.hpp); this file
// only loads, applies and stores.
#include <utility>

#include <fmt/format.h>

#include "joule/core/log.hpp"
#include "joule/optimize/batch_size.hpp"

#include "optimize/batch_size_internal.hpp"
#include "server/service_internal.hpp"

namespace joule::server {

namespace {

namespace bso = optimize::batch_size;
using detail::JobDocument;
using detail::json_response;
using detail::message_response;
using detail::validation_response;
using nlohmann::json;

constexpr std::string_view kDocumentFormat = "joule.server.batch_size_job";
constexpr int kDocumentVersion = 1;
// Zeus's Job.job_id is a varchar(400).
constexpr size_t kMaxJobIdLength = 400;
// Attempts at drawing an unused generated job id (each collides with probability ≈ jobs / 2^32).
constexpr int kMaxIdDraws = 64;

// Per-trial accounting the library does not keep: how many reports each trial got and the last epoch
// reported (operators and tests check that every report was applied exactly once). A document of its own
// (kind kReportsKind), so that a report that only says "keep training" writes these few bytes instead of the
// job's whole state.
// The cumulative time and energy of the last report give the per-epoch figures of the next one (the epoch
// metrics); documents written before they were kept have two entries per trial.
struct TrialReports {
  int64_t reports = 0;
  int64_t last_epoch = 0;
  double last_time_s = 0;
  double last_energy_j = 0;
};

std::string dump_reports(const std::vector<TrialReports>& trials) {
  json reports = json::array();
  for (const auto& trial : trials) {
    reports.push_back({trial.reports, trial.last_epoch, trial.last_time_s, trial.last_energy_j});
  }
  return reports.dump();
}

Result<std::vector<TrialReports>> parse_reports(std::string_view key, std::string_view body) {
  try {
    std::vector<TrialReports> trials;
    for (const auto& entry : json::parse(body)) {
      TrialReports trial{entry.at(0).get<int64_t>(), entry.at(1).get<int64_t>()};
      if (entry.size() >= 4) {
        trial.last_time_s = entry.at(2).get<double>();
        trial.last_energy_j = entry.at(3).get<double>();
      }
      trials.push_back(trial);
    }
    return trials;
  } catch (const json::exception& error) {
    return fail(ErrorCode::kParse, "the stored report counts of job {} are corrupt: {}", key, error.what());
  }
}

// Reads (and locks) a job's report counts; `exists` tells whether the document is there yet.
Result<std::vector<TrialReports>> load_reports(store::Transaction& transaction, const std::string& job_id,
                                               bool& exists) {
  auto found = transaction.get_for_update(detail::kReportsKind, job_id);
  if (!found) {
    return tl::make_unexpected(found.error());
  }
  exists = found->has_value();
  if (!exists) {
    return std::vector<TrialReports>();
  }
  return parse_reports(job_id, (*found)->body);
}

// Zeus's register response: the JobSpecFromClient it was given (validated, batch sizes sorted, the
// generated job id filled in).
json registration(const bso::JobSpec& spec, const bso::GpuConfig& gpu) {
  json body = spec.to_json();
  body.update(gpu.to_json());
  return body;
}

// Maps a library error of an applied operation to Zeus's status.
Response library_error(const Error& error, int not_found_status, int state_status) {
  switch (error.code()) {
    case ErrorCode::kInvalidArgument:
      return validation_response(error);
    case ErrorCode::kNotFound:
      return message_response(not_found_status, error.message());
    case ErrorCode::kState:
      return message_response(state_status, error.message());
    default:
      log().error("batch-size optimizer: {}", error.message());
      return message_response(500, error.message());
  }
}

// Reads and locks a job, parsing it only if the cache does not hold this exact text. @return nullopt (in the
// outer Result) if there is none.
Result<std::optional<JobDocument>> load(store::Transaction& transaction,
                                        detail::ParsedCache<JobDocument>& cache, const std::string& job_id) {
  auto found = transaction.get_for_update(detail::kJobKind, job_id);
  if (!found) {
    return tl::make_unexpected(found.error());
  }
  if (!*found) {
    return std::optional<JobDocument>();
  }
  if (auto cached = cache.find(job_id, (*found)->body)) {
    return std::optional<JobDocument>(std::move(*cached));
  }
  auto document = JobDocument::parse(job_id, (*found)->body);
  if (!document) {
    return tl::make_unexpected(document.error());
  }
  cache.put(job_id, std::move((*found)->body), *document);
  return std::optional<JobDocument>(std::move(*document));
}

// Writes a changed job (and remembers its parsed form for the next request).
Result<void> save(store::Transaction& transaction, detail::ParsedCache<JobDocument>& cache,
                  const std::string& job_id, const JobDocument& document) {
  std::string body = document.dump();
  auto updated = transaction.update(detail::kJobKind, job_id, body);
  if (!updated) {
    return updated;
  }
  cache.put(job_id, std::move(body), document);
  return {};
}

std::optional<std::string> query(const Request& request, const std::string& name) {
  const auto found = request.query.find(name);
  if (found == request.query.end()) {
    return std::nullopt;
  }
  return found->second;
}

// Copy the request without its id (read-only routes: nothing to replay).
Request without_id(const Request& request) {
  Request copy = request;
  copy.request_id.reset();
  return copy;
}

}  // namespace

namespace detail {

std::string JobDocument::dump() const {
  return json{{"format", kDocumentFormat},
              {"version", kDocumentVersion},
              {"registered_unix_ns", registered_unix_ns},
              {"job", job->to_json()}}
      .dump();
}

Result<JobDocument> JobDocument::parse(std::string_view key, std::string_view body) {
  try {
    const json document = json::parse(body);
    if (document.value("format", "") != kDocumentFormat || document.value("version", 0) != kDocumentVersion) {
      return fail(ErrorCode::kParse, "the stored job {} is not a version {} {} document", key,
                  kDocumentVersion, kDocumentFormat);
    }
    JobDocument parsed;
    auto job = bso::BatchSizeJob::from_json(document.at("job"));
    if (!job) {
      return fail(ErrorCode::kParse, "the stored state of job {} is corrupt: {}", key, job.error().message());
    }
    parsed.job = std::move(*job);
    parsed.registered_unix_ns = document.at("registered_unix_ns").get<int64_t>();
    return parsed;
  } catch (const json::exception& error) {
    return fail(ErrorCode::kParse, "the stored job {} is corrupt: {}", key, error.what());
  }
}

}  // namespace detail

Response Service::Impl::register_job(const Request& request) {
  auto body = detail::parse_body(request);
  if (!body) {
    return body.error();
  }
  auto spec = bso::JobSpec::from_json(*body);
  if (!spec) {
    return validation_response(spec.error());
  }
  auto gpu = bso::GpuConfig::from_json(*body);
  if (!gpu) {
    return validation_response(gpu.error());
  }
  if (spec->job_id && spec->job_id->size() > kMaxJobIdLength) {
    return validation_response(
        Error(ErrorCode::kInvalidArgument,
              fmt::format("job_id: ensure this value has at most {} characters", kMaxJobIdLength)));
  }
  if (!spec->job_id && spec->job_id_prefix.size() + 9 > kMaxJobIdLength) {
    return validation_response(Error(
        ErrorCode::kInvalidArgument,
        fmt::format("job_id_prefix: ensure this value has at most {} characters", kMaxJobIdLength - 9)));
  }
  // A generated id comes from the request id when there is one, so that a retry (even one racing the first
  // attempt) targets the same job and finds its stored response.
  const uint64_t base_entropy =
      request.request_id ? detail::fnv1a(*request.request_id) : detail::random_u64();

  return transact(request, [&](store::Transaction& transaction) -> Result<Response> {
    for (int draw = 0; draw < kMaxIdDraws; ++draw) {
      bso::JobSpec candidate = *spec;
      const bool generated = !candidate.job_id;
      if (generated) {
        candidate.job_id = bso::generate_job_id(
            candidate.job_id_prefix, base_entropy + static_cast<uint64_t>(draw) * 0x9E3779B97F4A7C15ULL);
      }
      auto existing = load(transaction, jobs, *candidate.job_id);
      if (!existing) {
        return tl::make_unexpected(existing.error());
      }
      if (draw == 0) {
        auto replayed = replay(transaction, request);
        if (!replayed) {
          return tl::make_unexpected(replayed.error());
        }
        if (*replayed) {
          return std::move(**replayed);
        }
      }
      if (*existing) {
        if (generated) {
          continue;  // taken: draw another id
        }
        // Zeus: the same id again is fine with the identical configuration (200), a conflict otherwise.
        auto same = (*existing)->job->check_same_config(candidate, *gpu);
        if (!same) {
          return message_response(409, same.error().message());
        }
        return json_response(200, registration(candidate, *gpu));
      }
      auto job = bso::BatchSizeJob::create(candidate, *gpu);
      if (!job) {
        return validation_response(job.error());
      }
      JobDocument document;
      document.registered_unix_ns = detail::unix_ns(clock);
      document.job = std::move(*job);
      auto inserted = transaction.insert(detail::kJobKind, *candidate.job_id, document.dump());
      if (!inserted) {
        return tl::make_unexpected(inserted.error());
      }
      if (!*inserted) {
        if (generated) {
          continue;
        }
        // Registered concurrently by someone else: compare with theirs.
        auto theirs = load(transaction, jobs, *candidate.job_id);
        if (!theirs) {
          return tl::make_unexpected(theirs.error());
        }
        if (!*theirs) {
          return message_response(503, "the job was registered and deleted concurrently; retry");
        }
        auto same = (*theirs)->job->check_same_config(candidate, *gpu);
        return same ? json_response(200, registration(candidate, *gpu))
                    : message_response(409, same.error().message());
      }
      log().info("registered job {}", *candidate.job_id);
      return json_response(201, registration(document.job->spec(), document.job->gpu()));
    }
    return message_response(503,
                            fmt::format("could not draw an unused job id with prefix '{}' in {} attempts",
                                        spec->job_id_prefix, kMaxIdDraws));
  });
}

Response Service::Impl::next_batch_size(const Request& request) {
  const auto job_id = query(request, "job_id");
  if (!job_id) {
    return detail::missing_query_response("job_id");
  }
  return transact(request, [&](store::Transaction& transaction) -> Result<Response> {
    auto document = load(transaction, jobs, *job_id);
    if (!document) {
      return tl::make_unexpected(document.error());
    }
    auto replayed = replay(transaction, request);
    if (!replayed) {
      return tl::make_unexpected(replayed.error());
    }
    if (*replayed) {
      return std::move(**replayed);
    }
    if (!*document) {
      return message_response(400, fmt::format("Unknown job({}). Please register the job first", *job_id));
    }
    JobDocument& job = **document;
    auto trial = job.job->next_trial(detail::unix_ns(clock));
    if (!trial) {
      // Zeus answers 500 when no batch size converged in a pruning round (the job must be re-registered).
      return library_error(trial.error(), 400, 500);
    }
    auto updated = save(transaction, jobs, *job_id, job);
    if (!updated) {
      return tl::make_unexpected(updated.error());
    }
    return json_response(200, trial->to_json());
  });
}

Response Service::Impl::report(const Request& request) {
  auto body = detail::parse_body(request);
  if (!body) {
    return body.error();
  }
  auto result = bso::TrainingResult::from_json(*body);
  if (!result) {
    return validation_response(result.error());
  }
  std::optional<EpochReport> epoch;  // set by the attempt that commits
  Response answer = transact(request, [&](store::Transaction& transaction) -> Result<Response> {
    epoch.reset();
    auto document = load(transaction, jobs, result->job_id);
    if (!document) {
      return tl::make_unexpected(document.error());
    }
    auto replayed = replay(transaction, request);
    if (!replayed) {
      return tl::make_unexpected(replayed.error());
    }
    if (*replayed) {
      return std::move(**replayed);
    }
    if (!*document) {
      return message_response(400, fmt::format("Unknown job {}", result->job_id));
    }
    JobDocument& job = **document;
    const auto index = static_cast<size_t>(result->trial_number - 1);
    const bool was_running =
        index < job.job->trials().size() && job.job->trials()[index].status == bso::TrialStatus::kDispatched;
    auto response = job.job->report(*result, detail::unix_ns(clock));
    if (!response) {
      // Unknown trial and a report on a Failed trial are Zeus's 400s; bad numbers are 422 here (Zeus fails
      // with 500 when it stores them).
      return library_error(response.error(), 400, 400);
    }
    // The job's state changes only when the trial ends ("keep training" changes nothing but the counts).
    if (was_running && job.job->trials()[index].status != bso::TrialStatus::kDispatched) {
      auto updated = save(transaction, jobs, result->job_id, job);
      if (!updated) {
        return tl::make_unexpected(updated.error());
      }
    }
    bool counted_before = false;
    auto counts = load_reports(transaction, result->job_id, counted_before);
    if (!counts) {
      return tl::make_unexpected(counts.error());
    }
    if (counts->size() <= index) {
      counts->resize(index + 1);
    }
    TrialReports& trial = (*counts)[index];
    if (result->current_epoch > trial.last_epoch && result->time_s >= trial.last_time_s &&
        result->energy_j >= trial.last_energy_j) {
      epoch = EpochReport{result->job_id, result->current_epoch - trial.last_epoch,
                          result->time_s - trial.last_time_s, result->energy_j - trial.last_energy_j};
    }
    ++trial.reports;
    trial.last_epoch = result->current_epoch;
    trial.last_time_s = result->time_s;
    trial.last_energy_j = result->energy_j;
    auto written =
        counted_before
            ? transaction.update(detail::kReportsKind, result->job_id, dump_reports(*counts))
            : transaction.insert(detail::kReportsKind, result->job_id, dump_reports(*counts)).map([](bool) {
              });
    if (!written) {
      return tl::make_unexpected(written.error());
    }
    return json_response(200, response->to_json());
  });
  if (epoch && answer.status == 200 && !answer.replayed && options.on_epoch_report) {
    options.on_epoch_report(*epoch);
  }
  return answer;
}

Response Service::Impl::end_trial(const Request& request) {
  auto body = detail::parse_body(request);
  if (!body) {
    return body.error();
  }
  auto trial = bso::TrialId::from_json(*body);
  if (!trial) {
    return validation_response(trial.error());
  }
  return transact(request, [&](store::Transaction& transaction) -> Result<Response> {
    auto document = load(transaction, jobs, trial->job_id);
    if (!document) {
      return tl::make_unexpected(document.error());
    }
    auto replayed = replay(transaction, request);
    if (!replayed) {
      return tl::make_unexpected(replayed.error());
    }
    if (*replayed) {
      return std::move(**replayed);
    }
    if (!*document) {
      return message_response(
          404, fmt::format("Could not find the trial: job_id={} batch_size={} trial_number={}",
                           optimize::batch_size::detail::python_str_repr(trial->job_id), trial->batch_size,
                           trial->trial_number));
    }
    JobDocument& job = **document;
    const auto before = job.job->trials();
    auto ended = job.job->end_trial(*trial, detail::unix_ns(clock));
    if (!ended) {
      return library_error(ended.error(), 404, 400);
    }
    if (job.job->trials() != before) {
      auto updated = save(transaction, jobs, trial->job_id, job);
      if (!updated) {
        return tl::make_unexpected(updated.error());
      }
    }
    return json_response(200, nullptr);
  });
}

Response Service::Impl::delete_job(const Request& request) {
  const auto job_id = query(request, "job_id");
  if (!job_id) {
    return detail::missing_query_response("job_id");
  }
  return transact(request, [&](store::Transaction& transaction) -> Result<Response> {
    auto found = transaction.get_for_update(detail::kJobKind, *job_id);
    if (!found) {
      return tl::make_unexpected(found.error());
    }
    auto replayed = replay(transaction, request);
    if (!replayed) {
      return tl::make_unexpected(replayed.error());
    }
    if (*replayed) {
      return std::move(**replayed);
    }
    if (!*found) {
      return message_response(404, "No job was deleted.");
    }
    for (const auto kind : {detail::kJobKind, detail::kReportsKind}) {
      auto erased = transaction.erase(kind, *job_id);
      if (!erased) {
        return tl::make_unexpected(erased.error());
      }
    }
    jobs.erase(*job_id);
    log().info("deleted job {}", *job_id);
    return json_response(200, nullptr);
  });
}

Response Service::Impl::job_status(const Request& request, const std::string& job_id) {
  return transact(without_id(request), [&](store::Transaction& transaction) -> Result<Response> {
    auto document = load(transaction, jobs, job_id);
    if (!document) {
      return tl::make_unexpected(document.error());
    }
    if (!*document) {
      return message_response(404, fmt::format("Unknown job({}).", job_id));
    }
    const JobDocument& job = **document;
    bool counted = false;
    auto counts = load_reports(transaction, job_id, counted);
    if (!counts) {
      return tl::make_unexpected(counts.error());
    }
    counts->resize(std::max(counts->size(), job.job->trials().size()));
    json state = job.job->to_json();
    int64_t reports = 0;
    int64_t dispatched = 0;
    int64_t succeeded = 0;
    int64_t failed = 0;
    json trials = json::array();
    for (size_t i = 0; i < job.job->trials().size(); ++i) {
      const auto& trial = job.job->trials()[i];
      json entry = state["trials"][i];
      entry["reports"] = (*counts)[i].reports;
      entry["last_epoch"] = (*counts)[i].last_epoch;
      trials.push_back(std::move(entry));
      reports += (*counts)[i].reports;
      dispatched += trial.status == bso::TrialStatus::kDispatched ? 1 : 0;
      succeeded += trial.status == bso::TrialStatus::kSucceeded ? 1 : 0;
      failed += trial.status == bso::TrialStatus::kFailed ? 1 : 0;
    }
    return json_response(200, {{"job_id", job_id},
                               {"stage", bso::to_string(job.job->stage())},
                               {"spec", state["spec"]},
                               {"gpu", state["gpu"]},
                               {"min_cost", state["min_cost"]},
                               {"min_cost_batch_size", job.job->min_cost_batch_size()},
                               {"exp_default_batch_size", job.job->exp_default_batch_size()},
                               {"registered", format_iso8601_utc(job.registered_unix_ns)},
                               {"counts",
                                {{"trials", trials.size()},
                                 {"dispatched", dispatched},
                                 {"succeeded", succeeded},
                                 {"failed", failed},
                                 {"reports", reports}}},
                               {"trials", std::move(trials)},
                               {"arms", state["arms"]}});
  });
}

}  // namespace joule::server
