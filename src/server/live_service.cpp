// SPDX-License-Identifier: Apache-2.0
// The machinery behind the live routes: the store layout of a job (live_service.hpp), the thread that answers
// waiting GET /schedule requests when their job changes (woken at once by changes made here, polling for
// other processes' changes), the planner thread (plans outside any transaction, then applies the plan in a
// short one), idle-job expiry and the per-client registration rate.
#include "server/live_service.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <unistd.h>

#include "joule/core/log.hpp"

#include "server/service_internal.hpp"

namespace joule::server::detail {

namespace {

// Jobs whose ranks never all registered are dropped sooner: nothing runs them.
constexpr auto kMaxRegistrationIdle = std::chrono::hours(1);
// Parsed LiveData kept per (job, version): a planned job's plans, read by every schedule of a round.
constexpr size_t kDataCacheEntries = 64;
constexpr size_t kDataCacheBytes = size_t{256} << 20;
constexpr size_t kPlanCacheEntries = 1024;
constexpr size_t kRateClients = 4096;

constexpr int64_t kNsPerS = 1'000'000'000;

Response stopping_response() {
  return json_response(503, {{"detail",
                              "joule serve is stopping; retry the request (another replica, or this "
                              "server once it is back)"}});
}

std::string position_text(const plan::LiveRankPosition& rank) {
  return fmt::format("[{},{},{},{}]", rank.rank, rank.dp_rank, rank.pp_rank, rank.tp_rank);
}

Result<plan::LiveRankPosition> parse_position(std::string_view text, const std::string& job_id) {
  plan::LiveRankPosition rank;
  if (std::sscanf(std::string(text).c_str(), "[%d,%d,%d,%d]", &rank.rank, &rank.dp_rank, &rank.pp_rank,
                  &rank.tp_rank) != 4) {
    return fail(ErrorCode::kInternal, "a stored rank of pipeline-frequency job {} is corrupt", job_id);
  }
  return rank;
}

int64_t world(const plan::LiveState& state) {
  return state.info().world_size;
}

}  // namespace

LiveService::LiveService(Service::Impl& service)
    : service_(service),
      owner_(fmt::format("pid{}-{:08x}", ::getpid(), random_u64() >> 32)),
      data_cache_(kDataCacheEntries, kDataCacheBytes),
      plan_cache_(kPlanCacheEntries, service.options.live_plan_cache_bytes),
      registrations_(kRateClients) {}

LiveService::~LiveService() {
  stop();
}

int64_t LiveService::now_unix_ns() const {
  return unix_ns(service_.clock);
}

// --- the store layout -------------------------------------------------------------------------------------

Result<std::optional<plan::LiveState>> LiveService::load_state(store::Transaction& transaction,
                                                               const std::string& job_id) {
  const auto found = JOULE_TRY(transaction.get_for_update(kLiveJobKind, job_id));
  if (!found) {
    return std::optional<plan::LiveState>();
  }
  auto parsed = plan::LiveState::parse(found->body);
  if (parsed) {
    return std::optional<plan::LiveState>(std::move(*parsed));
  }
  if (found->body.find("\"joule.plan.live\"") == std::string::npos) {
    return fail(ErrorCode::kInternal, "the stored pipeline-frequency job {} is corrupt: {}", job_id,
                parsed.error().message());
  }
  // A job stored whole by an earlier joule: split it into this layout, in this transaction.
  auto whole = plan::LiveScheduler::parse(found->body);
  if (!whole) {
    return fail(ErrorCode::kInternal, "the stored pipeline-frequency job {} is corrupt: {}", job_id,
                whole.error().message());
  }
  plan::LiveState state = whole->state();
  state.touch(now_unix_ns());
  for (const plan::LiveRankPosition& rank : whole->ranks()) {
    JOULE_TRY(save_rank(transaction, job_id, state, rank));
  }
  for (const plan::LiveReport& report : whole->reports()) {
    JOULE_TRY(save_report(transaction, job_id, state, report));
  }
  JOULE_TRY(save_data(transaction, job_id, whole->data()));
  JOULE_TRY(save_state(transaction, job_id, state));
  log().info("pipeline-frequency job {}: converted from the single document of an earlier joule", job_id);
  return std::optional<plan::LiveState>(std::move(state));
}

Result<void> LiveService::save_state(store::Transaction& transaction, const std::string& job_id,
                                     const plan::LiveState& state) {
  return transaction.update(kLiveJobKind, job_id, state.dump());
}

Result<std::shared_ptr<const plan::LiveData>> LiveService::load_data(store::Transaction& transaction,
                                                                     const std::string& job_id,
                                                                     const plan::LiveState& state) {
  const std::pair<std::string, int64_t> key{job_id, state.data_version()};
  {
    std::lock_guard lock(cache_mutex_);
    if (const auto* cached = data_cache_.find(key)) {
      return *cached;
    }
  }
  const auto found = JOULE_TRY(transaction.get_for_update(kLiveDataKind, job_id));
  if (!found) {
    return fail(ErrorCode::kInternal, "pipeline-frequency job {} has no stored data", job_id);
  }
  auto parsed = plan::LiveData::parse(found->body);
  if (!parsed) {
    return fail(ErrorCode::kInternal, "the stored data of pipeline-frequency job {} is corrupt: {}", job_id,
                parsed.error().message());
  }
  if (const auto matched = state.check_data(*parsed); !matched) {
    return fail(ErrorCode::kInternal, "{}", matched.error().message());
  }
  auto data = std::make_shared<const plan::LiveData>(std::move(*parsed));
  std::lock_guard lock(cache_mutex_);
  data_cache_.put(key, data, found->body.size());
  return std::shared_ptr<const plan::LiveData>(std::move(data));
}

Result<void> LiveService::save_data(store::Transaction& transaction, const std::string& job_id,
                                    const plan::LiveData& data) {
  const std::string body = data.dump();
  const size_t most = service_.options.live_limits.max_data_bytes;
  if (body.size() > most) {
    return fail(ErrorCode::kInternal, "the data of pipeline-frequency job {} grew to {} bytes, over its {}",
                job_id, body.size(), most);
  }
  if (JOULE_TRY(transaction.insert(kLiveDataKind, job_id, body))) {
    return {};
  }
  return transaction.update(kLiveDataKind, job_id, body);
}

Result<std::optional<plan::LiveRankPosition>> LiveService::load_rank(store::Transaction& transaction,
                                                                     const std::string& job_id,
                                                                     const plan::LiveState& state, int rank) {
  if (rank < 0 || rank >= state.info().world_size) {
    return std::optional<plan::LiveRankPosition>();
  }
  const auto item = JOULE_TRY(transaction.get_item(kLiveJobKind, job_id, rank));
  if (!item) {
    return std::optional<plan::LiveRankPosition>();
  }
  const auto position = JOULE_TRY(parse_position(item->body, job_id));
  if (item->group != kRankGroup || position.rank != rank) {
    return fail(ErrorCode::kInternal, "the stored rank {} of pipeline-frequency job {} is corrupt", rank,
                job_id);
  }
  return std::optional<plan::LiveRankPosition>(position);
}

Result<std::optional<int>> LiveService::position_holder(store::Transaction& transaction,
                                                        const std::string& job_id,
                                                        const plan::LiveState& state, int position) {
  const auto item = JOULE_TRY(transaction.get_item(kLiveJobKind, job_id, world(state) + position));
  if (!item) {
    return std::optional<int>();
  }
  return std::optional<int>(std::atoi(item->body.c_str()));
}

Result<void> LiveService::save_rank(store::Transaction& transaction, const std::string& job_id,
                                    const plan::LiveState& state, const plan::LiveRankPosition& rank) {
  JOULE_TRY(transaction.put_item(kLiveJobKind, job_id, {rank.rank, kRankGroup, position_text(rank)}));
  return transaction.put_item(
      kLiveJobKind, job_id,
      {world(state) + state.position_index(rank), kPositionGroup, std::to_string(rank.rank)});
}

Result<std::optional<int64_t>> LiveService::reported_round(store::Transaction& transaction,
                                                           const std::string& job_id,
                                                           const plan::LiveState& state, int rank) {
  const auto item = JOULE_TRY(transaction.get_item(kLiveJobKind, job_id, 2 * world(state) + rank));
  if (!item) {
    return std::optional<int64_t>();
  }
  return std::optional<int64_t>(item->group);
}

Result<void> LiveService::save_report(store::Transaction& transaction, const std::string& job_id,
                                      const plan::LiveState& state, const plan::LiveReport& report) {
  return transaction.put_item(kLiveJobKind, job_id,
                              {2 * world(state) + report.rank.rank, report.round, report.dump()});
}

Result<std::vector<plan::LiveReport>> LiveService::load_reports(store::Transaction& transaction,
                                                                const std::string& job_id,
                                                                const plan::LiveState& state) {
  store::ItemQuery query;
  query.group = state.round();
  const auto items = JOULE_TRY(transaction.items(kLiveJobKind, job_id, query));
  std::vector<plan::LiveReport> reports;
  reports.reserve(items.size());
  for (const store::Item& item : items) {
    auto report = plan::LiveReport::parse(item.body);
    if (!report) {
      return fail(ErrorCode::kInternal, "a stored report of pipeline-frequency job {} is corrupt: {}", job_id,
                  report.error().message());
    }
    reports.push_back(std::move(*report));
  }
  return reports;
}

Result<std::pair<std::vector<int>, int>> LiveService::missing(store::Transaction& transaction,
                                                              const std::string& job_id,
                                                              const plan::LiveState& state, bool reports,
                                                              size_t limit) {
  store::ItemQuery query;
  query.group = reports ? state.round() : kRankGroup;
  const auto items = JOULE_TRY(transaction.items(kLiveJobKind, job_id, query));
  std::vector<bool> present(static_cast<size_t>(world(state)), false);
  const int64_t offset = reports ? 2 * world(state) : 0;
  for (const store::Item& item : items) {
    const int64_t rank = item.number - offset;
    if (rank >= 0 && rank < world(state)) {
      present[static_cast<size_t>(rank)] = true;
    }
  }
  std::vector<int> listed;
  int count = 0;
  for (size_t rank = 0; rank < present.size(); ++rank) {
    if (!present[rank]) {
      ++count;
      if (listed.size() < limit) {
        listed.push_back(static_cast<int>(rank));
      }
    }
  }
  return std::pair{std::move(listed), count};
}

Result<bool> LiveService::erase_job(store::Transaction& transaction, const std::string& job_id) {
  const bool erased = JOULE_TRY(transaction.erase(kLiveJobKind, job_id));
  JOULE_TRY(transaction.erase_items(kLiveJobKind, job_id));
  JOULE_TRY(transaction.erase(kLiveDataKind, job_id));
  std::lock_guard lock(cache_mutex_);
  data_cache_.erase_if([&](const std::pair<std::string, int64_t>& key) { return key.first == job_id; });
  plan_cache_.erase_if([&](const std::string& key) { return key.starts_with(job_id + "#"); });
  return erased;
}

// --- waiting requests -------------------------------------------------------------------------------------

void LiveService::start_threads() {
  if (started_ || stopping_) {
    return;
  }
  started_ = true;
  next_expiry_ = std::chrono::steady_clock::now() + service_.options.live_expiry_period;
  waiter_thread_ = std::thread([this] { run_waiters(); });
  planner_thread_ = std::thread([this] { run_planner(); });
}

void LiveService::wait_for_change(const std::shared_ptr<Waiter>& waiter) {
  std::optional<Response> refused;
  {
    std::lock_guard lock(mutex_);
    auto& list = waiters_[waiter->job_id];
    const auto per_job = static_cast<size_t>(std::max(2, 2 * waiter->world_size));
    if (stopping_) {
      refused = stopping_response();
    } else if (waiting_ >= static_cast<size_t>(std::max(0, service_.options.live_max_waiting))) {
      refused = json_response(
          503, {{"detail", fmt::format("{} requests already wait for their schedules on this server; retry "
                                       "later (ServiceOptions::live_max_waiting)",
                                       waiting_)}});
    } else if (list.size() >= per_job) {
      refused = json_response(
          503,
          {{"detail", fmt::format("job {} already has {} requests waiting for schedules, twice its world "
                                  "size; a rank should wait once at a time",
                                  waiter->job_id, list.size())}});
    } else {
      list.push_back(waiter);
      ++waiting_;
      // The job may have changed between the look and this registration: look again.
      dirty_.insert(waiter->job_id);
      start_threads();
    }
    if (list.empty()) {
      waiters_.erase(waiter->job_id);
    }
  }
  if (refused) {
    waiter->sink->respond(std::move(*refused));
    return;
  }
  wake_.notify_all();
  // The connection closed: stop waiting (the waiter thread drops it on its next pass).
  waiter->sink->on_cancel([weak = std::weak_ptr<Waiter>(waiter)] {
    if (auto cancelled = weak.lock()) {
      cancelled->cancelled = true;
    }
  });
}

void LiveService::changed(const std::string& job_id, const plan::LiveState& state) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      return;
    }
    dirty_.insert(job_id);
    if (state.phase() == plan::LivePhase::kPlanning && planning_.insert(job_id).second) {
      planning_queue_.push_back(job_id);
    }
    start_threads();
  }
  wake_.notify_all();
}

