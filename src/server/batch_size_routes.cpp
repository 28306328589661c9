// SPDX-License-Identifier: Apache-2.0
// Zeus's batch-size optimizer routes (zeus/optimizer/batch_size/server/router.py), with Zeus's status codes
// and messages: POST /jobs, GET /jobs/batch_size, POST /report, PATCH /trials, DELETE /jobs; plus
// GET /jobs/{id} for operators. The decisions are the library's (joule/optimize/batch_size.hpp); this file
// only loads, applies and stores.
#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "joule/core/json.hpp"
#include "joule/core/log.hpp"
#include "joule/optimize/batch_size.hpp"

#include "server/service_internal.hpp"

namespace joule::server {

namespace {

namespace bso = optimize::batch_size;
using detail::JobDocument;
// A job as load() finds it: nullopt if there is none.
using LoadedJob = std::optional<JobDocument>;
using detail::json_response;
using detail::message_response;
using detail::validation_response;
using nlohmann::json;

constexpr std::string_view kDocumentFormat = "joule.server.batch_size_job";
// 1: the library's whole job (every trial) in one document, report counts in another (kReportsKind);
// 2: the job's state without trials here, one item per trial (migrated from 1 when first read).
constexpr int kLegacyDocumentVersion = 1;
constexpr int kDocumentVersion = 2;
using bso::kMaxJobIdLength;
// GET /jobs/{id} lists this many trials unless asked (?limit=), at most kMaxStatusTrials.
constexpr int64_t kDefaultStatusTrials = 100;
constexpr int64_t kMaxStatusTrials = 1000;

// One trial as the store keeps it (an item of the job's document, numbered by trial number, grouped by its
// batch size once it succeeded so the MAB refit reads only those): the library's trial plus the accounting
// the library does not keep: how many reports it got and the last epoch reported (operators and tests check
// that every report was applied exactly once), and the cumulative time and energy of the last report, which
// give the per-epoch figures of the next one (the epoch metrics).
struct TrialRecord {
  bso::Trial trial;
  int64_t reports = 0;
  int64_t last_epoch = 0;
  double last_time_s = 0;
  double last_energy_j = 0;

  store::Item item() const {
    return store::Item{trial.trial_number,
                       trial.status == bso::TrialStatus::kSucceeded ? trial.batch_size : int64_t{0},
                       json{{"trial", trial.to_json()},
                            {"reports", reports},
                            {"last_epoch", last_epoch},
                            {"last_time_s", last_time_s},
                            {"last_energy_j", last_energy_j}}
                           .dump()};
  }

  static Result<TrialRecord> parse(std::string_view job_id, const store::Item& item,
                                   const std::vector<int64_t>& batch_sizes) {
    auto parsed = parse_json(item.body);
    if (!parsed) {
      return fail(ErrorCode::kParse, "the stored trial {} of job {} is corrupt: {}", item.number, job_id,
                  parsed.error().message);
    }
    try {
      TrialRecord record;
      auto trial = bso::Trial::from_json(parsed->at("trial"), batch_sizes, "trial");
      if (!trial) {
        return fail(ErrorCode::kParse, "the stored trial {} of job {} is corrupt: {}", item.number, job_id,
                    trial.error().message());
      }
      record.trial = *trial;
      record.reports = parsed->at("reports").get<int64_t>();
      record.last_epoch = parsed->at("last_epoch").get<int64_t>();
      record.last_time_s = parsed->at("last_time_s").get<double>();
      record.last_energy_j = parsed->at("last_energy_j").get<double>();
      if (record.trial.trial_number != item.number) {
        return fail(ErrorCode::kParse, "the stored trial {} of job {} says it is trial {}", item.number,
                    job_id, record.trial.trial_number);
      }
      return record;
    } catch (const json::exception& error) {
      return fail(ErrorCode::kParse, "the stored trial {} of job {} is corrupt: {}", item.number, job_id,
                  error.what());
    }
  }
};

// A job's trials in the store, read a record at a time and written back once at the end of the request
// (flush), so that a request touches the trials it needs and no others.
// A trial that succeeded in this transaction, to add to the SucceededCache once it commits.
struct SucceededAppend {
  int64_t batch_size = 0;
  detail::SucceededTrials before;
  bso::Trial trial;
};

class StoreTrialLog final : public bso::TrialLog {
 public:
  StoreTrialLog(store::Transaction& transaction, std::string job_id, JobDocument& document,
                detail::SucceededCache& cache)
      : transaction_(transaction),
        job_id_(std::move(job_id)),
        document_(document),
        cache_succeeded_(cache),
        batch_sizes_(document.state->spec().batch_sizes),
        known_trials_(document.state->trial_count()) {}

