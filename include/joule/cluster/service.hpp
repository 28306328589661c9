// SPDX-License-Identifier: Apache-2.0
// joule/cluster/service.hpp — the machinery that drives the cluster autopilot's Controller
// (joule/cluster/controller.hpp): a clock, a store, a lock, an optional control thread and the node
// daemons that enforce each decision (docs/cluster.md, "Serving the controller").
//
// Every change (a job registers or ends, progress, the cap, the forecast, a node heard from, time passing)
// is applied to a copy of the controller and re-planned at once; only if the re-plan succeeds (or no cap
// is set yet) is the change written to the store, in one transaction, and the copy kept. So a refused
// change leaves the jobs, the cap and the previous decision exactly as they were, in memory and in the
// database. The new decision then goes to the enforcer, node by node; a node whose daemon does not answer
// is not marked heard from, and once ControllerOptions::node_timeout_s has passed without an answer the
// controller counts its GPUs at their maximum (silent).
//
// State in the store: one "cluster_job" document per job (its JobSpec and registration order) and one
// "cluster_state" document (the cap, the forecast, the last decision version). A service opened later on
// the same database (a restart) loads them and continues the version; a change made by another process on
// the database is picked up (everything re-read) at this service's next change.
//
// Replicas (ClusterServiceOptions::lease): several services on one database, one of which leads by a lease
// in the store (LeaseOptions); the others follow, reading the state and the leader's latest decision
// ("cluster_decision" document) and refusing changes (docs/cluster.md, "High availability").
//
// Times are seconds since the Unix epoch on the service's clock (ClusterServiceOptions::clock), so that
// deadlines and forecasts survive a restart.
//
//   auto store = std::shared_ptr<joule::store::Store>(*joule::store::open_store("sqlite:cluster.db"));
//   auto service = *joule::cluster::ClusterService::open(store, {.initial_cap_w = 800'000});
//   service->add_job({.id = "pretrain", .gpus = {{"n1", 0}}, .frontier = {{300, 1.3}, {700, 1}}});
//   auto decision = service->decision();  // the latest ClusterDecision, as enforced
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/cluster/controller.hpp"
#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/daemon_client_options.hpp"

namespace joule::store {
class Store;
class Transaction;
}  // namespace joule::store

namespace joule::device {
class DaemonClient;
}

namespace joule::cluster {

/// Applies decisions to the nodes: one node's GPU limits at a time. Implementations must be thread-safe
/// (the service calls them under its own lock, from the caller's thread or its control thread).
class NodeEnforcer {
 public:
  virtual ~NodeEnforcer() = default;
  /// Sets every GPU of `node` in `limits` (all on `node`) to its `power_limit_w`: a paused GPU to its job's
  /// lowest limit, a silent node's GPUs to their highest (what the controller counts them at; the attempt
  /// is how the node is found answering again). GPUs set by an earlier call and absent now (their job
  /// ended; `limits` may be empty) go back to the node's own limit. @return an error naming the node when the
  /// node did not answer or refused a setting: the service then does not count the node as heard from.
  virtual Result<void> apply(const std::string& node, std::span<const GpuLimit> limits) = 0;
};

/// An enforcer that records what it is asked and answers as told: for tests, and for `joule serve` without
/// node daemons (decisions computed and served, not enforced).
class RecordingEnforcer final : public NodeEnforcer {
 public:
  Result<void> apply(const std::string& node, std::span<const GpuLimit> limits) override;
  /// Makes `node` fail (kIo, "node 'x' does not answer (test)") or answer again.
  void set_failing(const std::string& node, bool failing);
  /// @return the limits last applied on each node, W, by GPU index.
  std::map<std::string, std::map<int, double>> applied() const;
  /// @return how many apply() calls there were (failed ones included).
  size_t calls() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::map<int, double>> applied_;
  std::map<std::string, bool> failing_;
  size_t calls_ = 0;
};

/// One node's daemon: a name (as jobs name it in their GpuRefs) and its address, a Unix socket's path or a
/// network daemon's "HOST:PORT" (device::DaemonClient::connect()).
struct NodeAddress {
  std::string name;
  std::string address;
};

/// Enforces through the nodes' `joule daemon`s: one DaemonClient connection per node, opened at the first
/// apply() and kept; `set_power_limit` per GPU (in mW, rounded to the nearest). The settings belong to the
/// connection: if this process dies or the connection breaks, each daemon restores its GPUs' limits when
/// the connection closes or its lease runs out (DaemonClient renews the lease while the connection lives).
/// A connection that fails is dropped and opened again at the next apply(); the limits are set again then.
class DaemonEnforcer final : public NodeEnforcer {
 public:
  /// `options.timeout` left at its default becomes 2 s: enforcement holds the service's lock, so a node that
  /// does not answer delays every change by at most that. Errors (kInvalidArgument): no node, an empty name
  /// or address, a name given twice.
  static Result<std::unique_ptr<DaemonEnforcer>> create(std::vector<NodeAddress> nodes,
                                                        device::DaemonClientOptions options = {});
  ~DaemonEnforcer() override;
  /// Errors: kNotFound for a node with no address ("node 'x' has no daemon address (--cluster-nodes)"),
  /// kIo when it cannot be reached or the connection fails, the daemon's error for a refused setting; each
  /// message starts "node 'x' (ADDRESS): ".
  Result<void> apply(const std::string& node, std::span<const GpuLimit> limits) override;