void LiveService::run_waiters() {
  std::unique_lock lock(mutex_);
  auto last_poll = std::chrono::steady_clock::now();
  const auto poll_interval = service_.options.live_poll_interval;
  while (!stopping_) {
    wake_.wait_until(lock, last_poll + poll_interval, [&] { return stopping_ || !dirty_.empty(); });
    if (stopping_) {
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    const bool poll = now >= last_poll + poll_interval;
    if (poll) {
      last_poll = now;
    }
    std::vector<std::pair<std::string, std::vector<std::shared_ptr<Waiter>>>> work;
    for (auto job = waiters_.begin(); job != waiters_.end();) {
      auto& list = job->second;
      const auto before = list.size();
      std::erase_if(list, [](const std::shared_ptr<Waiter>& waiter) { return waiter->cancelled.load(); });
      waiting_ -= before - list.size();
      if (list.empty()) {
        job = waiters_.erase(job);
        continue;
      }
      const bool due = std::any_of(list.begin(), list.end(), [&](const std::shared_ptr<Waiter>& waiter) {
        return now >= waiter->deadline;
      });
      if (poll || due || dirty_.contains(job->first)) {
        work.emplace_back(job->first, list);
      }
      ++job;
    }
    dirty_.clear();
    const bool expire = now >= next_expiry_;
    if (expire) {
      next_expiry_ = now + service_.options.live_expiry_period;
    }
    lock.unlock();
    std::vector<std::pair<std::shared_ptr<Waiter>, Response>> answers;
    for (const auto& [job_id, list] : work) {
      evaluate(job_id, list, answers);
    }
    if (expire) {
      expire_idle_jobs();
    }
    lock.lock();
    std::vector<std::pair<std::shared_ptr<Waiter>, Response>> to_send;
    std::set<std::string> answered_jobs;
    for (auto& [waiter, response] : answers) {
      if (waiter->answered) {
        continue;  // stop() answered it meanwhile
      }
      waiter->answered = true;
      answered_jobs.insert(waiter->job_id);
      to_send.emplace_back(waiter, std::move(response));
    }
    // One pass per job: a round's answers to thousands of ranks are not a search each.
    for (const std::string& job_id : answered_jobs) {
      if (auto found = waiters_.find(job_id); found != waiters_.end()) {
        waiting_ -= static_cast<size_t>(std::erase_if(
            found->second, [](const std::shared_ptr<Waiter>& waiter) { return waiter->answered; }));
        if (found->second.empty()) {
          waiters_.erase(found);
        }
      }
    }
    lock.unlock();
    for (auto& [waiter, response] : to_send) {
      waiter->sink->respond(std::move(response));
    }
    lock.lock();
  }
}

void LiveService::evaluate(const std::string& job_id, const std::vector<std::shared_ptr<Waiter>>& waiters,
                           std::vector<std::pair<std::shared_ptr<Waiter>, Response>>& answers) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<std::shared_ptr<Waiter>, Response>> found;
  std::optional<plan::LiveState> seen;
  std::string error;
  const auto looked = service_.store.run([&](store::Transaction& transaction) -> Result<void> {
    found.clear();
    error.clear();
    seen = JOULE_TRY(load_state(transaction, job_id));
    for (const auto& waiter : waiters) {
      if (waiter->cancelled) {
        continue;
      }
      auto answer = examine(transaction, job_id, seen, *waiter, now >= waiter->deadline, &error);
      if (!error.empty()) {
        return fail(ErrorCode::kIo, "{}", error);
      }
      if (answer) {
        found.emplace_back(waiter, std::move(*answer));
      }
    }
    return {};
  });
  if (!looked) {
    log().error("pipeline-frequency job {}: reading it for waiting requests: {}", job_id,
                looked.error().message());
    for (const auto& waiter : waiters) {
      if (now >= waiter->deadline) {
        answers.emplace_back(
            waiter, message_response(503, fmt::format("store unavailable: {}", looked.error().message())));
      }
    }
    return;
  }
  answers.insert(answers.end(), std::make_move_iterator(found.begin()), std::make_move_iterator(found.end()));
  // A job waiting for a plan nobody here plans: unclaimed (its round completed in a process that stopped
  // before planning it), or claimed by a planner that may have died. Plan it, the latter once the claim is
  // stale; a second planner only wastes work (a plan applies once, to the request it was made for).
  if (seen && seen->phase() == plan::LivePhase::kPlanning) {
    const int64_t lease_ns = service_.options.live_planning_lease.count() * kNsPerS;
    const bool unclaimed = seen->planner().empty();
    if (unclaimed ||
        (seen->planner() != owner_ && now_unix_ns() - seen->planner_since_unix_ns() > lease_ns)) {
      std::lock_guard lock(mutex_);
      if (!stopping_ && planning_.insert(job_id).second) {
        planning_queue_.push_back(job_id);
        wake_.notify_all();
      }
    }
  }
}