  Result<std::optional<bso::Trial>> find(int64_t trial_number) override {
    auto found = JOULE_TRY(record(trial_number));
    return found == nullptr ? std::optional<bso::Trial>() : std::optional<bso::Trial>((found)->trial);
  }

  Result<std::vector<bso::Trial>> succeeded(int64_t batch_size, size_t limit) override {
    // All of them (window_size 0): from memory when the cached list is this job's exact list.
    std::optional<detail::SucceededTrials> identity;
    if (limit == 0 && document_.succeeded) {
      const auto found = document_.succeeded->find(batch_size);
      identity = found == document_.succeeded->end() ? detail::SucceededTrials{} : found->second;
      if (auto cached = cache_succeeded_.find(job_id_, batch_size, *identity)) {
        std::reverse(cached->begin(), cached->end());
        return std::move(*cached);
      }
    }
    auto items = JOULE_TRY(transaction_.items(detail::kJobKind, job_id_, {batch_size, std::nullopt, limit}));
    std::vector<bso::Trial> trials;
    trials.reserve(items.size());
    for (const auto& item : items) {
      auto parsed = JOULE_TRY(TrialRecord::parse(job_id_, item, batch_sizes_));
      trials.push_back(parsed.trial);
    }
    if (identity && *identity == detail::SucceededTrials{static_cast<int64_t>(trials.size()),
                                                         trials.empty() ? 0 : trials.front().trial_number}) {
      cache_succeeded_.put(job_id_, batch_size, *identity, {trials.rbegin(), trials.rend()});
    }
    return trials;
  }

  Result<void> save(const bso::Trial& trial) override {
    if (trial.trial_number > known_trials_) {
      cache_[trial.trial_number] = TrialRecord{trial};  // a new trial: nothing stored to keep
    } else {
      auto found = JOULE_TRY(record(trial.trial_number));
      if (found == nullptr) {
        return fail(ErrorCode::kInternal, "job {} has no stored trial {} to update", job_id_,
                    trial.trial_number);
      }
      if (trial.status == bso::TrialStatus::kSucceeded &&
          (found)->trial.status != bso::TrialStatus::kSucceeded && document_.succeeded) {
        detail::SucceededTrials& succeeded = (*document_.succeeded)[trial.batch_size];
        appends_.push_back({trial.batch_size, succeeded, trial});
        succeeded = {succeeded.count + 1, trial.trial_number};
      }
      (found)->trial = trial;
    }
    dirty_.insert(trial.trial_number);
    return {};
  }

  // What to add to the SucceededCache once the transaction commits.
  const std::vector<SucceededAppend>& appends() const { return appends_; }

  // @return trial `trial_number`'s record (read once, then cached), or nullptr if there is none.
  Result<TrialRecord*> record(int64_t trial_number) {
    if (const auto cached = cache_.find(trial_number); cached != cache_.end()) {
      return &cached->second;
    }
    if (trial_number < 1 || trial_number > known_trials_) {
      return nullptr;
    }
    auto item = transaction_.get_item(detail::kJobKind, job_id_, trial_number);
    if (!item) {
      return tl::make_unexpected(item.error());
    }
    if (!*item) {
      return fail(ErrorCode::kParse, "job {} has {} trials but trial {} is missing from the store", job_id_,
                  known_trials_, trial_number);
    }
    auto parsed = JOULE_TRY(TrialRecord::parse(job_id_, **item, batch_sizes_));
    return &(cache_[trial_number] = parsed);
  }

  void touch(int64_t trial_number) { dirty_.insert(trial_number); }

  // Writes every changed record.
  Result<void> flush() {
    for (const int64_t number : dirty_) {
      if (auto put = transaction_.put_item(detail::kJobKind, job_id_, cache_.at(number).item()); !put) {
        return put;
      }
    }
    dirty_.clear();
    return {};
  }