 private:
  DaemonEnforcer(std::vector<NodeAddress> nodes, device::DaemonClientOptions options);
  std::mutex mutex_;
  std::map<std::string, std::string> addresses_;
  std::map<std::string, std::shared_ptr<device::DaemonClient>> clients_;
  std::map<std::string, std::set<int>> set_gpus_;  // node → GPUs this enforcer set on its connection
  device::DaemonClientOptions options_;
};

/// What the last re-plan cost and what enforcement found.
struct ReplanStats {
  uint64_t replans = 0;          ///< successful re-plans since the service opened
  uint64_t failed_replans = 0;   ///< re-plans the cap could not hold (the change refused, or a tick failed)
  double last_replan_s = 0;      ///< the last successful change: copy, re-plan and store commit, s
  double last_controller_s = 0;  ///< of which Controller::replan() alone, s
  double last_enforce_s = 0;     ///< the last enforcement round over every node, s
  std::vector<std::string> unanswered_nodes;  ///< nodes that failed the last enforcement round, sorted
  std::optional<std::string> last_error;  ///< the last failed periodic re-plan's message (cleared on success)
};

/// Leadership among replicas that share one store (docs/cluster.md, "High availability"). The lease is a
/// "cluster_leader" document {holder, address, epoch, lease_s, released}, taken and renewed in a store
/// transaction (get_for_update), so it works on every store. Only the holder re-plans, writes decisions and
/// enforces; the others follow: they load the state and the latest decision as the leader writes them and
/// refuse changes (kState, naming the leader's address).
///
/// Clock skew: no wall clock is compared. A follower takes the lease over only after it has seen the
/// document unchanged for a whole `lease_s` on its own monotonic clock (or the holder released it), with
/// epoch + 1. The holder counts its lease as valid for 0.9 · `lease_s` from the start of its last successful
/// renewal, which ends before any follower can have waited a full lease after seeing that renewal; it stops
/// enforcing when that passes. Every decision write checks, in its own transaction, that this replica still
/// holds the lease with its epoch (fencing).
struct LeaseOptions {
  /// This replica's id, unique among the replicas (e.g. "host:pid:random"); not empty.
  std::string holder;
  /// Where this replica serves its routes (e.g. "http://10.0.0.5:7787"), told to clients of the followers.
  std::string address;
  /// How long a lease lasts without a renewal, s (> 0). Failover takes between lease_s and lease_s +
  /// renew_period_s (+ one re-plan and enforcement round). Must be well below the node daemons' lease
  /// (`joule daemon --lease-s`) so that the dead leader's limits hold until the new leader enforces.
  double lease_s = 5;
  /// The lease is renewed (or watched, on a follower) this often on its own thread, s (< lease_s / 2);
  /// 0: no thread (call lease_round()).
  double renew_period_s = 1;
  /// On destruction the leader marks the lease released, so that a follower takes over at its next round
  /// instead of after a whole lease (tests set false to act as a process killed with -9).
  bool release_on_close = true;
};

/// Who leads, as this replica last saw it.
struct Leadership {
  bool leading = false;  ///< this replica holds the lease (and it has not run out on its clock)
  std::string holder;    ///< the holder's id ("" before any replica took the lease)
  std::string address;   ///< the holder's address
  uint64_t epoch = 0;    ///< +1 at every change of holder; 0 before any replica took the lease
};

/// How the service behaves.
struct ClusterServiceOptions {
  /// The controller's options; first_version is ignored (the store's last version + 1).
  ControllerOptions controller{};
  /// The cap when the store holds none (a fresh database), W; a cap stored by set_cap() wins over it.
  std::optional<double> initial_cap_w{};
  /// Where "now" comes from (its Unix time). nullptr: SteadyClock::instance() (wall-clock anchored).
  const Clock* clock = nullptr;
  /// Applies each decision; nullptr: decisions are computed and kept, not enforced.
  std::shared_ptr<NodeEnforcer> enforcer{};
  /// Re-plans and enforces this often on its own thread (time passes: nodes fall silent, forecast slots
  /// turn, leases are refreshed), s; 0: no thread (call tick()).
  double control_period_s = 0;
  /// Called after every re-plan: with the decision after a successful one (once enforced), with nullptr
  /// after one the cap could not hold (ReplanStats::failed_replans counts it). Runs under the service's lock
  /// (do not call the service from it), e.g. to update metrics.
  std::function<void(const ClusterDecision*, const ReplanStats&)> on_replan{};
  /// Leadership among replicas on one store; unset: this service always leads (one process per database).
  std::optional<LeaseOptions> lease{};
  /// Called after every lease round (lease_round()), from the lease thread or lease_round()'s caller, with
  /// no lock of the service held, e.g. to update metrics.
  std::function<void(const Leadership&)> on_leadership{};
};

/// Drives a Controller (see the file comment). Thread-safe: every call takes one lock, so changes are
/// applied, stored and enforced one at a time, in order.
class ClusterService {
 public:
  /// Opens the service on `store`, loading the jobs, cap, forecast and version stored there, and re-plans
  /// and enforces once when a cap is known. A stored deferrable job whose deadline has passed is loaded as
  /// non-deferrable (it runs now; logged). Errors: the store's; kParse for a stored document that cannot be
  /// read (naming it); kInvalidArgument for a bad initial cap or control period.
  static Result<std::unique_ptr<ClusterService>> open(std::shared_ptr<store::Store> store,
                                                      ClusterServiceOptions options = {});
  /// Stops the control thread.
  ~ClusterService();
  ClusterService(const ClusterService&) = delete;
  ClusterService& operator=(const ClusterService&) = delete;