void LiveService::stop() {
  std::vector<std::shared_ptr<Waiter>> all;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& [job_id, list] : waiters_) {
      for (auto& waiter : list) {
        if (!waiter->answered) {
          waiter->answered = true;
          all.push_back(waiter);
        }
      }
    }
    waiters_.clear();
    waiting_ = 0;
  }
  wake_.notify_all();
  for (const auto& waiter : all) {
    waiter->sink->respond(stopping_response());
  }
  if (waiter_thread_.joinable()) {
    waiter_thread_.join();
  }
  if (planner_thread_.joinable()) {
    planner_thread_.join();
  }
}

// --- planning ---------------------------------------------------------------------------------------------

void LiveService::run_planner() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !planning_queue_.empty(); });
    if (stopping_) {
      return;
    }
    const std::string job_id = planning_queue_.front();
    planning_queue_.pop_front();
    lock.unlock();
    try {
      plan_job(job_id);
    } catch (const std::exception& error) {
      log().error("pipeline-frequency job {}: planning: unexpected exception: {}", job_id, error.what());
    }
    lock.lock();
    planning_.erase(job_id);
  }
}

Result<std::shared_ptr<const plan::LivePlan>> LiveService::plan_cached(const std::string& job_id,
                                                                       const plan::LivePlanRequest& request) {
  const std::string key = fmt::format("{}#{:016x}#{}#{}#{}#{}#{}#{}", job_id, fnv1a(request.profile_csv),
                                      request.stages, request.microbatches, plan::to_string(request.schedule),
                                      request.p_blocking_w, request.unit_time_s, request.max_planning_units);
  {
    std::lock_guard lock(cache_mutex_);
    if (const auto* cached = plan_cache_.find(key)) {
      return *cached;
    }
  }
  auto planned = JOULE_TRY(plan::plan_live(request));
  log().info("pipeline-frequency job {}: planned {} frontier points in {:.3f} s ({:.1f} MiB)", job_id,
             planned->frontier.size(), planned->planning_time_s,
             static_cast<double>(planned->memory_bytes()) / (1 << 20));
  std::lock_guard lock(cache_mutex_);
  plan_cache_.put(key, planned, planned->memory_bytes());
  return planned;
}