 private:
  store::Transaction& transaction_;
  std::string job_id_;
  JobDocument& document_;
  detail::SucceededCache& cache_succeeded_;
  std::vector<int64_t> batch_sizes_;
  int64_t known_trials_;
  std::vector<SucceededAppend> appends_;
  std::map<int64_t, TrialRecord> cache_;
  std::set<int64_t> dirty_;
};

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

// Converts a version 1 job (whole history in one document, report counts in another) to version 2 inside
// the transaction that found it: its trials become items, the counts move into them.
Result<JobDocument> migrate_legacy(store::Transaction& transaction, const std::string& job_id,
                                   const json& document) {
  try {
    auto job = bso::BatchSizeJob::from_json(document.at("job"));
    if (!job) {
      return fail(ErrorCode::kParse, "the stored state of job {} is corrupt: {}", job_id,
                  job.error().message());
    }
    std::vector<std::array<double, 4>> counts;  // reports, last epoch, last time, last energy per trial
    auto reports = transaction.get_for_update(detail::kReportsKind, job_id);
    if (!reports) {
      return tl::make_unexpected(reports.error());
    }
    if (*reports) {
      auto parsed = parse_json((*reports)->body);
      if (!parsed || !parsed->is_array()) {
        return fail(ErrorCode::kParse, "the stored report counts of job {} are corrupt", job_id);
      }
      for (const auto& entry : *parsed) {
        counts.push_back({entry.at(0).get<double>(), entry.at(1).get<double>(),
                          entry.size() >= 4 ? entry.at(2).get<double>() : 0.0,
                          entry.size() >= 4 ? entry.at(3).get<double>() : 0.0});
      }
    }
    JobDocument converted;
    converted.state = job->state();
    converted.registered_unix_ns = document.at("registered_unix_ns").get<int64_t>();
    converted.succeeded.emplace();
    for (const auto& trial : job->trials()) {
      if (trial.status == bso::TrialStatus::kSucceeded) {
        auto& succeeded = (*converted.succeeded)[trial.batch_size];
        succeeded = {succeeded.count + 1, trial.trial_number};
      }
      TrialRecord record{trial};
      const auto index = static_cast<size_t>(trial.trial_number - 1);
      if (index < counts.size()) {
        record.reports = static_cast<int64_t>(counts[index][0]);
        record.last_epoch = static_cast<int64_t>(counts[index][1]);
        record.last_time_s = counts[index][2];
        record.last_energy_j = counts[index][3];
      }
      converted.reports += record.reports;
      JOULE_TRY(transaction.put_item(detail::kJobKind, job_id, record.item()));
    }
    JOULE_TRY(transaction.erase(detail::kReportsKind, job_id));
    JOULE_TRY(transaction.update(detail::kJobKind, job_id, converted.dump()));
    log().info("job {}: converted its stored state to version {} ({} trials)", job_id, kDocumentVersion,
               job->trials().size());
    return converted;
  } catch (const json::exception& error) {
    return fail(ErrorCode::kParse, "the stored job {} is corrupt: {}", job_id, error.what());
  }
}

// Reads and locks a job, parsing it only if the cache does not hold this exact text (and converting a version
// 1 job). @return nullopt (in the outer Result) if there is none.
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
  auto parsed = parse_json((*found)->body);
  if (!parsed) {
    return fail(ErrorCode::kParse, "the stored job {} is corrupt: {}", job_id, parsed.error().message);
  }
  if (parsed->is_object() && parsed->value("format", "") == kDocumentFormat &&
      parsed->value("version", 0) == kLegacyDocumentVersion) {
    auto migrated = JOULE_TRY(migrate_legacy(transaction, job_id, *parsed));
    return std::optional<JobDocument>(std::move(migrated));
  }
  auto document = JOULE_TRY(JobDocument::parse(job_id, *parsed));
  cache.put(job_id, std::move((*found)->body), document);
  return std::optional<JobDocument>(std::move(document));
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

// A job id from the query string: Zeus's length bound, checked before it is echoed or looked up.
std::optional<Response> check_query_job_id(const std::string& job_id) {
  if (job_id.size() > kMaxJobIdLength) {
    return validation_response(
        Error(ErrorCode::kInvalidArgument,
              fmt::format("job_id: ensure this value has at most {} characters", kMaxJobIdLength)),
        "query");
  }
  return std::nullopt;
}

// The required job_id query parameter. @return it, or the 422 that refuses it.
tl::expected<std::string, Response> job_id_query(const Request& request) {
  auto job_id = query(request, "job_id");
  if (!job_id) {
    return tl::make_unexpected(detail::missing_query_response("job_id"));
  }
  if (auto refused = check_query_job_id(*job_id)) {
    return tl::make_unexpected(std::move(*refused));
  }
  return std::move(*job_id);
}

// An optional positive integer query parameter in [1, max]. @return the value, or the 422 naming it.
tl::expected<std::optional<int64_t>, Response> positive_query(const Request& request, const std::string& name,
                                                              int64_t max) {
  const auto text = query(request, name);
  if (!text) {
    return std::optional<int64_t>();
  }
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (error != std::errc() || end != text->data() + text->size() || value < 1 || value > max) {
    return tl::make_unexpected(validation_response(
        Error(ErrorCode::kInvalidArgument, fmt::format("{}: must be an integer in [1, {}]", name, max)),
        "query"));
  }
  return std::optional<int64_t>(value);
}

}  // namespace

namespace detail {

std::string JobDocument::dump() const {
  json out{{"format", kDocumentFormat},
           {"version", kDocumentVersion},
           {"registered_unix_ns", registered_unix_ns},
           {"reports", reports},
           {"state", state->to_json()}};
  if (succeeded) {
    json by_batch_size = json::array();
    for (const auto& [batch_size, counts] : *succeeded) {
      by_batch_size.push_back({batch_size, counts.count, counts.last_trial_number});
    }
    out["succeeded"] = std::move(by_batch_size);
  }
  return out.dump();
}

Result<JobDocument> JobDocument::parse(std::string_view key, const json& document) {
  try {
    if (!document.is_object() || document.value("format", "") != kDocumentFormat ||
        document.value("version", 0) != kDocumentVersion) {
      return fail(ErrorCode::kParse, "the stored job {} is not a version {} {} document", key,
                  kDocumentVersion, kDocumentFormat);
    }
    JobDocument parsed;
    auto state = bso::JobState::from_json(document.at("state"));
    if (!state) {
      return fail(ErrorCode::kParse, "the stored state of job {} is corrupt: {}", key,
                  state.error().message());
    }
    parsed.state = std::move(*state);
    parsed.registered_unix_ns = document.at("registered_unix_ns").get<int64_t>();
    parsed.reports = document.at("reports").get<int64_t>();
    if (const auto found = document.find("succeeded"); found != document.end()) {
      parsed.succeeded.emplace();
      for (const auto& entry : *found) {
        (*parsed.succeeded)[entry.at(0).get<int64_t>()] = {entry.at(1).get<int64_t>(),
                                                           entry.at(2).get<int64_t>()};
      }
    }
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

  const bool generated = !spec->job_id;
  const auto candidate_of = [&](int draw) {
    bso::JobSpec candidate = *spec;
    if (generated) {
      candidate.job_id = bso::generate_job_id(
          candidate.job_id_prefix, base_entropy + static_cast<uint64_t>(draw) * 0x9E3779B97F4A7C15ULL);
    }
    return candidate;
  };
  // The first draw's job is locked before the replay check (a retry draws the same ids).
  const auto lock = [&](store::Transaction& transaction) {
    return load(transaction, jobs, *candidate_of(0).job_id);
  };
  const auto apply = [&](store::Transaction& transaction, LoadedJob& first) -> Result<Response> {
    const auto attempt = [&](int draw) -> Result<std::optional<Response>> {
      const bso::JobSpec candidate = candidate_of(draw);
      LoadedJob existing;
      if (draw == 0) {
        existing.swap(first);  // loaded (and locked) by `lock`
      } else {
        auto loaded = JOULE_TRY(load(transaction, jobs, *candidate.job_id));
        existing = std::move(loaded);
      }
      if (existing) {
        if (generated) {
          return std::nullopt;  // taken: draw another id
        }
        // Zeus: the same id again is fine with the identical configuration (200), a conflict otherwise.
        auto same = existing->state->check_same_config(candidate, *gpu);
        if (!same) {
          return message_response(409, same.error().message());
        }
        return json_response(200, registration(candidate, *gpu));
      }
      auto job = bso::JobState::create(candidate, *gpu);
      if (!job) {
        return validation_response(job.error());
      }
      JobDocument document;
      document.registered_unix_ns = detail::unix_ns(clock);
      document.state = std::move(*job);
      document.succeeded.emplace();
      auto inserted = transaction.insert(detail::kJobKind, *candidate.job_id, document.dump());
      if (!inserted) {
        return tl::make_unexpected(inserted.error());
      }
      if (!*inserted) {
        if (generated) {
          return std::nullopt;
        }
        // Registered concurrently by someone else: compare with theirs.
        auto theirs = load(transaction, jobs, *candidate.job_id);
        if (!theirs) {
          return tl::make_unexpected(theirs.error());
        }
        if (!*theirs) {
          return message_response(503, "the job was registered and deleted concurrently; retry");
        }
        auto same = (*theirs)->state->check_same_config(candidate, *gpu);
        return same ? json_response(200, registration(candidate, *gpu))
                    : message_response(409, same.error().message());
      }
      log().info("registered job {}", *candidate.job_id);
      return json_response(201, registration(document.state->spec(), document.state->gpu()));
    };
    return detail::draw_unused_id(fmt::format("job id with prefix '{}'", spec->job_id_prefix), attempt);
  };
  return transact_locked(request, lock, apply);
}

Response Service::Impl::next_batch_size(const Request& request) {
  const auto job_id = job_id_query(request);
  if (!job_id) {
    return job_id.error();
  }
  const auto lock = [&](store::Transaction& transaction) { return load(transaction, jobs, *job_id); };
  const auto apply = [&](store::Transaction& transaction, LoadedJob& document) -> Result<Response> {
    if (!document) {
      return message_response(400, fmt::format("Unknown job({}). Please register the job first", *job_id));
    }
    JobDocument& job = *document;
    if (job.state->dispatched_count() >= options.max_open_trials) {
      return message_response(
          409, fmt::format("job {} already has {} trials in progress, the most this server hands out: end "
                           "finished or abandoned ones (POST /report with their result, or PATCH /trials) "
                           "before asking for another",
                           *job_id, job.state->dispatched_count()));
    }
    StoreTrialLog log(transaction, *job_id, job, succeeded);
    auto trial = job.state->next_trial(log, detail::unix_ns(clock));
    if (!trial) {
      // Zeus answers 500 when no batch size converged in a pruning round (the job must be re-registered).
      return library_error(trial.error(), 400, 500);
    }
    JOULE_TRY(log.flush());
    JOULE_TRY(save(transaction, jobs, *job_id, job));
    return json_response(200, trial->to_json());
  };
  return transact_locked(request, lock, apply);
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
  std::optional<EpochReport> epoch;      // set by the attempt that commits
  std::vector<SucceededAppend> appends;  // likewise
  const auto lock = [&](store::Transaction& transaction) {
    epoch.reset();
    appends.clear();
    return load(transaction, jobs, result->job_id);
  };
  const auto apply = [&](store::Transaction& transaction, LoadedJob& document) -> Result<Response> {
    if (!document) {
      return message_response(400, fmt::format("Unknown job {}", result->job_id));
    }
    JobDocument& job = *document;
    StoreTrialLog log(transaction, result->job_id, job, succeeded);
    auto response = job.state->report(log, *result, detail::unix_ns(clock));
    if (!response) {
      // Unknown trial and a report on a Failed trial are Zeus's 400s; bad numbers are 422 here (Zeus fails
      // with 500 when it stores them).
      return library_error(response.error(), 400, 400);
    }
    auto record = JOULE_TRY(log.record(result->trial_number));
    TrialRecord& trial = *record;
    if (result->current_epoch > trial.last_epoch && result->time_s >= trial.last_time_s &&
        result->energy_j >= trial.last_energy_j) {
      epoch = EpochReport{result->job_id, result->current_epoch - trial.last_epoch,
                          result->time_s - trial.last_time_s, result->energy_j - trial.last_energy_j};
    }
    ++trial.reports;
    trial.last_epoch = result->current_epoch;
    trial.last_time_s = result->time_s;
    trial.last_energy_j = result->energy_j;
    log.touch(result->trial_number);
    ++job.reports;
    JOULE_TRY(log.flush());
    JOULE_TRY(save(transaction, jobs, result->job_id, job));
    appends = log.appends();
    return json_response(200, response->to_json());
  };
  Response answer = transact_locked(request, lock, apply);
  if (answer.status == 200 && !answer.replayed) {
    for (const auto& append : appends) {
      succeeded.append(result->job_id, append.batch_size, append.before, append.trial);
    }
    if (epoch && options.on_epoch_report) {
      options.on_epoch_report(*epoch);
    }
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
  const auto lock = [&](store::Transaction& transaction) { return load(transaction, jobs, trial->job_id); };
  const auto apply = [&](store::Transaction& transaction, LoadedJob& document) -> Result<Response> {
    if (!document) {
      return message_response(404, fmt::format("Could not find the trial: {}", trial->describe()));
    }
    JobDocument& job = *document;
    const int64_t failed_before = job.state->failed_count();
    StoreTrialLog log(transaction, trial->job_id, job, succeeded);
    auto ended = job.state->end_trial(log, *trial, detail::unix_ns(clock));
    if (!ended) {
      return library_error(ended.error(), 404, 400);
    }
    if (job.state->failed_count() != failed_before) {
      JOULE_TRY(log.flush());
      JOULE_TRY(save(transaction, jobs, trial->job_id, job));
    }
    return json_response(200, nullptr);
  };
  return transact_locked(request, lock, apply);
}

Response Service::Impl::delete_job(const Request& request) {
  const auto job_id = job_id_query(request);
  if (!job_id) {
    return job_id.error();
  }
  const auto lock = [&](store::Transaction& transaction) {
    return transaction.get_for_update(detail::kJobKind, *job_id);
  };
  const auto apply = [&](store::Transaction& transaction, const auto& found) -> Result<Response> {
    if (!found) {
      return message_response(404, "No job was deleted.");
    }
    JOULE_TRY(transaction.erase_items(detail::kJobKind, *job_id));
    for (const auto kind : {detail::kJobKind, detail::kReportsKind}) {
      JOULE_TRY(transaction.erase(kind, *job_id));
    }
    jobs.erase(*job_id);
    succeeded.erase_job(*job_id);
    log().info("deleted job {}", *job_id);
    return json_response(200, nullptr);
  };
  return transact_locked(request, lock, apply);
}

Response Service::Impl::job_status(const Request& request, const std::string& job_id) {
  if (auto refused = check_query_job_id(job_id)) {
    return *refused;
  }
  const auto limit = positive_query(request, "limit", kMaxStatusTrials);
  if (!limit) {
    return limit.error();
  }
  const auto before = positive_query(request, "before", std::numeric_limits<int64_t>::max());
  if (!before) {
    return before.error();
  }
  const int64_t page = limit->value_or(kDefaultStatusTrials);
  // The status is a read: any transaction may run it again (load() may convert a version 1 job; then it
  // commits like any other change).
  return transact_read(request, [&](store::Transaction& transaction) -> Result<Response> {
    auto document = load(transaction, jobs, job_id);
    if (!document) {
      return tl::make_unexpected(document.error());
    }
    if (!*document) {
      return message_response(404, fmt::format("Unknown job({}).", job_id));
    }
    const JobDocument& job = **document;
    const bso::JobState& state = *job.state;
    // The newest `page` trials below `before`, one more to know whether older ones remain.
    auto items = JOULE_TRY(
        transaction.items(detail::kJobKind, job_id, {std::nullopt, *before, static_cast<size_t>(page) + 1}));
    const bool more = static_cast<int64_t>(items.size()) > page;
    if (more) {
      items.pop_back();
    }
    json trials = json::array();
    for (auto it = items.rbegin(); it != items.rend(); ++it) {
      auto record = JOULE_TRY(TrialRecord::parse(job_id, *it, state.spec().batch_sizes));
      json entry = record.trial.to_json();
      entry["reports"] = record.reports;
      entry["last_epoch"] = record.last_epoch;
      trials.push_back(std::move(entry));
    }
    const json full = state.to_json();
    const json next_before = more && !trials.empty() ? json(trials.front()["trial_number"]) : json(nullptr);
    return json_response(200, {{"job_id", job_id},
                               {"stage", bso::to_string(state.stage())},
                               {"spec", full["spec"]},
                               {"gpu", full["gpu"]},
                               {"min_cost", full["min_cost"]},
                               {"min_cost_batch_size", state.min_cost_batch_size()},
                               {"exp_default_batch_size", state.exp_default_batch_size()},
                               {"registered", format_iso8601_utc(job.registered_unix_ns)},
                               {"counts",
                                {{"trials", state.trial_count()},
                                 {"dispatched", state.dispatched_count()},
                                 {"succeeded", state.succeeded_count()},
                                 {"failed", state.failed_count()},
                                 {"reports", job.reports}}},
                               {"trials", std::move(trials)},
                               {"trials_page",
                                {{"limit", page},
                                 {"before", before->has_value() ? json(**before) : json(nullptr)},
                                 {"next_before", next_before}}},
                               {"arms", full["arms"]}});
  });
}

}  // namespace joule::server