  // Each change below: on success the new decision (nullopt while no cap is set); on an error nothing
  // changed. On a replica that does not lead (or whose lease a follower took over): kState, "this replica
  // (ID) does not lead: changes go to the leader at ADDRESS (epoch N)". Otherwise errors are the controller's
  // (kInvalidArgument for bad input, kNotFound for an unknown job, kOutOfRange when the cap cannot hold the
  // jobs after the change: "job 'x' refused: …", "cap 500 W refused: …"), or the store's (kIo).

  /// Registers a job now (Controller::add_job()).
  Result<std::optional<ClusterDecision>> add_job(JobSpec spec);
  /// A job ended (Controller::remove_job()).
  Result<std::optional<ClusterDecision>> remove_job(std::string_view id);
  /// A deferrable job's running time still needed at full speed, s (Controller::update_progress()).
  Result<std::optional<ClusterDecision>> update_progress(std::string_view id, double remaining_s);
  /// The cluster's power cap, W (> 0). A cap the jobs' floors or the silent reserve exceed is refused
  /// (kOutOfRange) and the previous cap stands.
  Result<std::optional<ClusterDecision>> set_cap(double cap_w);
  /// The carbon forecast: slots from `start_s` (Unix s) (Controller::set_forecast()).
  Result<std::optional<ClusterDecision>> set_forecast(std::vector<ForecastSlot> slots, double start_s);
  /// Drops the forecast: every deferrable job runs.
  Result<std::optional<ClusterDecision>> clear_forecast();
  /// A node answered out of band (e.g. its agent reported): its silence ends.
  Result<std::optional<ClusterDecision>> heard_from(std::string_view node);
  /// Time passed: re-plans now and enforces (what the control thread does every period). A re-plan the cap
  /// cannot hold (nodes fell silent) is an error; the previous decision stays enforced and
  /// ReplanStats::last_error says why.
  Result<std::optional<ClusterDecision>> tick();

  /// One lease round (what the lease thread does every LeaseOptions::renew_period_s): the leader renews
  /// its lease; a follower takes it over when it was released or has not changed for a whole lease on this
  /// service's clock, and otherwise reloads the state and the latest decision if the leader changed them.
  /// A replica that gains the lease re-plans and enforces at once; one that loses it stops enforcing.
  /// @return who leads after the round. Errors: the store's (kIo; a leader that cannot renew keeps leading
  /// until its lease runs out on its clock), kParse for a lease document that cannot be read,
  /// kInvalidArgument without ClusterServiceOptions::lease.
  Result<Leadership> lease_round();
  /// @return who leads, as this replica last saw it (without a lease: always this one, epoch 0).
  Leadership leadership() const;
  /// Replaces LeaseOptions::address and runs a lease round, so that a leader's lease document names it at
  /// once (e.g. once `joule serve` knows the port it listens on). No effect without a lease.
  void advertise(std::string address);