void LiveService::plan_job(const std::string& job_id) {
  const int64_t lease_ns = service_.options.live_planning_lease.count() * kNsPerS;
  std::optional<plan::LivePlanRequest> request;
  const auto claimed = service_.store.run([&](store::Transaction& transaction) -> Result<void> {
    request.reset();
    auto state = JOULE_TRY(load_state(transaction, job_id));
    if (!state || state->phase() != plan::LivePhase::kPlanning) {
      return {};
    }
    const int64_t now = now_unix_ns();
    if (!state->planner().empty() && state->planner() != owner_ &&
        now - state->planner_since_unix_ns() <= lease_ns) {
      return {};  // another process plans it
    }
    const auto data = JOULE_TRY(load_data(transaction, job_id, *state));
    request = state->planning(*data);
    if (!request) {
      return {};
    }
    state->claim_planning(owner_, now);
    return save_state(transaction, job_id, *state);
  });
  if (!claimed) {
    log().error("pipeline-frequency job {}: claiming its planning: {}", job_id, claimed.error().message());
    return;
  }
  if (!request) {
    return;
  }
  const auto planned = plan_cached(job_id, *request);
  std::optional<plan::LiveState> applied;
  const auto stored = service_.store.run([&](store::Transaction& transaction) -> Result<void> {
    applied.reset();
    auto state = JOULE_TRY(load_state(transaction, job_id));
    if (!state || state->phase() != plan::LivePhase::kPlanning) {
      return {};
    }
    plan::LiveData data = *JOULE_TRY(load_data(transaction, job_id, *state));
    const int64_t data_version = state->data_version();
    if (planned) {
      if (auto done = state->apply_plan(**planned, request->sequence, data); !done) {
        if (done.error().code() == ErrorCode::kState) {
          return {};  // planned for an earlier request: the current one is queued
        }
        state->fail_planning(request->sequence, done.error().message());
      }
    } else {
      state->fail_planning(request->sequence, planned.error().message());
    }
    if (state->phase() == plan::LivePhase::kPlanning) {
      return {};
    }
    state->touch(now_unix_ns());
    if (state->data_version() != data_version) {
      JOULE_TRY(save_data(transaction, job_id, data));
    }
    JOULE_TRY(save_state(transaction, job_id, *state));
    applied = std::move(state);
    return {};
  });
  if (!stored) {
    log().error("pipeline-frequency job {}: storing its plan: {}", job_id, stored.error().message());
    return;
  }
  if (!applied) {
    return;
  }
  if (!planned || !applied->failure().empty()) {
    log().error("pipeline-frequency job {}: planning failed, {}: {}", job_id,
                applied->phase() == plan::LivePhase::kFailed ? "every computation runs at the highest clock"
                                                             : "every pipeline keeps the fastest plan",
                applied->failure());
  } else {
    log().info("pipeline-frequency job {}: round {} is {}", job_id, applied->round(),
               plan::to_string(applied->phase()));
  }
  changed(job_id, *applied);
}

// --- housekeeping -----------------------------------------------------------------------------------------

void LiveService::expire_idle_jobs() {
  const auto max_idle = service_.options.live_max_job_idle;
  if (max_idle.count() <= 0) {
    return;
  }
  const auto keys = service_.store.transact<std::vector<std::string>>(
      [](store::Transaction& transaction) { return transaction.keys(kLiveJobKind, ""); });
  if (!keys) {
    log().warn("looking for idle pipeline-frequency jobs: {}", keys.error().message());
    return;
  }
  for (const std::string& job_id : *keys) {
    int64_t idle_ns = 0;
    const auto erased = service_.store.transact<bool>([&](store::Transaction& transaction) -> Result<bool> {
      const auto state = JOULE_TRY(load_state(transaction, job_id));
      if (!state) {
        return false;
      }
      idle_ns = now_unix_ns() - state->touched_unix_ns();
      const auto limit = state->phase() == plan::LivePhase::kRegistering
                             ? std::min<std::chrono::seconds>(max_idle, kMaxRegistrationIdle)
                             : max_idle;
      if (idle_ns <= limit.count() * kNsPerS) {
        return false;
      }
      return erase_job(transaction, job_id);
    });
    if (!erased) {
      log().warn("expiring pipeline-frequency job {}: {}", job_id, erased.error().message());
    } else if (*erased) {
      log().info("pipeline-frequency job {} expired: no rank changed it for {:.0f} s", job_id,
                 static_cast<double>(idle_ns) / kNsPerS);
      std::lock_guard lock(mutex_);
      dirty_.insert(job_id);
    }
  }
}