  /// @return the latest decision (nullopt before the first successful re-plan).
  std::optional<ClusterDecision> decision() const;
  /// @return the registered jobs, in registration order.
  std::vector<JobSpec> jobs() const;
  /// @return the cap, W (nullopt: none set).
  std::optional<double> cap_w() const;
  ReplanStats stats() const;
  /// @return whether decisions go to an enforcer (ClusterServiceOptions::enforcer).
  bool enforces() const { return options_.enforcer != nullptr; }
  /// @return now on the service's clock, s since the Unix epoch.
  double now_s() const;

 private:
  struct State;
  ClusterService(std::shared_ptr<store::Store> store, ClusterServiceOptions options);
  // Applies `change` to a copy of the state, re-plans, stores and enforces (see the file comment).
  Result<std::optional<ClusterDecision>> change(
      const std::function<Result<void>(State&, double now_s)>& change, std::string_view what);
  Result<void> load_locked(store::Transaction& transaction);
  void enforce_locked(const ClusterDecision& decision, double now_s);
  void control_loop();
  void lease_loop();
  // Whether this replica may write and enforce now: no lease configured, or it holds one that has not run
  // out on its clock.
  bool lease_valid() const;
  Error not_leader_error() const;
  // A follower's refresh: the stored state and decision, if the leader changed them.
  Result<void> follow_locked();
  void release_lease();

  std::shared_ptr<store::Store> store_;
  ClusterServiceOptions options_;
  const Clock& clock_;
  mutable std::mutex mutex_;
  std::unique_ptr<State> state_;
  std::optional<ClusterDecision> decision_;
  ReplanStats stats_;
  // The cluster_state document's version this state was loaded at or last wrote (0: none stored).
  int64_t state_document_version_ = 0;
  std::set<std::string> enforced_nodes_;               // nodes given limits by an earlier round
  std::map<std::string, std::string> enforce_errors_;  // node → the failure last logged for it

  // The lease (LeaseOptions): guarded by lease_mutex_, which is never held while waiting for mutex_.
  mutable std::mutex lease_mutex_;
  std::mutex lease_round_mutex_;  // one lease round at a time
  Leadership leadership_;
  std::string address_;              // LeaseOptions::address, or what advertise() gave
  Nanos lease_valid_until_{0};       // on clock_: the holder's lease runs out then
  int64_t seen_lease_version_ = -1;  // the lease document's version a follower last saw change
  Nanos seen_lease_at_{0};           // on clock_: when it saw that

  std::mutex thread_mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
  std::thread lease_thread_;
};

// The JSON forms (the store's documents and `joule serve`'s /cluster routes, docs/cluster.md).

/// @return {id, kind, gpus: [{node, index}], priority, frontier: [{power_limit_w, time_s}], slo_floor_w?,
/// deferrable, deadline_s?, remaining_s?}.
nlohmann::json to_json(const JobSpec& spec);
/// Parses a job; `frontier` may also be [[limit_w, time_s], …]; a deferrable job gives `deadline_s`
/// (absolute, Unix s) or `deadline_in_s` (from `now_s`). Errors (kInvalidArgument) name the field:
/// "gpus[1].index: must be an integer ≥ 0", "frontier[2]: expected [power_limit_w, time_s] or
/// {power_limit_w, time_s}", an unknown field, a missing id or frontier.
Result<JobSpec> job_spec_from_json(const nlohmann::json& body, double now_s);
/// @return {version, now_s, cap_w, allocated_w, reserved_w, paused_w, degraded?, silent_nodes,
/// deferred_running, deferred_waiting, at_risk, weighted_loss, exact, jobs: [{id, kind, power_limit_w,
/// throughput_loss, paused, at_risk, reason}], gpus: [{node, index, job_id, power_limit_w, paused, silent}]}.
nlohmann::json to_json(const ClusterDecision& decision);
/// Parses what to_json(decision) wrote (how followers read the leader's decision from the store); the
/// deferral plan and per-job allocation details are not carried. Errors (kParse) name the field.
Result<ClusterDecision> decision_from_json(const nlohmann::json& body);
/// @return {leading, holder, address, epoch}.
nlohmann::json to_json(const Leadership& leadership);

}  // namespace joule::cluster