bool LiveService::admit_registration(const std::string& peer, double& retry_after_s) {
  const int per_minute = service_.options.live_registrations_per_minute;
  if (per_minute <= 0) {
    return true;
  }
  const auto now = std::chrono::steady_clock::now();
  const double capacity = per_minute;
  const double per_s = per_minute / 60.0;
  std::lock_guard lock(rate_mutex_);
  Bucket bucket{capacity, now};
  if (const Bucket* found = registrations_.find(peer)) {
    bucket = *found;
    bucket.tokens = std::min(
        capacity, bucket.tokens + std::chrono::duration<double>(now - bucket.updated).count() * per_s);
    bucket.updated = now;
  }
  const bool admitted = bucket.tokens >= 1;
  if (admitted) {
    bucket.tokens -= 1;
  } else {
    retry_after_s = (1 - bucket.tokens) / per_s;
  }
  registrations_.put(peer, bucket);
  return admitted;
}

Result<std::vector<Service::LiveJobSummary>> LiveService::jobs(size_t max_jobs) {
  return service_.store.transact<std::vector<Service::LiveJobSummary>>(
      [&](store::Transaction& transaction) -> Result<std::vector<Service::LiveJobSummary>> {
        const auto keys = JOULE_TRY(transaction.keys(kLiveJobKind, ""));
        std::vector<Service::LiveJobSummary> summaries;
        // Ids begin with their registration time: the last ones are the newest.
        const size_t first = keys.size() > max_jobs ? keys.size() - max_jobs : 0;
        for (size_t i = first; i < keys.size(); ++i) {
          const auto found = JOULE_TRY(transaction.get_for_update(kLiveJobKind, keys[i]));
          if (!found) {
            continue;
          }
          const auto state = plan::LiveState::parse(found->body);
          if (!state) {
            continue;  // an earlier joule's document, converted when a rank next reads it
          }
          Service::LiveJobSummary summary;
          summary.job_id = keys[i];
          summary.phase = std::string(plan::to_string(state->phase()));
          summary.round = state->round();
          summary.registered = state->registered();
          summary.world_size = state->info().world_size;
          if (const auto& fastest = state->fastest_prediction()) {
            summary.target_time_s = state->straggler_time_s().value_or(fastest->iteration_time_s);
            if (fastest->max_clock_energy_j > 0) {
              summary.predicted_saving = 1 - fastest->iteration_energy_j / fastest->max_clock_energy_j;
            }
          }
          summaries.push_back(std::move(summary));
        }
        return summaries;
      });
}

}  // namespace joule::server::detail
