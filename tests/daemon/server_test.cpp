// SPDX-License-Identifier: Apache-2.0
// The daemon in-process on simulated GPUs, with clients on raw sockets, DaemonClient/DaemonGpu, and
// helper processes that are other users or get killed while they own settings.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "joule/core/log.hpp"
#include "joule/daemon/daemon.hpp"
#include "joule/daemon/metrics.hpp"
#include "joule/device/daemon_client.hpp"
#include "joule/device/daemon_cpu.hpp"
#include "joule/device/daemon_gpu.hpp"
#include "joule/device/discovery.hpp"
#include "joule/device/rapl.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/optimize/power_limit.hpp"

#include "captured_log.hpp"
#include "daemon/line_client.hpp"
#include "fakes/rapl/fake_powercap.hpp"
#include "integration/run_process.hpp"
#include "metrics/metrics_text.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using namespace std::chrono_literals;
namespace proto = device::daemon_protocol;
using nlohmann::json;

constexpr uint32_t kNobody = 65534;

// A client speaking the protocol by hand, to send what DaemonClient never would.
class RawClient : public test::LineClient {
 public:
  using LineClient::LineClient;

  void send_raw(const std::string& bytes) const { ASSERT_TRUE(send_all(bytes)); }
  json hello() { return request(R"({"id":1,"op":"hello","protocol":1,"client":"raw"})"); }
};

// Runs `body` on a thread of its own whose effective uid is `uid`: the raw system call changes the
// credentials of that thread only (glibc's seteuid() would change every thread's, the daemon's too). Sockets
// it connects carry `uid` in SO_PEERCRED, files it creates belong to `uid`.
template <class Body>
void as_user(uid_t uid, Body body) {
  std::thread thread([&] {
    if (::syscall(SYS_setresuid, -1, uid, -1) != 0) {
      ADD_FAILURE() << "cannot become uid " << uid << ": " << std::strerror(errno);
      return;
    }
    try {
      body();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "as uid " << uid << ": " << error.what();
    }
    if (::syscall(SYS_setresuid, -1, 0, -1) != 0) {
      ADD_FAILURE() << "cannot become root again: " << std::strerror(errno);
    }
  });
  thread.join();
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string message_of(const json& response) {
  return response.at("error").at("message").get<std::string>();
}

std::string code_of(const json& response) {
  return response.at("error").at("code").get<std::string>();
}

class DaemonServer : public ::testing::Test {
 protected:
  DaemonServer() {
    // Other users (the helper as nobody) must reach the socket inside the test folder.
    ::chmod(dir.path().c_str(), 0755);
    auto opened = device::sim::open_sim_gpus(*device::sim::parse_spec("2xv100"), clock);
    for (auto& gpu : *opened) {
      gpus.push_back(std::move(gpu));
    }
    socket_path = dir.path() + "/run/joule.sock";
    audit_path = dir.path() + "/audit.log";
  }
  ~DaemonServer() override { stop(); }

  void start(daemon::DaemonOptions options = {}) {
    start_serving({gpus[0].get(), gpus[1].get()}, std::move(options));
  }
  void start_serving(std::vector<device::Gpu*> served, daemon::DaemonOptions options) {
    options.socket_path = socket_path;
    options.audit_log = audit_path;
    auto started = daemon::Daemon::start(std::move(served), *clock, std::move(options));
    ASSERT_TRUE(started) << started.error().message();
    daemon = std::move(*started);
    thread = std::thread([this] { run_result = daemon->run(); });
  }
  void stop() {
    if (daemon) {
      daemon->stop();
      thread.join();
      daemon.reset();
    }
  }

  uint32_t limit(size_t gpu) { return *gpus[gpu]->power_limit_mw(); }

  /// Makes dir/shared a folder every user may write, sticky (as /tmp), and puts the socket there.
  /// @return the folder.
  std::string use_shared_folder() {
    const std::string shared = dir.path() + "/shared";
    std::filesystem::create_directories(shared);
    ::chmod(shared.c_str(), 01777);
    socket_path = shared + "/joule.sock";
    return shared;
  }

  /// Waits until `done()` holds, at most `timeout`. @return done().
  template <class Predicate>
  static bool wait_until(Predicate done, std::chrono::milliseconds timeout = 3s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    return done();
  }

  /// Calls `attempt` (which does something: it is called once per try) until it returns true, at most
  /// `timeout`. @return whether it did.
  template <class Attempt>
  static bool eventually(Attempt attempt, std::chrono::milliseconds timeout = 3s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!attempt()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return false;
      }
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  /// Waits until GPU `gpu`'s limit is `expected_mw`, at most `timeout`.
  bool wait_for_limit(size_t gpu, uint32_t expected_mw, std::chrono::milliseconds timeout = 3s) {
    return wait_until([&] { return limit(gpu) == expected_mw; }, timeout);
  }

  std::string audit_text() const {
    std::ifstream in(audit_path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::shared_ptr<device::DaemonClient> connect(bool renew = true, std::string holder = {}) {
    device::DaemonClientOptions options;
    options.renew_lease = renew;
    options.holder = std::move(holder);
    options.client_name = "server_test";
    auto client = device::DaemonClient::connect(socket_path, options);
    if (!client) {
      throw std::runtime_error(client.error().message());
    }
    return *client;
  }

  TempDir dir;
  std::shared_ptr<Clock> clock{std::shared_ptr<Clock>{}, &SteadyClock::instance()};
  std::vector<std::unique_ptr<device::sim::SimulatedGpu>> gpus;
  std::string socket_path;
  std::string audit_path;
  std::unique_ptr<daemon::Daemon> daemon;
  std::thread thread;
  Result<std::optional<int>> run_result{std::nullopt};
};

TEST_F(DaemonServer, HelloComesFirstAndSaysWhoTheClientIs) {
  start();
  RawClient client(socket_path);
  const auto early = client.request(R"({"id":5,"op":"power","gpu":0})");
  EXPECT_EQ(early["id"], 5);
  EXPECT_EQ(code_of(early), "state");
  EXPECT_EQ(message_of(early), R"(send hello first, e.g. {"op":"hello","protocol":1})");
  const auto hello = client.hello();
  ASSERT_TRUE(hello["ok"].get<bool>()) << hello;
  EXPECT_EQ(hello["result"]["protocol"], 1);
  EXPECT_EQ(hello["result"]["lease_s"], 60.0);
  EXPECT_EQ(hello["result"]["peer"]["uid"], 0);
  EXPECT_EQ(hello["result"]["peer"]["pid"], ::getpid());
  EXPECT_EQ(hello["result"]["rights"], (json{{"read", true}, {"control", true}}));
  EXPECT_EQ(hello["result"]["reason"], "root");
  EXPECT_EQ(message_of(client.hello()), "hello was already sent on this connection");
  const auto whoami = client.request(R"({"id":2,"op":"whoami"})");
  EXPECT_EQ(whoami["result"]["user"], "root");
  EXPECT_EQ(whoami["result"]["right"], "control");

  RawClient future(socket_path);
  const auto refused = future.request(R"({"id":1,"op":"hello","protocol":2})");
  EXPECT_EQ(code_of(refused), "not-supported");
  EXPECT_EQ(message_of(refused),
            "this joule daemon speaks protocol version 1; the client speaks 2: use a joule of "
            "the same release as the daemon");
}

TEST_F(DaemonServer, EveryBadRequestGetsAnErrorAndChangesNothing) {
  start();
  RawClient client(socket_path);
  client.hello();
  ASSERT_TRUE(client.request(R"({"id":2,"op":"set_power_limit","gpu":1,"power_limit_mw":200000})")["ok"]);
  struct Case {
    std::string line;
    std::string code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"{\"id\":3,\"op\":", "parse",
       "request is not valid JSON (parse error at line 1, column 14: syntax error while parsing value - "
       "unexpected "
       "end of input; expected '[', '{', or a literal); send one JSON object per line"},
      {R"({"id":4,"op":"fly"})", "invalid-argument", ""},
      {R"({"id":5,"op":"set_power_limit","gpu":0,"power_limit_mw":50000})", "out-of-range",
       "power limit 50 W is outside GPU 0 (Tesla V100-PCIE-32GB (simulated))'s range 100 W to 250 W"},
      {R"({"id":6,"op":"set_power_limit","gpu":0,"power_limit_mw":400000})", "out-of-range", ""},
      {R"({"id":7,"op":"set_power_limit","gpu":2,"power_limit_mw":150000})", "not-found",
       "unknown GPU 2: the daemon serves 2 GPUs (indices 0 to 1)"},
      {R"({"id":8,"op":"power_limit","gpu":9})", "not-found",
       "unknown GPU 9: the daemon serves 2 GPUs (indices 0 to 1)"},
      {R"({"id":9,"op":"lock_sm_clocks","gpu":0,"min_mhz":1200,"max_mhz":900})", "invalid-argument",
       "cannot lock GPU 0 (Tesla V100-PCIE-32GB (simulated))'s SM clock: minimum 1200 MHz is above maximum "
       "900 MHz"},
      {R"({"id":10,"op":"lock_sm_clocks","gpu":0,"min_mhz":10,"max_mhz":90000})", "out-of-range", ""},
      {R"({"id":11,"op":"set_power_limit","gpu":0,"power_limit_mw":"150000"})", "invalid-argument",
       "set_power_limit: field 'power_limit_mw' must be an integer from 0 to 4294967295 (got \"150000\")"},
      {R"({"id":12,"op":"cancel_stream","stream":77})", "not-found",
       "no stream 77 on this connection (it has none)"},
      {R"({"id":13,"op":"stream_power","gpus":[0,5]})", "not-found",
       "stream_power: unknown GPU 5: the daemon serves 2 GPUs"},
      {R"({"id":14,"op":"gpu_telemetry","gpu":2})", "not-found",
       "unknown GPU 2: the daemon serves 2 GPUs (indices 0 to 1)"},
      {R"({"id":15,"op":"cpu_energy","cpu":0})", "not-found",
       "unknown CPU 0: the daemon serves no CPU energy counters: it was started without them"},
  };
  for (const auto& bad : cases) {
    const auto response = client.request(bad.line);
    ASSERT_FALSE(response["ok"].get<bool>()) << bad.line;
    EXPECT_EQ(code_of(response), bad.code) << bad.line;
    if (!bad.message.empty()) {
      EXPECT_EQ(message_of(response), bad.message) << bad.line;
    }
    EXPECT_EQ(limit(0), 250'000u) << bad.line;
    EXPECT_EQ(limit(1), 200'000u) << bad.line;
  }
  // An over-long line is refused, skipped to its end, and the connection goes on.
  client.send_raw(std::string(proto::kMaxLineBytes + 10, 'x') + "\n");
  const auto long_line = json::parse(client.read_line());
  EXPECT_EQ(code_of(long_line), "invalid-argument");
  EXPECT_NE(message_of(long_line).find("65536 bytes"), std::string::npos) << long_line;
  // Longer still: refused before its end arrives, then skipped to its end.
  client.send_raw(std::string(4 * proto::kMaxLineBytes, 'x') + "\n");
  EXPECT_EQ(message_of(json::parse(client.read_line())),
            "request line longer than 65536 bytes; it is skipped up to the next newline");
  // Blank lines are ignored; a good request still works.
  const auto good = client.request(
      "\n\r\n"
      R"({"id":14,"op":"power_limit","gpu":1})");
  EXPECT_EQ(good["id"], 14);
  EXPECT_EQ(good["result"]["power_limit_mw"], 200'000);
  EXPECT_EQ(audit_text().find("new=50000"), std::string::npos);
}

TEST_F(DaemonServer, ReadsEveryValueThroughDaemonGpu) {
  start();
  auto opened = device::open_daemon_gpus(socket_path);
  ASSERT_TRUE(opened) << opened.error().message();
  ASSERT_EQ(opened->size(), 2u);
  device::Gpu& gpu = *(*opened)[1];
  EXPECT_EQ(gpu.info().backend, "daemon");
  EXPECT_EQ(gpu.info().index, 1);
  EXPECT_EQ(gpu.info().name, gpus[1]->info().name);
  EXPECT_EQ(gpu.info().uuid, gpus[1]->info().uuid);
  EXPECT_TRUE(gpu.info().has_energy_counter);
  const auto constraints = gpu.power_limit_constraints();
  ASSERT_TRUE(constraints);
  EXPECT_EQ(constraints->min_mw, 100'000u);
  EXPECT_EQ(constraints->max_mw, 250'000u);
  EXPECT_EQ(constraints->default_mw, 250'000u);
  EXPECT_EQ(gpu.power_limit_mw(), 250'000u);
  EXPECT_EQ(*gpu.power_mw(), *gpus[1]->power_mw());
  const auto first = gpu.energy_mj();
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(first);
  EXPECT_GT(*gpu.energy_mj(), *first);
  EXPECT_EQ(*gpu.supported_sm_clocks_mhz(), *gpus[1]->supported_sm_clocks_mhz());
  ASSERT_TRUE(gpu.set_power_limit_mw(180'000));
  EXPECT_EQ(limit(1), 180'000u);
  ASSERT_TRUE(gpu.lock_sm_clocks(900, 1200));
  ASSERT_TRUE(gpu.reset_sm_clocks());
  ASSERT_TRUE(gpu.reset_power_limit());  // the board default, owned by this client until it goes
  EXPECT_EQ(limit(1), 250'000u);
  const auto refused = gpu.set_power_limit_mw(50'000);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kOutOfRange);
}

TEST_F(DaemonServer, ASimulatedGpuIsMadeBusyOrIdleThroughTheDaemon) {
  start();
  auto opened = device::open_daemon_gpus(socket_path);
  ASSERT_TRUE(opened) << opened.error().message();
  device::Gpu& gpu = *(*opened)[0];
  // Idle: the model's idle power; busy: its workload's, slower under a clock lock.
  const auto idle = gpu.set_simulated_busy(false);
  ASSERT_TRUE(idle) << idle.error().message();
  ASSERT_EQ(*idle, 1.0);
  EXPECT_EQ(*gpus[0]->power_mw(), static_cast<uint32_t>(std::lround(gpus[0]->model().idle_power_w * 1e3)));
  EXPECT_EQ(gpu.set_simulated_busy(true).value(), 1.0);
  EXPECT_GT(*gpus[0]->power_mw(), static_cast<uint32_t>(std::lround(gpus[0]->model().idle_power_w * 1e3)));
  ASSERT_TRUE(gpu.lock_sm_clocks(600, 600));
  EXPECT_GT(gpu.set_simulated_busy(true).value(), 1.5);
  // It takes the control right, like a setting.
  // It is a device request: the index is checked as for the others.
  const auto unknown = dynamic_cast<device::DaemonGpu&>(gpu).client().call([] {
    device::daemon_protocol::Request request;
    request.op = device::daemon_protocol::Op::kSimulateBusy;
    request.gpu = 7;
    return request;
  }());
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message(),
            "joule daemon: unknown GPU 7: the daemon serves 2 GPUs (indices 0 to 1)");
}

TEST_F(DaemonServer, ManyConnectionsAreServedTogether) {
  start();
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 24; ++i) {
    clients.push_back(std::make_unique<RawClient>(socket_path));
  }
  // Every client sends before any reads: the daemon must answer all of them.
  for (auto& client : clients) {
    client->send_raw(R"({"id":1,"op":"hello","protocol":1})"
                     "\n"
                     R"({"id":2,"op":"power","gpu":1})"
                     "\n");
  }
  for (auto& client : clients) {
    EXPECT_TRUE(json::parse(client->read_line())["ok"].get<bool>());
    const auto power = json::parse(client->read_line());
    EXPECT_EQ(power["id"], 2);
    EXPECT_GT(power["result"]["power_mw"].get<uint32_t>(), 0u);
  }
}

TEST_F(DaemonServer, ClosingAConnectionRestoresItsSettings) {
  start();
  {
    auto client = connect();
    ASSERT_TRUE(client->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 150'000}));
    ASSERT_TRUE(client->call({.op = proto::Op::kLockSmClocks, .gpu = 1, .min_mhz = 900, .max_mhz = 1200}));
    EXPECT_EQ(limit(0), 150'000u);
    const auto clocks = client->call({.op = proto::Op::kClocks, .gpu = 1});
    ASSERT_TRUE(clocks);
    EXPECT_EQ((*clocks)["locked_sm_clocks_mhz"], (json{{"min_mhz", 900}, {"max_mhz", 1200}}));
  }
  EXPECT_TRUE(wait_for_limit(0, 250'000));
  // The daemon restores on its own thread: wait for the last restore to be audited.
  EXPECT_TRUE(wait_until(
      [this] { return audit_text().find("setting=sm_clocks_mhz old=900-1200") != std::string::npos; }));
  const auto settings = gpus[1]->settings_log();
  ASSERT_FALSE(settings.empty());
  EXPECT_EQ(settings.back().setting, "sm_clocks_reset");
  const std::string audit = audit_text();
  EXPECT_NE(audit.find("action=restore gpu=0 setting=power_limit_mw old=150000 new=250000"),
            std::string::npos)
      << audit;
  EXPECT_NE(audit.find("action=restore gpu=1 setting=sm_clocks_mhz old=900-1200 new=unlocked"),
            std::string::npos);
  EXPECT_NE(audit.find("reason=disconnected"), std::string::npos);
}

TEST_F(DaemonServer, MemoryClocksAreForwardedOwnedAndRestoredWhenTheClientGoes) {
  start();
  {
    auto opened = device::open_daemon_gpus(socket_path);
    ASSERT_TRUE(opened) << opened.error().message();
    device::Gpu& gpu = *(*opened)[0];
    EXPECT_EQ(gpu.supported_memory_clocks_mhz().value(), *gpus[0]->supported_memory_clocks_mhz());
    ASSERT_TRUE(gpu.lock_memory_clocks(877, 877));
    const auto clocks = dynamic_cast<device::DaemonGpu&>(gpu).client().call([] {
      proto::Request request;
      request.op = proto::Op::kMemoryClocks;
      request.gpu = 0;
      return request;
    }());
    ASSERT_TRUE(clocks);
    EXPECT_EQ((*clocks)["locked_memory_clocks_mhz"], (json{{"min_mhz", 877}, {"max_mhz", 877}}));
    // The device's refusal comes back as it is, and takes no ownership.
    const auto outside = (*opened)[1]->lock_memory_clocks(700, 800);
    ASSERT_FALSE(outside);
    EXPECT_EQ(outside.error().code(), ErrorCode::kOutOfRange);
    EXPECT_EQ(outside.error().message(),
              "joule daemon: memory clock range 700-800 MHz holds none of GPU 1 (Tesla V100-PCIE-32GB "
              "(simulated))'s memory clocks (877 MHz)");
  }
  // The client went away: the daemon resets the lock it held, on GPU 0 only.
  EXPECT_TRUE(wait_until([this] {
    return audit_text().find("action=restore gpu=0 setting=memory_clocks_mhz old=877-877 new=unlocked") !=
           std::string::npos;
  })) << audit_text();
  ASSERT_FALSE(gpus[0]->settings_log().empty());
  EXPECT_EQ(gpus[0]->settings_log().back().setting, "memory_clocks_reset");
  EXPECT_TRUE(gpus[1]->settings_log().empty());
}

TEST_F(DaemonServer, ReadersMayNotLockMemoryClocksAndTheRefusalIsAudited) {
  start();
  std::unique_ptr<RawClient> reader;
  as_user(kNobody, [&] { reader = std::make_unique<RawClient>(socket_path); });
  ASSERT_TRUE(reader->hello()["ok"].get<bool>());
  const auto refused =
      reader->request(R"({"id":2,"op":"lock_memory_clocks","gpu":0,"min_mhz":877,"max_mhz":877})");
  EXPECT_EQ(code_of(refused), "permission-denied");
  EXPECT_EQ(message_of(refused).rfind("lock_memory_clocks needs the 'control' right; nobody has 'read'", 0),
            0u)
      << message_of(refused);
  // Reading them needs only the read right.
  const auto read = reader->request(R"({"id":3,"op":"memory_clocks","gpu":0})");
  EXPECT_EQ(read["result"]["supported_memory_clocks_mhz"], (json{877}));
  EXPECT_TRUE(gpus[0]->settings_log().empty());
  EXPECT_TRUE(wait_until([this] {
    return audit_text().find("action=refused gpu=0 setting=memory_clocks_mhz new=877-877") !=
           std::string::npos;
  })) << audit_text();
}

// A GPU that forwards every call to another (a simulated GPU); the tests' GPUs below change one thing.
class ForwardingGpu : public device::Gpu {
 public:
  explicit ForwardingGpu(device::Gpu& inner) : Gpu(inner.info()), inner_(inner) {}

 protected:
  Result<uint32_t> do_power_mw() override { return inner_.power_mw(); }
  Result<uint64_t> do_energy_mj() override { return inner_.energy_mj(); }
  Result<device::PowerLimitConstraints> do_power_limit_constraints() override {
    return inner_.power_limit_constraints();
  }
  Result<uint32_t> do_power_limit_mw() override { return inner_.power_limit_mw(); }
  Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override {
    return inner_.set_power_limit_mw(power_limit_mw);
  }
  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override {
    return inner_.supported_sm_clocks_mhz();
  }
  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    return inner_.lock_sm_clocks(min_mhz, max_mhz);
  }
  Result<void> do_reset_sm_clocks() override { return inner_.reset_sm_clocks(); }

  device::Gpu& inner_;
};

// A Grace Hopper module around a simulated GPU: module power and energy beside the GPU's own, as NVML's
// module-scope fields give them (tests/device/nvml/nvml_module_test.cpp tests those through the fake NVML).
class ModuleGpu final : public ForwardingGpu {
 public:
  using ForwardingGpu::ForwardingGpu;

 protected:
  Result<uint32_t> do_module_power_mw() override { return 900'000; }
  Result<uint64_t> do_module_energy_mj() override {
    return fail(ErrorCode::kPermissionDenied, "{}: reading the module energy: Insufficient Permissions",
                label());
  }
};

TEST_F(DaemonServer, ModulePowerAndEnergyAreForwardedEachWithItsOwnError) {
  ModuleGpu module(*gpus[0]);
  start_serving({&module, gpus[1].get()}, {});
  auto opened = device::open_daemon_gpus(socket_path);
  ASSERT_TRUE(opened) << opened.error().message();
  EXPECT_EQ((*opened)[0]->module_power_mw().value(), 900'000u);
  const auto energy = (*opened)[0]->module_energy_mj();
  ASSERT_FALSE(energy);
  EXPECT_EQ(energy.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(energy.error().message(),
            "joule daemon: GPU 0 (Tesla V100-PCIE-32GB (simulated)): reading the module energy: Insufficient "
            "Permissions");
  // A GPU without a module says why, through the daemon.
  const auto none = (*opened)[1]->module_power_mw();
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), ErrorCode::kNotSupported);
  EXPECT_EQ(
      none.error().message(),
      "joule daemon: GPU 1 (Tesla V100-PCIE-32GB (simulated)) does not report module power (sim backend): "
      "only NVIDIA Grace Hopper and Grace Blackwell modules do, through NVML");
  stop();  // before `module` goes: the daemon's thread reads its GPUs until it stops
}

TEST_F(DaemonServer, TwoClientsOnOneGpuTheLaterWinsTheLastRestores) {
  start();
  auto first = connect();
  auto second = connect();
  ASSERT_TRUE(first->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 150'000}));
  const auto answer = second->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 200'000});
  ASSERT_TRUE(answer);
  EXPECT_EQ((*answer)["previous_mw"], 150'000);
  EXPECT_EQ(limit(0), 200'000u);
  second.reset();  // the owner in force goes: the first client's value is back
  EXPECT_TRUE(wait_for_limit(0, 150'000));
  first.reset();
  EXPECT_TRUE(wait_for_limit(0, 250'000));
}

TEST_F(DaemonServer, AKilledClientProcessIsRestored) {
  start();
  Process helper({JOULE_DAEMON_HELPER, "--socket", socket_path, "--request",
                  R"({"id":2,"op":"set_power_limit","gpu":1,"power_limit_mw":120000})", "--hold"});
  ASSERT_TRUE(helper.wait_for_output(5s));
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (helper.out_so_far().find("holding") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_NE(helper.out_so_far().find(R"("ok":true)"), std::string::npos) << helper.out_so_far();
  EXPECT_EQ(limit(1), 120'000u);
  helper.signal(SIGKILL);
  EXPECT_EQ(helper.wait().exit_code, 128 + SIGKILL);
  // Another connection sees the original again.
  auto observer = connect();
  const auto deadline_restore = std::chrono::steady_clock::now() + 3s;
  uint32_t seen = 0;
  while (std::chrono::steady_clock::now() < deadline_restore) {
    seen = (*observer->call({.op = proto::Op::kPowerLimit, .gpu = 1}))["power_limit_mw"].get<uint32_t>();
    if (seen == 250'000) {
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(seen, 250'000u);
  EXPECT_NE(audit_text().find("action=restore gpu=1 setting=power_limit_mw old=120000 new=250000"),
            std::string::npos);
}

TEST_F(DaemonServer, AnExpiredLeaseRestoresAndTheNextRequestSaysSo) {
  daemon::DaemonOptions options;
  options.lease_s = 0.3;
  start(options);
  auto client = connect(/*renew=*/false);
  EXPECT_DOUBLE_EQ(client->lease_s(), 0.3);
  ASSERT_TRUE(client->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 150'000}));
  EXPECT_TRUE(wait_for_limit(0, 250'000, 2s));
  const auto told = client->call({.op = proto::Op::kPowerLimit, .gpu = 0});
  ASSERT_FALSE(told);
  EXPECT_EQ(told.error().code(), ErrorCode::kState);
  EXPECT_EQ(
      told.error().message(),
      "joule daemon: the lease of 0.3 s ran out without a request, so the daemon restored this connection's "
      "settings (GPU 0 (Tesla V100-PCIE-32GB (simulated)) power limit 150 W -> 250 W); this request was not "
      "run: send it again (settings made from now on are owned again)");
  EXPECT_EQ((*client->call({.op = proto::Op::kPowerLimit, .gpu = 0}))["power_limit_mw"], 250'000);
  EXPECT_NE(audit_text().find("reason=lease-expired"), std::string::npos);
}

// Holders: a service that fails over to another process (the cluster autopilot's next leader) must find
// its settings in force, not the originals, or the cap it set would lapse while the new leader starts.
TEST_F(DaemonServer, AHoldersSettingsOutliveItsConnectionForOneLeaseAndTheNextTakesThemOver) {
  daemon::DaemonOptions options;
  options.lease_s = 2;  // long enough that a loaded machine connects the next within it
  start(options);
  {
    auto leader = connect(/*renew=*/true, "autopilot");
    EXPECT_EQ(leader->hello()["holder"]["held"], json::array());
    ASSERT_TRUE(leader->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 150'000}));
    ASSERT_TRUE(leader->call({.op = proto::Op::kLockSmClocks, .gpu = 1, .min_mhz = 900, .max_mhz = 1200}));
  }
  // The leader is gone (its process died): nothing is restored while the lease runs.
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(limit(0), 150'000u);
  EXPECT_EQ(audit_text().find("action=restore"), std::string::npos) << audit_text();
  {
    auto next = connect(/*renew=*/true, "autopilot");
    const json holder = next->hello()["holder"];
    EXPECT_EQ(holder["name"], "autopilot");
    EXPECT_EQ(holder["held"],
              (json{"GPU 0 (Tesla V100-PCIE-32GB (simulated)) power limit 150 W (in force)",
                    "GPU 1 (Tesla V100-PCIE-32GB (simulated)) SM clocks 900-1200 MHz (in force)"}));
    EXPECT_TRUE(holder["taken_from"].is_null());
    // Its settings are the holder's: a new limit replaces the old one, and renewal keeps them.
    ASSERT_TRUE(next->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 175'000}));
    std::this_thread::sleep_for(2500ms);  // longer than a lease: renewal keeps them
    EXPECT_EQ(limit(0), 175'000u);
  }
  // No process takes the holder over within a lease: the originals come back, once.
  EXPECT_TRUE(wait_for_limit(0, 250'000, 10s));
  EXPECT_TRUE(wait_until([this] {
    return audit_text().find("action=restore gpu=1 setting=sm_clocks_mhz old=900-1200 new=unlocked") !=
           std::string::npos;
  })) << audit_text();
  const std::string audit = audit_text();
  EXPECT_NE(audit.find("action=restore gpu=0 setting=power_limit_mw old=175000 new=250000"),
            std::string::npos)
      << audit;
  EXPECT_NE(audit.find("reason=lease-expired"), std::string::npos);
  EXPECT_EQ(audit.find("reason=disconnected"), std::string::npos) << audit;
}

TEST_F(DaemonServer, ATakenOverHolderFencesItsOldConnectionAndNoOtherUserCanTakeIt) {
  daemon::DaemonOptions options;
  options.access.others = daemon::Right::kControl;
  start(options);
  auto first = connect(/*renew=*/true, "autopilot");
  ASSERT_TRUE(first->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 150'000}));
  // Another user naming the same holder gets a holder of its own: nothing of root's.
  std::unique_ptr<RawClient> other;
  as_user(kNobody, [&] { other = std::make_unique<RawClient>(socket_path); });
  const auto others =
      other->request(R"({"id":1,"op":"hello","protocol":1,"client":"raw","holder":"autopilot"})");
  ASSERT_TRUE(others["ok"].get<bool>()) << others.dump();
  EXPECT_EQ(others["result"]["holder"]["held"], json::array());
  // The same user's second process takes it over while the first is still connected (a deposed leader
  // that has not noticed): the first may no longer change settings.
  auto second = connect(/*renew=*/true, "autopilot");
  const uint64_t first_id = second->hello()["holder"]["taken_from"].get<uint64_t>();
  EXPECT_GT(first_id, 0u);
  const auto fenced = first->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 100'000});
  ASSERT_FALSE(fenced);
  EXPECT_EQ(fenced.error().code(), ErrorCode::kState);
  const std::string fence = fenced.error().message();
  EXPECT_EQ(
      fence.rfind("joule daemon: this connection no longer acts for holder 'autopilot': connection ", 0), 0u)
      << fence;
  EXPECT_NE(fence.find(" took it over; it may not change settings"), std::string::npos) << fence;
  EXPECT_TRUE(first->call({.op = proto::Op::kPowerLimit, .gpu = 0}));  // reading is still allowed
  EXPECT_EQ(limit(0), 150'000u);
  // The first closing restores nothing: the holder is the second's now.
  first.reset();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(limit(0), 150'000u);
  ASSERT_TRUE(second->call({.op = proto::Op::kResetPowerLimit, .gpu = 0}));
  EXPECT_EQ(limit(0), 250'000u);
}

TEST_F(DaemonServer, AHolderNameIsCheckedAtHello) {
  start();
  RawClient client(socket_path);
  const auto refused = client.request(R"({"id":1,"op":"hello","protocol":1,"holder":"auto pilot"})");
  EXPECT_EQ(code_of(refused), "invalid-argument");
  EXPECT_EQ(
      message_of(refused),
      R"(hello: field 'holder' must be a name of 1 to 64 letters, digits, '.', '_' or '-' (got "auto pilot"))");
  device::DaemonClientOptions options;
  options.holder = std::string(65, 'a');
  const auto too_long = device::DaemonClient::connect(socket_path, options);
  ASSERT_FALSE(too_long);
  EXPECT_EQ(
      too_long.error().message(),
      fmt::format("daemon client: holder '{}' is not a name of 1 to 64 letters, digits, '.', '_' or '-'",
                  std::string(65, 'a')));
}

TEST_F(DaemonServer, BackgroundRenewalKeepsTheSettings) {
  daemon::DaemonOptions options;
  options.lease_s = 0.3;
  start(options);
  auto client = connect(/*renew=*/true);
  ASSERT_TRUE(client->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 150'000}));
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(limit(0), 150'000u);
  EXPECT_TRUE(client->call({.op = proto::Op::kPowerLimit, .gpu = 0}));
}

TEST_F(DaemonServer, StreamingDeliversSamplesUntilCancelled) {
  start();
  auto client = connect();
  const auto stream = client->stream_power(std::nullopt, 20);
  ASSERT_TRUE(stream) << stream.error().message();
  std::set<int> seen_gpus;
  int events = 0;
  int64_t last_time_ms = 0;
  while (events < 8) {
    const auto event = client->next_power_event(2s);
    ASSERT_TRUE(event);
    ASSERT_TRUE(event->has_value()) << "no sample within 2 s";
    EXPECT_EQ((*event)->stream, *stream);
    EXPECT_GT((*event)->power_mw, 0u);
    EXPECT_GE((*event)->time_ms, last_time_ms);
    last_time_ms = (*event)->time_ms;
    seen_gpus.insert((*event)->gpu);
    ++events;
  }
  EXPECT_EQ(seen_gpus, (std::set<int>{0, 1}));
  // Requests still work while samples flow.
  EXPECT_TRUE(client->call({.op = proto::Op::kPowerLimit, .gpu = 0}));
  ASSERT_TRUE(client->cancel_stream(*stream));
  const auto after = client->next_power_event(200ms);
  ASSERT_TRUE(after);
  EXPECT_FALSE(after->has_value());
  const auto again = client->cancel_stream(*stream);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), ErrorCode::kNotFound);
}

TEST_F(DaemonServer, StreamEventsCarryTheEnergyCounterWhenAsked) {
  start();
  auto client = connect();
  const auto with_energy = client->stream_power(std::vector<int>{1}, 20, true);
  ASSERT_TRUE(with_energy) << with_energy.error().message();
  const auto event = client->next_power_event(2s);
  ASSERT_TRUE(event && event->has_value());
  EXPECT_EQ((*event)->gpu, 1);
  ASSERT_TRUE((*event)->energy_mj);
  EXPECT_GT(*(*event)->energy_mj, 0u);
  EXPECT_LE(*(*event)->energy_mj, *gpus[1]->energy_mj());  // read before now, and the counter only grows
  EXPECT_EQ((*event)->dropped, 0u);
  ASSERT_TRUE(client->cancel_stream(*with_energy));
  // Without asking: no energy field.
  const auto plain = client->stream_power(std::vector<int>{0}, 20);
  ASSERT_TRUE(plain);
  const auto power_only = client->next_power_event(2s);
  ASSERT_TRUE(power_only && power_only->has_value());
  EXPECT_FALSE((*power_only)->energy_mj);
}

// A subscriber that stops reading costs only itself: its samples are skipped once its unread output passes
// the bound, counted per GPU and told in its next event when it reads again (and in cancel_stream's answer),
// while another subscriber keeps getting every sample.
TEST_F(DaemonServer, AStalledSubscriberLosesOnlyItsOwnSamplesAndIsToldHowMany) {
  daemon::DaemonOptions options;
  options.max_queued_bytes = 4096;
  start(options);
  RawClient stalled(socket_path);
  stalled.hello();
  // 16 streams of both GPUs every 10 ms: ~3,200 events a second fill the socket's buffer within a second.
  std::vector<uint64_t> stalled_streams;
  for (int i = 0; i < 16; ++i) {
    const json answer =
        stalled.request(fmt::format(R"({{"id":{},"op":"stream_power","period_ms":10}})", 10 + i));
    ASSERT_TRUE(answer["ok"].get<bool>()) << answer.dump();
    stalled_streams.push_back(answer["result"]["stream"].get<uint64_t>());
  }
  auto reader = connect();
  const auto stream = reader->stream_power(std::nullopt, 10);
  ASSERT_TRUE(stream);
  for (int received = 0; received < 400; ++received) {
    const auto event = reader->next_power_event(2s);
    ASSERT_TRUE(event && event->has_value()) << "the reader waited over 2 s for sample " << received;
    EXPECT_EQ((*event)->dropped, 0u) << "the reader keeps up: nothing of its own is skipped";
  }
  // Now the stalled subscriber reads: its backlog, then an event that counts what was skipped.
  uint64_t told_first_stream = 0;
  bool told = false;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!told && std::chrono::steady_clock::now() < deadline) {
    const json line = json::parse(stalled.read_line());
    if (line.contains("event") && line.contains("dropped")) {
      EXPECT_GT(line["dropped"].get<uint64_t>(), 0u);
      told = true;
      if (line["stream"].get<uint64_t>() == stalled_streams.front()) {
        told_first_stream += line["dropped"].get<uint64_t>();
      }
    }
  }
  ASSERT_TRUE(told) << "no event told the stalled subscriber of its skipped samples";
  const json cancelled = stalled.request(
      fmt::format(R"({{"id":99,"op":"cancel_stream","stream":{}}})", stalled_streams.front()));
  ASSERT_TRUE(cancelled["ok"].get<bool>()) << cancelled.dump();
  EXPECT_GT(cancelled["result"]["dropped"].get<uint64_t>(), 0u);
  EXPECT_GE(cancelled["result"]["dropped"].get<uint64_t>(), told_first_stream);
  EXPECT_EQ(*reader->cancel_stream(*stream), 0u);
}

// The client's own queue holds DaemonClientOptions::max_queued_events unread events; beyond it the oldest
// go, counted in the next event of their stream and GPU.
TEST_F(DaemonServer, TheClientsFullQueueCountsWhatItDrops) {
  start();
  device::DaemonClientOptions options;
  options.max_queued_events = 50;
  auto client = *device::DaemonClient::connect(socket_path, options);
  const auto stream = client->stream_power(std::nullopt, 10);
  ASSERT_TRUE(stream) << stream.error().message();
  // Until more than 50 events came (2 GPUs every 10 ms), none read; then a request reads them all on its way
  // to its answer.
  uint64_t dropped = 0;
  size_t queued = 0;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (dropped == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(500ms);
    ASSERT_TRUE(client->call({.op = proto::Op::kPowerLimit, .gpu = 0}));
    queued = 0;
    while (true) {
      const auto event = client->next_power_event(0ms);
      ASSERT_TRUE(event);
      if (!event->has_value()) {
        break;
      }
      ++queued;
      dropped += (*event)->dropped;
    }
  }
  EXPECT_GT(dropped, 0u) << "the events the full queue let go are counted";
  EXPECT_LE(queued, 50u + 2u);  // the full queue, and perhaps an event read while it was drained
}

TEST_F(DaemonServer, AnotherUserMayReadButNotControl) {
  start();
  const auto result =
      run({JOULE_DAEMON_HELPER, "--uid", std::to_string(kNobody), "--gid", std::to_string(kNobody),
           "--socket", socket_path, "--request", R"({"id":2,"op":"power_limit","gpu":0})", "--request",
           R"({"id":3,"op":"set_power_limit","gpu":0,"power_limit_mw":150000})"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::istringstream lines(result.out);
  std::string hello_line, read_line, set_line;
  std::getline(lines, hello_line);
  std::getline(lines, read_line);
  std::getline(lines, set_line);
  const auto hello = json::parse(hello_line);
  EXPECT_EQ(hello["result"]["peer"]["uid"], kNobody);
  EXPECT_EQ(hello["result"]["rights"], (json{{"read", true}, {"control", false}}));
  EXPECT_EQ(json::parse(read_line)["result"]["power_limit_mw"], 250'000);
  const auto set = json::parse(set_line);
  EXPECT_EQ(code_of(set), "permission-denied");
  EXPECT_EQ(message_of(set),
            "set_power_limit needs the 'control' right; nobody has 'read' (default for other users (--others "
            "read)): "
            "run as root, or ask the administrator to start `joule daemon` with --allow-user nobody or "
            "--allow-group "
            "GROUP for a group you are in");
  EXPECT_EQ(limit(0), 250'000u);
  EXPECT_NE(audit_text().find("action=refused gpu=0 setting=power_limit_mw new=150000"), std::string::npos)
      << audit_text();
}

TEST_F(DaemonServer, OthersNoneRefusesReadsAndAllowUserGrantsControl) {
  daemon::DaemonOptions options;
  options.access.others = daemon::Right::kNone;
  options.access.control_users = {"daemon"};  // uid 1: someone else
  start(options);
  const auto refused = run({JOULE_DAEMON_HELPER, "--uid", std::to_string(kNobody), "--socket", socket_path,
                            "--request", R"({"id":2,"op":"power","gpu":0})"});
  ASSERT_EQ(refused.exit_code, 0) << refused.err;
  EXPECT_NE(refused.out.find("power needs the 'read' right; nobody has 'none'"), std::string::npos)
      << refused.out;
  stop();

  daemon::DaemonOptions allowed;
  allowed.access.others = daemon::Right::kNone;
  allowed.access.control_users = {"nobody"};
  start(allowed);
  const auto controlled =
      run({JOULE_DAEMON_HELPER, "--uid", std::to_string(kNobody), "--socket", socket_path, "--request",
           R"({"id":2,"op":"set_power_limit","gpu":0,"power_limit_mw":150000})"});
  ASSERT_EQ(controlled.exit_code, 0) << controlled.err;
  EXPECT_NE(controlled.out.find(R"("id":2,"ok":true)"), std::string::npos) << controlled.out;
  // The helper exited: its limit is gone again.
  EXPECT_TRUE(wait_for_limit(0, 250'000));
}

TEST_F(DaemonServer, DaemonGpusDriveThePowerLimitOptimizer) {
  start();
  auto opened = device::open_daemon_gpus(socket_path);
  ASSERT_TRUE(opened) << opened.error().message();
  std::vector<device::Gpu*> remote;
  for (auto& gpu : *opened) {
    remote.push_back(gpu.get());
  }
  {
    measure::EnergyMonitor monitor(remote, {}, SteadyClock::instance());
    optimize::PowerLimitOptions options;
    options.wait_steps = 0;
    options.warmup_steps = 0;
    options.profile_steps = 2;
    options.step_w = 50;
    options.restore_on_signals = false;
    // The daemon's GPUs are simulated, but through the daemon they look real (and report temperature):
    // no thermal steady state to wait for.
    options.steady_state.mode = measure::SteadyStateMode::kOff;
    optimize::PowerLimitOptimizer optimizer(monitor, options);
    EXPECT_EQ(optimizer.candidates_mw(), (std::vector<uint32_t>{250'000, 200'000, 150'000, 100'000}));
    // The simulated GPUs run on the daemon's real clock: tiny steps keep this quick.
    for (int step = 0; step < 50 && optimizer.state() != optimize::PowerLimitState::kDone; ++step) {
      optimizer.on_step_begin();
      std::this_thread::sleep_for(3ms);
      optimizer.on_step_end();
    }
    ASSERT_EQ(optimizer.state(), optimize::PowerLimitState::kDone);
    ASSERT_TRUE(optimizer.chosen_power_limit_mw());
    EXPECT_EQ(optimizer.measurements().size(), 4u);
    EXPECT_EQ(limit(0), *optimizer.chosen_power_limit_mw());
    EXPECT_EQ(limit(1), *optimizer.chosen_power_limit_mw());
  }
  // The optimizer restored the default itself, still through the daemon.
  EXPECT_EQ(limit(0), 250'000u);
  EXPECT_EQ(limit(1), 250'000u);
  opened->clear();
  EXPECT_TRUE(wait_for_limit(0, 250'000));
  const std::string audit = audit_text();
  EXPECT_NE(audit.find("action=set gpu=0 setting=power_limit_mw old=250000 new=200000"), std::string::npos)
      << audit;
}

TEST_F(DaemonServer, ALostDaemonIsAClearErrorForClients) {
  start();
  auto opened = device::open_daemon_gpus(socket_path);
  ASSERT_TRUE(opened);
  stop();
  const auto power = (*opened)[0]->power_mw();
  ASSERT_FALSE(power);
  EXPECT_EQ(power.error().code(), ErrorCode::kIo);
  EXPECT_NE(
      power.error().message().find("the connection to the joule daemon at " + socket_path + " is closed"),
      std::string::npos)
      << power.error().message();
  // Later calls fail the same way at once.
  EXPECT_EQ((*opened)[1]->power_limit_mw().error().message(), power.error().message());
  const auto missing = device::open_daemon_gpus(dir.path() + "/nothing.sock");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), ErrorCode::kIo);
  EXPECT_EQ(missing.error().message(),
            "cannot connect to the joule daemon at " + dir.path() +
                "/nothing.sock: No such file or directory (is `joule daemon` running? see docs/daemon.md; "
                "JOULE_DAEMON_SOCKET selects another socket)");
}

TEST_F(DaemonServer, VisibleDevicesSelectAndOrderDaemonGpus) {
  start();
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "1");
  auto opened = device::open_daemon_gpus(socket_path);
  ASSERT_TRUE(opened) << opened.error().message();
  ASSERT_EQ(opened->size(), 1u);
  EXPECT_EQ((*opened)[0]->info().index, 0);
  EXPECT_EQ((*opened)[0]->info().uuid, gpus[1]->info().uuid);
  ASSERT_TRUE((*opened)[0]->set_power_limit_mw(190'000));
  EXPECT_EQ(limit(1), 190'000u);
  ScopedEnv missing("CUDA_VISIBLE_DEVICES", "4");
  EXPECT_FALSE(device::open_daemon_gpus(socket_path));
}

TEST_F(DaemonServer, StartRefusesWhatItCannotServeSafely) {
  start();
  // A second daemon on the same socket.
  daemon::DaemonOptions same;
  same.socket_path = socket_path;
  const auto second = daemon::Daemon::start({gpus[0].get()}, *clock, same);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code(), ErrorCode::kState);
  EXPECT_EQ(second.error().message(),
            fmt::format("another joule daemon (pid {}) is serving {} (it holds {}.lock); "
                        "stop it or choose another --socket",
                        ::getpid(), socket_path, socket_path));
  stop();
  EXPECT_FALSE(std::filesystem::exists(socket_path));  // removed on the way out

  daemon::DaemonOptions options;
  options.socket_path = dir.write("plain-file", "not a socket");
  JOULE_EXPECT_ERROR(
      daemon::Daemon::start({gpus[0].get()}, *clock, options), ErrorCode::kState,
      options.socket_path + " exists and is not a socket; remove it or choose another --socket");
  options.socket_path = dir.path() + "/" + std::string(120, 's');
  EXPECT_EQ(daemon::Daemon::start({gpus[0].get()}, *clock, options).error().code(),
            ErrorCode::kInvalidArgument);
  options.socket_path = socket_path;
  options.lease_s = 0;
  JOULE_EXPECT_ERROR(daemon::Daemon::start({gpus[0].get()}, *clock, options), ErrorCode::kInvalidArgument,
                     "--lease-s 0 must be above 0 and at most 86400 (one day)");
}

TEST_F(DaemonServer, AStaleSocketIsReplaced) {
  // A socket file nobody listens on, as a crashed daemon leaves it.
  std::filesystem::create_directories(dir.path() + "/run");
  const int stale = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(stale, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  ::close(stale);
  ASSERT_TRUE(std::filesystem::exists(socket_path));
  start();
  RawClient client(socket_path);
  EXPECT_TRUE(client.hello()["ok"].get<bool>());
  struct stat info {};
  ASSERT_EQ(::stat(socket_path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0666u);
  ASSERT_EQ(::stat((dir.path() + "/run").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0755u);
}

// ---- issue 11: what an unprivileged user can plant or hog ----------------------------------------------

TEST_F(DaemonServer, AnUnsafeSocketFolderIsRefused) {
  // Each folder lets someone other than root plant files where the daemon opens them as root.
  const std::string base = std::filesystem::canonical(dir.path()).string();
  struct Case {
    std::string folder;  // made under base, with `mode` and `owner`; the socket goes in folder/run
    mode_t mode;
    uid_t owner;
    std::string socket_folder;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"open", 0777, 0, "open",
       fmt::format("the socket folder {0}/open is writable by its group and others (mode 0777) and not "
                   "sticky: any user could "
                   "plant files that the daemon opens as root; make it 0755 (chmod go-w {0}/open) or sticky "
                   "(chmod +t {0}/open), or choose another --socket",
                   base)},
      {"group", 0775, 0, "group",
       fmt::format(
           "the socket folder {0}/group is writable by its group (mode 0775) and not sticky: any member "
           "of its group could plant files that the daemon opens as root; make it 0755 (chmod go-w "
           "{0}/group) or sticky (chmod +t {0}/group), or choose another --socket",
           base)},
      {"users", 0755, kNobody, "users",
       fmt::format(
           "the socket folder {}/users belongs to uid 65534, not to root: its owner could plant files "
           "that the daemon opens as root; choose a folder of root's for --socket (e.g. /run/joule)",
           base)},
      {"above", 0703, 0, "above/run",
       fmt::format(
           "{0}/above (a folder above the socket's) is writable by others (mode 0703) and not sticky: "
           "any user could replace the socket's folder; make it 0755 (chmod go-w {0}/above) or sticky "
           "(chmod +t {0}/above), or choose another --socket",
           base)},
  };
  for (const auto& unsafe : cases) {
    SCOPED_TRACE(unsafe.folder);
    const std::string folder = dir.path() + "/" + unsafe.folder;
    std::filesystem::create_directories(dir.path() + "/" + unsafe.socket_folder);
    ASSERT_EQ(::chmod(folder.c_str(), unsafe.mode), 0);
    ASSERT_EQ(::chown(folder.c_str(), unsafe.owner, 0), 0);
    daemon::DaemonOptions options;
    options.socket_path = dir.path() + "/" + unsafe.socket_folder + "/joule.sock";
    JOULE_EXPECT_ERROR(daemon::Daemon::start({gpus[0].get()}, *clock, options), ErrorCode::kPermissionDenied,
                       unsafe.message);
    // Refused before anything was created in it.
    EXPECT_TRUE(std::filesystem::is_empty(dir.path() + "/" + unsafe.socket_folder));
  }
  // Sticky, like /tmp: other users cannot move or remove root's files in it, so the daemon serves there.
  use_shared_folder();
  start();
  RawClient client(socket_path);
  EXPECT_TRUE(client.hello()["ok"].get<bool>());
}

TEST_F(DaemonServer, APlantedLockFileIsNeverOpenedThroughALink) {
  // Before: the daemon opened SOCKET.lock following links, truncated it and wrote its pid there: a user who
  // could write the socket's folder had it overwrite any file of root's. Such folders are now refused
  // (above); a link left in a folder of root's (by whatever means) is not followed either.
  const std::string victim = dir.write("victim", "precious\n");
  std::filesystem::create_directories(dir.path() + "/run");
  ASSERT_EQ(::symlink(victim.c_str(), (socket_path + ".lock").c_str()), 0);
  daemon::DaemonOptions options;
  options.socket_path = socket_path;
  JOULE_EXPECT_ERROR(
      daemon::Daemon::start({gpus[0].get()}, *clock, options), ErrorCode::kPermissionDenied,
      "the lock file " + socket_path +
          ".lock is a symbolic link: someone planted it to make the daemon overwrite another file; it is not "
          "followed: remove it (after checking who made it) or choose another --socket");
  EXPECT_EQ(read_all(victim), "precious\n");
  // In a sticky folder every user may write (as /tmp), another user's link.
  use_shared_folder();
  const std::string lock = socket_path + ".lock";
  as_user(kNobody, [&] { ASSERT_EQ(::symlink(victim.c_str(), lock.c_str()), 0); });
  options.socket_path = socket_path;
  JOULE_EXPECT_ERROR(
      daemon::Daemon::start({gpus[0].get()}, *clock, options), ErrorCode::kPermissionDenied,
      "the lock file " + lock +
          " is a symbolic link: someone planted it to make the daemon overwrite another file; it is not "
          "followed: remove it (after checking who made it) or choose another --socket");
  EXPECT_EQ(read_all(victim), "precious\n");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(socket_path)));
  // A plain file of another user there: whoever can open it can flock it and keep the daemon off.
  as_user(kNobody, [&] {
    ASSERT_EQ(::unlink(lock.c_str()), 0);
    std::ofstream(lock) << "4242\n";
  });
  JOULE_EXPECT_ERROR(daemon::Daemon::start({gpus[0].get()}, *clock, options), ErrorCode::kPermissionDenied,
                     "the lock file " + lock +
                         " was not made by the daemon (it belongs to uid 65534, not to the daemon's user "
                         "(root)); it is left untouched: remove it (after checking who made it) or choose "
                         "another --socket");
  EXPECT_EQ(read_all(lock), "4242\n");
  // Another user's socket where clients look for the daemon's.
  ASSERT_EQ(::unlink(lock.c_str()), 0);
  as_user(kNobody, [&] {
    const int squatter = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket_path.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(::bind(squatter, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    ::close(squatter);
  });
  JOULE_EXPECT_ERROR(daemon::Daemon::start({gpus[0].get()}, *clock, options), ErrorCode::kPermissionDenied,
                     socket_path +
                         " is a socket of uid 65534, not of the daemon's user (uid 0): another user made it; "
                         "remove it (after checking who made it) or choose another --socket");
  EXPECT_EQ(limit(0), 250'000u);
}

TEST_F(DaemonServer, APlantedTemporaryStateFileIsNeverOpenedThroughALink) {
  // Before: SOCKET.state.tmp.PID was opened O_CREAT|O_TRUNC following links: a link planted under the
  // daemon's next pid made it truncate and overwrite any file of root's on the first setting.
  use_shared_folder();
  const std::string victim = dir.write("victim", "precious\n");
  const std::string temporary = fmt::format("{}.state.tmp.{}", socket_path, ::getpid());
  as_user(kNobody, [&] { ASSERT_EQ(::symlink(victim.c_str(), temporary.c_str()), 0); });
  start();
  auto client = connect();
  ASSERT_TRUE(client->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 150'000}));
  EXPECT_EQ(read_all(victim), "precious\n");
  struct stat info {};
  ASSERT_EQ(::lstat((socket_path + ".state").c_str(), &info), 0);
  EXPECT_TRUE(S_ISREG(info.st_mode));
  EXPECT_EQ(info.st_uid, 0u);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(temporary)));
}

TEST_F(DaemonServer, AStateFilePlantedByAnotherUserIsNotReplayed) {
  // Before: a SOCKET.state written by any user was replayed at start: GPU 0 set to 100 W as root and
  // audited as "recovered".
  use_shared_folder();
  const std::string state = socket_path + ".state";
  const std::string planted = json{{"format", "joule-daemon-state"},
                                   {"version", 1},
                                   {"pid", 4242},
                                   {"settings", json::array({{{"gpu", 0},
                                                              {"uuid", gpus[0]->info().uuid},
                                                              {"setting", "power_limit_mw"},
                                                              {"original", 100'000}}})}}
                                  .dump() +
                              "\n";
  as_user(kNobody, [&] {
    std::ofstream(state) << planted;
    ASSERT_EQ(::chmod(state.c_str(), 0644), 0);
  });
  CapturedLog captured;
  start();
  EXPECT_TRUE(connect()->call({.op = proto::Op::kPowerLimit, .gpu = 0}));  // it serves
  stop();
  EXPECT_TRUE(gpus[0]->settings_log().empty());
  EXPECT_EQ(limit(0), 250'000u);
  EXPECT_EQ(audit_text().find("recovered"), std::string::npos) << audit_text();
  const std::string logged = captured.text();
  const std::string expected =
      "error: not replaying the daemon state file " + state +
      ": it belongs to uid 65534, not to the daemon's user (root); nothing was restored "
      "from it; it was moved to " +
      state + ".untrusted.";
  EXPECT_NE(logged.find(expected), std::string::npos) << logged;
  // Kept for the administrator, under a name the daemon never replays.
  std::vector<std::string> aside;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/shared")) {
    if (entry.path().filename().string().rfind("joule.sock.state.untrusted.", 0) == 0) {
      aside.push_back(entry.path().string());
    }
  }
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(read_all(aside[0]), planted);
  EXPECT_FALSE(std::filesystem::exists(state));
}

TEST_F(DaemonServer, OneUserCannotTakeEveryConnectionAndRootKeepsItsReserve) {
  // Before: connections beyond 256 waited in the backlog, so one user holding 256 + 128 left nobody a place,
  // root included.
  daemon::DaemonOptions options;
  options.max_connections = 6;
  options.root_reserved_connections = 2;
  options.max_connections_per_user = 3;
  start(options);
  const auto refusal = [](RawClient& client) {
    // Told at once, before any request, then closed.
    const auto told = json::parse(client.read_line());
    EXPECT_EQ(told["id"], nullptr) << told;
    EXPECT_FALSE(told["ok"].get<bool>());
    EXPECT_THROW(client.read_line(), std::runtime_error);
    return told.contains("error") ? message_of(told) : std::string();
  };
  std::vector<std::unique_ptr<RawClient>> nobody;
  as_user(kNobody, [&] {
    for (int i = 0; i < 4; ++i) {
      nobody.push_back(std::make_unique<RawClient>(socket_path));
    }
  });
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(nobody[static_cast<size_t>(i)]->hello()["ok"].get<bool>());
  }
  const std::string per_user =
      "uid 65534 (nobody) already has 3 connections to the daemon, the most one user may hold "
      "(--max-connections-per-user 3); close one first";
  EXPECT_EQ(refusal(*nobody[3]), per_user);
  // A client library connection gets the same reason as its hello's answer.
  as_user(kNobody, [&] {
    const auto refused = device::DaemonClient::connect(socket_path, {});
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code(), ErrorCode::kState);
    EXPECT_EQ(refused.error().message(),
              "the joule daemon at " + socket_path + " refused hello: " + per_user);
  });
  // A connection that goes gives its place back.
  nobody[0].reset();
  EXPECT_TRUE(eventually([&] {
    bool served = false;
    as_user(kNobody, [&] {
      auto again = std::make_unique<RawClient>(socket_path);
      if (again->hello()["ok"].get<bool>()) {
        served = true;
        nobody[0] = std::move(again);
      }
    });
    return served;
  }));
  // Other users share what root does not keep: 6 - 2 = 4 places.
  std::unique_ptr<RawClient> user1;
  std::unique_ptr<RawClient> user2;
  as_user(1, [&] { user1 = std::make_unique<RawClient>(socket_path); });
  EXPECT_TRUE(user1->hello()["ok"].get<bool>());
  as_user(2, [&] { user2 = std::make_unique<RawClient>(socket_path); });
  EXPECT_EQ(refusal(*user2),
            "the daemon already serves 4 connections, the most it takes from users other than root "
            "(--max-connections 6 less --root-reserved-connections 2); try again later");
  // Root takes the reserve, and no more.
  RawClient root1(socket_path);
  RawClient root2(socket_path);
  EXPECT_TRUE(root1.hello()["ok"].get<bool>());
  EXPECT_TRUE(root2.hello()["ok"].get<bool>());
  RawClient root3(socket_path);
  EXPECT_EQ(refusal(root3),
            "the daemon already serves 6 connections, its maximum (--max-connections 6); try again later");
  // Refusals change nothing; those served still are.
  EXPECT_EQ(limit(0), 250'000u);
  EXPECT_EQ(audit_text(), "");
  EXPECT_EQ(root1.request(R"({"id":2,"op":"power_limit","gpu":0})")["result"]["power_limit_mw"], 250'000);
}

TEST_F(DaemonServer, AConnectionThatSaysNoHelloIsClosed) {
  daemon::DaemonOptions options;
  options.hello_timeout_s = 0.3;
  options.max_connections_per_user = 1;
  start(options);
  const std::string timed_out =
      R"({"id":null,"ok":false,"error":{"code":"state","message":"no hello within 0.3 s of connecting )"
      R"((--hello-timeout-s): the daemon closes this connection; send {\"op\":\"hello\",\"protocol\":1} first"}})";
  // A silent connection holds nobody's only place, until the timeout.
  std::unique_ptr<RawClient> silent;
  std::unique_ptr<RawClient> second;
  as_user(kNobody, [&] {
    silent = std::make_unique<RawClient>(socket_path);
    second = std::make_unique<RawClient>(socket_path);
  });
  EXPECT_EQ(message_of(json::parse(second->read_line())),
            "uid 65534 (nobody) already has 1 connection to the daemon, the most one user may hold "
            "(--max-connections-per-user 1); close one first");
  EXPECT_EQ(silent->read_line(), timed_out);
  EXPECT_THROW(silent->read_line(), std::runtime_error);
  // Requests other than hello do not count: the connection is closed all the same.
  std::unique_ptr<RawClient> chatty;
  ASSERT_TRUE(eventually([&] {
    as_user(kNobody, [&] { chatty = std::make_unique<RawClient>(socket_path); });
    const auto first = chatty->request(R"({"id":1,"op":"whoami"})");
    return message_of(first) == R"(send hello first, e.g. {"op":"hello","protocol":1})";
  }));
  EXPECT_EQ(chatty->read_line(), timed_out);
  chatty.reset();
  // One that says hello in time stays.
  std::unique_ptr<RawClient> greeted;
  ASSERT_TRUE(eventually([&] {
    as_user(kNobody, [&] { greeted = std::make_unique<RawClient>(socket_path); });
    return greeted->hello()["ok"].get<bool>();
  }));
  std::this_thread::sleep_for(600ms);
  EXPECT_TRUE(greeted->request(R"({"id":2,"op":"whoami"})")["ok"].get<bool>());
  EXPECT_EQ(limit(0), 250'000u);
}

TEST_F(DaemonServer, BadConnectionLimitsAreRefused) {
  const auto refused = [this](auto change) {
    daemon::DaemonOptions options;
    options.socket_path = socket_path;
    change(options);
    return daemon::Daemon::start({gpus[0].get()}, *clock, options);
  };
  JOULE_EXPECT_ERROR(refused([](auto& o) { o.max_connections = 0; }), ErrorCode::kInvalidArgument,
                     "--max-connections 0 must be at least 1 and at most 65536");
  JOULE_EXPECT_ERROR(refused([](auto& o) { o.max_connections = 100'000; }), ErrorCode::kInvalidArgument,
                     "--max-connections 100000 must be at least 1 and at most 65536");
  JOULE_EXPECT_ERROR(refused([](auto& o) { o.max_connections_per_user = 0; }), ErrorCode::kInvalidArgument,
                     "--max-connections-per-user 0 must be at least 1");
  JOULE_EXPECT_ERROR(refused([](auto& o) { o.root_reserved_connections = 256; }), ErrorCode::kInvalidArgument,
                     "--root-reserved-connections 256 must be less than --max-connections 256 (other users "
                     "need room too)");
  JOULE_EXPECT_ERROR(refused([](auto& o) { o.hello_timeout_s = 0; }), ErrorCode::kInvalidArgument,
                     "--hello-timeout-s 0 must be above 0 and at most 3600 (one hour)");
  JOULE_EXPECT_ERROR(refused([](auto& o) { o.hello_timeout_s = 4000; }), ErrorCode::kInvalidArgument,
                     "--hello-timeout-s 4000 must be above 0 and at most 3600 (one hour)");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/run"));  // checked before anything is created
}

// ---- what one user can do to the daemon and to other users: floods, idle connections ----------------------

// A set_power_limit that a peer with only the read right is refused (and the daemon audits).
const std::string kRefusedSet = R"({"id":9,"op":"set_power_limit","gpu":1,"power_limit_mw":150000})";

TEST_F(DaemonServer, AFloodOfRefusedRequestsWritesAFewAuditLinesAndOneSummary) {
  // Before: every refused control request was one audit line: any user grew root's log by 58.7 MB/s.
  metrics::MetricsRegistry registry;
  daemon::DaemonOptions options;
  options.audit_refusals_per_user = 3;
  options.max_refusals_in_a_row = 10'000;
  options.metrics = std::make_shared<daemon::DaemonMetrics>(registry);
  start(options);
  std::unique_ptr<RawClient> flooder;
  as_user(kNobody, [&] { flooder = std::make_unique<RawClient>(socket_path); });
  ASSERT_TRUE(flooder->hello()["ok"].get<bool>());
  constexpr int kFlood = 500;
  std::string flood;
  for (int i = 0; i < kFlood; ++i) {
    flood += kRefusedSet + "\n";
  }
  flooder->send_raw(flood);
  for (int i = 0; i < kFlood; ++i) {
    ASSERT_EQ(code_of(json::parse(flooder->read_line())), "permission-denied");
  }
  // Every refusal is counted, written or not.
  EXPECT_EQ(parse_exposition(registry.render()).value("joule_daemon_refused_requests_total"), kFlood);
  stop();  // writes the summary of the interval still open
  const std::string audit = audit_text();
  std::istringstream lines(audit);
  std::vector<std::string> written;
  for (std::string line; std::getline(lines, line);) {
    written.push_back(line);
  }
  ASSERT_EQ(written.size(), 4u) << audit;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NE(written[i].find(" action=refused gpu=1 setting=power_limit_mw new=150000 conn=1 uid=65534 "),
              std::string::npos)
        << written[i];
  }
  EXPECT_NE(
      written[3].find(" action=refused-summary conn=0 uid=65534 pid=0 detail=\"uid 65534: 497 more refusals "
                      "in the last "),
      std::string::npos)
      << written[3];
  EXPECT_NE(
      written[3].find(" s (--audit-refusals-per-user 3: the first 3 of each 10 s are written one by one, the "
                      "rest counted here)\""),
      std::string::npos)
      << written[3];
  EXPECT_LT(audit.size(), 2'000u);  // 500 lines of ~400 bytes before
  EXPECT_EQ(limit(1), 250'000u);
}

TEST_F(DaemonServer, AConnectionRefusedTooOftenInARowIsToldWhyAndClosed) {
  daemon::DaemonOptions options;
  options.max_refusals_in_a_row = 3;
  start(options);
  std::unique_ptr<RawClient> client;
  as_user(kNobody, [&] { client = std::make_unique<RawClient>(socket_path); });
  ASSERT_TRUE(client->hello()["ok"].get<bool>());
  // An answered request ends a run of refusals.
  EXPECT_EQ(code_of(client->request(kRefusedSet)), "permission-denied");
  EXPECT_EQ(code_of(client->request(kRefusedSet)), "permission-denied");
  EXPECT_TRUE(client->request(R"({"id":3,"op":"power_limit","gpu":1})")["ok"].get<bool>());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(code_of(client->request(kRefusedSet)), "permission-denied");
  }
  EXPECT_EQ(
      client->read_line(),
      R"({"id":null,"ok":false,"error":{"code":"state","message":"the daemon closes this connection: its last )"
      R"(3 requests were all refused (--max-refusals-in-a-row 3); get the right they need (their answers say )"
      R"(how) before connecting again"}})");
  EXPECT_THROW(client->read_line(), std::runtime_error);
  // Root is never refused, and other connections are served.
  EXPECT_TRUE(connect()->call({.op = proto::Op::kSetPowerLimit, .gpu = 1, .power_limit_mw = 150'000}));
}

// A GPU whose power reading waits at a gate: it holds the daemon's single thread still while the test lines
// up requests of several users, so that the order in which the next turn serves them is what is checked.
class GatedGpu final : public ForwardingGpu {
 public:
  using ForwardingGpu::ForwardingGpu;
  void close() {
    std::lock_guard lock(mutex_);
    open_ = false;
  }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }
  /// Waits until a reading waits at the closed gate. @return whether one did within 5 s.
  bool wait_for_waiter() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 5s, [this] { return waiting_; });
  }

 protected:
  Result<uint32_t> do_power_mw() override {
    std::unique_lock lock(mutex_);
    waiting_ = true;
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
    waiting_ = false;
    return inner_.power_mw();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = true;
  bool waiting_ = false;
};

TEST_F(DaemonServer, OneUsersFloodWaitsItsTurnBehindRootAndOtherUsers) {
  // Before: each connection's requests were all served as they were read, connection by connection: root's
  // request waited behind every request of a flood (a read flood slowed root's requests ~4,000x).
  GatedGpu gated(*gpus[0]);
  daemon::DaemonOptions options;
  options.requests_per_turn = 2;
  options.audit_refusals_per_user = 1'000;
  options.max_refusals_in_a_row = 1'000;
  start_serving({&gated, gpus[1].get()}, std::move(options));
  RawClient blocker(socket_path);
  std::unique_ptr<RawClient> flooder;
  std::unique_ptr<RawClient> other;
  // The flooder's uid is below the other's and it connected first: the other's request is served in the
  // flood's first turn only because each uid has a budget per turn.
  as_user(3, [&] { flooder = std::make_unique<RawClient>(socket_path); });
  as_user(4, [&] { other = std::make_unique<RawClient>(socket_path); });
  RawClient root(socket_path);
  for (RawClient* client : {&blocker, flooder.get(), other.get(), &root}) {
    ASSERT_TRUE(client->hello()["ok"].get<bool>());
  }
  // Hold the daemon in a device call while everyone's requests arrive; then let it go.
  gated.close();
  blocker.send_raw(R"({"id":2,"op":"power","gpu":0})"
                   "\n");
  ASSERT_TRUE(gated.wait_for_waiter());
  constexpr int kFlood = 200;
  std::string flood;
  for (int i = 0; i < kFlood; ++i) {
    flood += kRefusedSet + "\n";
  }
  flooder->send_raw(flood);
  other->send_raw(kRefusedSet + "\n");
  root.send_raw(R"({"id":3,"op":"set_power_limit","gpu":1,"power_limit_mw":175000})"
                "\n");
  gated.open();
  EXPECT_TRUE(json::parse(root.read_line())["ok"].get<bool>());
  EXPECT_EQ(code_of(json::parse(other->read_line())), "permission-denied");
  for (int i = 0; i < kFlood; ++i) {
    ASSERT_EQ(code_of(json::parse(flooder->read_line())), "permission-denied");
  }
  EXPECT_TRUE(json::parse(blocker.read_line())["ok"].get<bool>());
  stop();
  // The audit log is in the order the daemon served: root's setting first, the other user's refusal within
  // the flood's first turn, the flood after.
  std::istringstream lines(audit_text());
  std::vector<std::string> order;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("action=set ") != std::string::npos) {
      order.push_back("root");
    } else if (line.find("action=refused ") != std::string::npos) {
      order.push_back(line.find(" uid=4 ") != std::string::npos ? "other" : "flood");
    }
  }
  ASSERT_EQ(order.size(), kFlood + 2u) << audit_text();
  EXPECT_EQ(order[0], "root");
  const auto other_at = std::find(order.begin(), order.end(), "other") - order.begin();
  EXPECT_LE(other_at, 1 + 2) << "the other user's request waited behind " << other_at - 1
                             << " of the flood's";
}

TEST_F(DaemonServer, IdleConnectionsAreCappedPerUserAndInTotal) {
  // Before: a connection that said hello and then nothing kept its place for ever: eight uids filled every
  // place users may take, and everyone else was refused.
  daemon::DaemonOptions options;
  options.idle_timeout_s = 0.05;
  options.max_idle_connections_per_user = 2;
  options.max_idle_connections = 3;
  start(options);
  const std::string idle_for =
      "the daemon closes this connection: it has been idle for 0.05 s (no request, no "
      "setting, no stream) and ";
  const auto closed_because = [](RawClient& client) {
    const auto told = json::parse(client.read_line());  // waits for the idle timer
    EXPECT_EQ(told["id"], nullptr) << told;
    EXPECT_THROW(client.read_line(), std::runtime_error);
    return told.contains("error") ? message_of(told) : std::string();
  };
  // A connection with a power stream is never idle, nor is root's: opened first, they outlive what follows.
  std::unique_ptr<RawClient> streaming;
  as_user(2, [&] { streaming = std::make_unique<RawClient>(socket_path); });
  ASSERT_TRUE(streaming->hello()["ok"].get<bool>());
  ASSERT_TRUE(
      streaming->request(R"({"id":2,"op":"stream_power","gpus":[0],"period_ms":60000})")["ok"].get<bool>());
  RawClient root(socket_path);
  ASSERT_TRUE(root.hello()["ok"].get<bool>());
  std::vector<std::unique_ptr<RawClient>> nobody(3);
  for (auto& client : nobody) {
    as_user(kNobody, [&] { client = std::make_unique<RawClient>(socket_path); });
    ASSERT_TRUE(client->hello()["ok"].get<bool>());
  }
  // The first two to fall idle are kept; the third is over the user's cap.
  EXPECT_EQ(closed_because(*nobody[2]),
            idle_for +
                "uid 65534 (nobody) already keeps 2 idle connections, the most one user may "
                "(--max-idle-connections-per-user 2); connect again when you need the daemon");
  // Nor does the user get new ones while it keeps its share idle.
  std::unique_ptr<RawClient> refused;
  as_user(kNobody, [&] { refused = std::make_unique<RawClient>(socket_path); });
  EXPECT_EQ(message_of(json::parse(refused->read_line())),
            "uid 65534 (nobody) already keeps 2 idle connections to the daemon (no request for 0.05 s, no "
            "setting, no "
            "stream), the most one user may (--max-idle-connections-per-user 2); use or close one first");
  // Another user: one more idle connection fits the total of 3, the next does not.
  std::vector<std::unique_ptr<RawClient>> user1(2);
  for (auto& client : user1) {
    as_user(1, [&] { client = std::make_unique<RawClient>(socket_path); });
    ASSERT_TRUE(client->hello()["ok"].get<bool>());
  }
  EXPECT_EQ(closed_because(*user1[1]),
            idle_for +
                "users other than root already keep 3 idle connections, the most the daemon keeps "
                "(--max-idle-connections 3); connect again when you need the daemon");
  // The stream's and root's connections, older than all these, were not idle; the kept ones still answer.
  EXPECT_TRUE(streaming->request(R"({"id":3,"op":"whoami"})")["ok"].get<bool>());
  EXPECT_TRUE(root.request(R"({"id":2,"op":"whoami"})")["ok"].get<bool>());
  EXPECT_TRUE(nobody[0]->request(R"({"id":2,"op":"whoami"})")["ok"].get<bool>());
  EXPECT_TRUE(user1[0]->request(R"({"id":2,"op":"whoami"})")["ok"].get<bool>());
}

TEST_F(DaemonServer, ALinkPlantedAsTheAuditLogIsNeverFollowed) {
  // Before: --audit-log was opened following links: a link at its path made the daemon (root) append to any
  // file.
  const std::string victim = dir.write("victim", "precious\n");
  ASSERT_EQ(::symlink(victim.c_str(), audit_path.c_str()), 0);
  daemon::DaemonOptions options;
  options.socket_path = socket_path;
  options.audit_log = audit_path;
  JOULE_EXPECT_ERROR(
      daemon::Daemon::start({gpus[0].get()}, *clock, options), ErrorCode::kPermissionDenied,
      "the audit log " + audit_path +
          " is a symbolic link: someone planted it to make the daemon append to another file; it "
          "is not followed: remove it (after checking who made it) or choose another --audit-log");
  EXPECT_EQ(read_all(victim), "precious\n");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/run"));  // refused before the socket is taken
}

// ---- CPU energy (RAPL, root-only since Linux 5.10) and GPU telemetry --------------------------------------

// A fake powercap tree with package 0 (and its DRAM) and package 1 (without), opened as the daemon would.
class DaemonCpuServer : public DaemonServer {
 protected:
  DaemonCpuServer() {
    powercap.add_package(0, "package-0", 5'000'000, 262'143'328'850, test::FakeDram{2'000'000});
    powercap.add_package(1, "package-1", 9'000'000, 262'143'328'850);
    device::RaplOptions rapl;
    rapl.powercap_root = powercap.root();
    auto opened = device::open_rapl_cpus(rapl);
    if (!opened) {
      throw std::runtime_error(opened.error().message());
    }
    cpus = std::move(*opened);
  }
  // The daemon serves these CPUs from its thread: stopped before they (members of this class) are destroyed,
  // not later in ~DaemonServer (ThreadSanitizer saw a request read a CPU being deleted).
  ~DaemonCpuServer() override { stop(); }

  daemon::DaemonOptions with_cpus() const {
    daemon::DaemonOptions options;
    for (const auto& cpu : cpus) {
      options.cpus.push_back(cpu.get());
    }
    return options;
  }

  FakePowercap powercap;
  std::vector<std::unique_ptr<device::Cpu>> cpus;
};

TEST_F(DaemonCpuServer, AnotherUserWithTheReadRightReadsPackageAndDramEnergy) {
  start(with_cpus());
  const auto result =
      run({JOULE_DAEMON_HELPER, "--uid", std::to_string(kNobody), "--socket", socket_path, "--request",
           R"({"id":2,"op":"list_cpus"})", "--request", R"({"id":3,"op":"cpu_energy","cpu":0})", "--request",
           R"({"id":4,"op":"cpu_energy","cpu":1})", "--request", R"({"id":5,"op":"cpu_energy","cpu":7})"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::istringstream lines(result.out);
  std::vector<json> responses;
  for (std::string line; std::getline(lines, line);) {
    responses.push_back(json::parse(line));
  }
  ASSERT_EQ(responses.size(), 5u) << result.out;
  EXPECT_EQ(responses[0]["result"]["cpus"], 2);
  EXPECT_EQ(responses[1]["result"]["cpus"],
            json::parse(R"([{"index":0,"name":"package-0","has_dram":true},)"
                        R"({"index":1,"name":"package-1","has_dram":false}])"));
  EXPECT_EQ(
      responses[2]["result"],
      json::parse(R"({"cpu":0,"package_energy_mj":5000,"dram_energy_mj":2000,"package_counter_resets":0,)"
                  R"("dram_counter_resets":0,"counter_reset":null})"));
  EXPECT_EQ(
      responses[3]["result"],
      json::parse(R"({"cpu":1,"package_energy_mj":9000,"dram_energy_mj":null,"package_counter_resets":0,)"
                  R"("dram_counter_resets":null,"counter_reset":null})"));
  EXPECT_EQ(code_of(responses[4]), "not-found");
  EXPECT_EQ(message_of(responses[4]), "unknown CPU 7: the daemon serves CPU packages 0, 1");
}

TEST_F(DaemonCpuServer, CpuEnergyStreamsThroughTheDaemon) {
  start(with_cpus());
  auto client = connect();
  const auto stream = client->stream_cpu_energy(std::nullopt, 20);
  ASSERT_TRUE(stream) << stream.error().message();
  std::set<int> seen;
  for (int received = 0; received < 6; ++received) {
    const auto event = client->next_cpu_energy_event(2s);
    ASSERT_TRUE(event && event->has_value()) << "no CPU sample within 2 s";
    const auto& sample = **event;
    EXPECT_EQ(sample.stream, *stream);
    seen.insert(sample.cpu);
    // The fake powercap tree: package 0 at 5 J with a DRAM domain at 2 J, package 1 at 9 J without one.
    EXPECT_EQ(sample.package_energy_mj, sample.cpu == 0 ? 5'000u : 9'000u);
    EXPECT_EQ(sample.dram_energy_mj.has_value(), sample.cpu == 0);
    EXPECT_EQ(sample.package_resets, 0u);
    EXPECT_EQ(sample.dropped, 0u);
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1}));
  // Power events are another queue: none here.
  EXPECT_FALSE(*client->next_power_event(0ms));
  EXPECT_EQ(*client->cancel_stream(*stream), 0u);
  // One package, and one the daemon lacks.
  const auto one = client->stream_cpu_energy(std::vector<int>{1}, 20);
  ASSERT_TRUE(one);
  const auto event = client->next_cpu_energy_event(2s);
  ASSERT_TRUE(event && event->has_value());
  EXPECT_EQ((**event).cpu, 1);
  const auto unknown = client->stream_cpu_energy(std::vector<int>{0, 7}, 20);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message(),
            "joule daemon: stream_cpu_energy: unknown CPU 7: the daemon serves CPU packages 0, 1");
}

TEST_F(DaemonCpuServer, ACounterResetIsReportedNotCountedAndDaemonCpusSeeIt) {
  // Before: the daemon counted a RAPL counter that went back as a wrap: 262 kJ of phantom energy.
  start(with_cpus());
  auto opened = device::open_daemon_cpus(socket_path);
  ASSERT_TRUE(opened) << opened.error().message();
  device::Cpu& cpu = *(*opened)[0];
  const auto before = cpu.package_reading();
  ASSERT_TRUE(before) << before.error().message();
  EXPECT_EQ(before->resets, 0u);
  powercap.set_energy(0, 1'000);  // from 5 J back to 1 mJ
  const auto after = cpu.package_reading();
  ASSERT_TRUE(after) << after.error().message();
  EXPECT_EQ(after->energy_mj, 5'000u);
  EXPECT_EQ(after->resets, 1u);
  EXPECT_EQ(
      after->last_reset.rfind(
          "joule daemon: " + powercap.package_energy_path(0) + " went back from 5000000 to 1000 uJ in ", 0),
      0u)
      << after->last_reset;
  const auto why = device::why_not_measurable(*before, *after);
  ASSERT_TRUE(why);
  EXPECT_EQ(
      why->rfind("not measurable: the energy counter was reset once between the readings (joule daemon: ", 0),
      0u)
      << *why;
  const auto dram = cpu.dram_reading();
  ASSERT_TRUE(dram);
  EXPECT_EQ(dram->resets, 0u);
  const auto raw = connect()->call({.op = proto::Op::kCpuEnergy, .cpu = 0});
  ASSERT_TRUE(raw);
  EXPECT_EQ((*raw)["package_counter_resets"], 1);
  EXPECT_EQ((*raw)["dram_counter_resets"], 0);
  EXPECT_EQ(
      (*raw)["counter_reset"].get<std::string>().rfind(powercap.package_energy_path(0) + " went back", 0),
      0u);
}

TEST_F(DaemonCpuServer, APeerWithoutTheReadRightIsToldHowToGetIt) {
  daemon::DaemonOptions options = with_cpus();
  options.access.others = daemon::Right::kNone;
  start(std::move(options));
  const auto result =
      run({JOULE_DAEMON_HELPER, "--uid", std::to_string(kNobody), "--socket", socket_path, "--request",
           R"({"id":2,"op":"list_cpus"})", "--request", R"({"id":3,"op":"cpu_energy","cpu":0})", "--request",
           R"({"id":4,"op":"gpu_telemetry","gpu":0})"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::istringstream lines(result.out);
  std::string line;
  std::getline(lines, line);  // hello
  for (const std::string op : {"list_cpus", "cpu_energy", "gpu_telemetry"}) {
    ASSERT_TRUE(std::getline(lines, line)) << result.out;
    const auto response = json::parse(line);
    EXPECT_EQ(code_of(response), "permission-denied") << line;
    EXPECT_EQ(message_of(response),
              op +
                  " needs the 'read' right; nobody has 'none' (default for other users (--others none)): ask "
                  "the administrator to start `joule daemon` with --read-user nobody, --read-group GROUP or "
                  "--others read");
  }
}

TEST_F(DaemonCpuServer, DiscoveryTakesTheCpusFromTheDaemonWithoutPrivileges) {
  start(with_cpus());
  // Discovered as nobody: the connection, and so every reading, is nobody's.
  std::optional<Result<device::DeviceSet>> discovered;
  as_user(kNobody, [this, &discovered] {
    device::DiscoveryOptions options;
    options.daemon_socket = socket_path;
    options.powercap_root = dir.path() + "/no-powercap";  // the local counters are never needed
    discovered = device::discover(options);
  });
  ASSERT_TRUE(discovered);
  auto& found = *discovered;
  ASSERT_TRUE(found) << found.error().message();
  ASSERT_EQ(found->gpus.size(), 2u);
  ASSERT_EQ(found->cpus.size(), 2u);
  ASSERT_EQ(found->reports.size(), 2u);
  EXPECT_EQ(found->reports[1].backend, "daemon");
  EXPECT_EQ(found->reports[1].kind, "cpu");
  EXPECT_EQ(found->reports[1].devices, 2u);
  EXPECT_TRUE(found->reports[1].ok);
  EXPECT_EQ(found->reports[1].detail, "joule daemon at " + socket_path);
  device::Cpu& package0 = *found->cpus[0];
  EXPECT_EQ(package0.info().backend, "daemon");
  EXPECT_EQ(package0.info().index, 0);
  EXPECT_EQ(package0.info().name, "package-0");
  EXPECT_TRUE(package0.info().has_dram);
  EXPECT_FALSE(found->cpus[1]->info().has_dram);
  EXPECT_EQ(package0.package_energy_mj(), 5'000u);
  EXPECT_EQ(package0.dram_energy_mj(), 2'000u);
  powercap.set_energy(0, 7'500'000);
  powercap.set_dram_energy(0, 2'250'000);
  EXPECT_EQ(package0.package_energy_mj(), 7'500u);
  EXPECT_EQ(package0.dram_energy_mj(), 2'250u);
  const auto no_dram = found->cpus[1]->dram_energy_mj();
  ASSERT_FALSE(no_dram);
  EXPECT_EQ(no_dram.error().code(), ErrorCode::kNotSupported);
  EXPECT_EQ(no_dram.error().message(), "CPU 1 (package-1) has no DRAM energy domain");
  // The selection by package index works as for local CPUs.
  const auto selected = found->select_cpus(std::vector<int>{1});
  ASSERT_TRUE(selected);
  EXPECT_EQ((*selected)[0]->package_energy_mj(), 9'000u);
  // The daemon saw nobody.
  const auto whoami = dynamic_cast<device::DaemonCpu&>(package0).client().call({.op = proto::Op::kWhoAmI});
  ASSERT_TRUE(whoami);
  EXPECT_EQ((*whoami)["uid"], kNobody);
}

TEST_F(DaemonServer, WithoutRaplTheDaemonSaysWhyAndDiscoveryFallsBack) {
  daemon::DaemonOptions options;
  options.no_cpus_reason = "no RAPL energy counters: /sys/class/powercap has no intel-rapl zones";
  start(std::move(options));
  RawClient client(socket_path);
  client.hello();
  const auto list = client.request(R"({"id":2,"op":"list_cpus"})");
  EXPECT_EQ(list["result"],
            json::parse(R"({"cpus":[],"reason":"no RAPL energy counters: /sys/class/powercap )"
                        R"(has no intel-rapl zones"})"));
  const auto energy = client.request(R"({"id":3,"op":"cpu_energy","cpu":0})");
  EXPECT_EQ(code_of(energy), "not-found");
  EXPECT_EQ(message_of(energy),
            "unknown CPU 0: the daemon serves no CPU energy counters: no RAPL energy counters: "
            "/sys/class/powercap has no intel-rapl zones");

  const auto stream = client.request(R"({"id":4,"op":"stream_cpu_energy"})");
  EXPECT_EQ(code_of(stream), "not-found");
  EXPECT_EQ(message_of(stream),
            "stream_cpu_energy: the daemon serves no CPU energy counters: no RAPL energy counters: "
            "/sys/class/powercap has no intel-rapl zones");

  const auto opened = device::open_daemon_cpus(socket_path);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().code(), ErrorCode::kNotFound);
  const std::string daemon_reason = "the joule daemon at " + socket_path +
                                    " serves no CPU energy counters: no RAPL energy counters: "
                                    "/sys/class/powercap has no intel-rapl zones";
  EXPECT_EQ(opened.error().message(), daemon_reason);

  // Discovery reports the daemon's reason, then tries the local counters (here a readable fake tree).
  FakePowercap local;
  local.add_package(0, "package-0", 1'000'000, 262'143'328'850);
  device::DiscoveryOptions discovery;
  discovery.daemon_socket = socket_path;
  discovery.powercap_root = local.root();
  auto found = device::discover(discovery);
  ASSERT_TRUE(found) << found.error().message();
  ASSERT_EQ(found->cpus.size(), 1u);
  EXPECT_EQ(found->cpus[0]->info().backend, "rapl");
  ASSERT_EQ(found->reports.size(), 3u);
  EXPECT_EQ(found->reports[1].backend, "daemon");
  EXPECT_FALSE(found->reports[1].ok);
  EXPECT_EQ(found->reports[1].detail, daemon_reason);
  EXPECT_EQ(found->reports[2].backend, "rapl");
  EXPECT_TRUE(found->reports[2].ok);
  // Neither: both reasons.
  discovery.powercap_root = dir.path() + "/no-powercap";
  found = device::discover(discovery);
  ASSERT_TRUE(found);
  EXPECT_TRUE(found->cpus.empty());
  EXPECT_EQ(
      found->why_no_cpus().rfind("no CPU energy counters found: daemon: " + daemon_reason + "; rapl: ", 0),
      0u)
      << found->why_no_cpus();
}

TEST_F(DaemonServer, DaemonGpusReportTheDaemonsTelemetry) {
  // A third GPU whose model reports no memory clock.
  device::sim::GpuModel model = gpus[0]->model();
  model.memory_clock_mhz = 0;
  device::sim::SimulatedGpu plain(model, gpus[0]->workload(), clock, 2);
  metrics::MetricsRegistry registry;  // counts the requests
  daemon::DaemonOptions options;
  options.metrics = std::make_shared<daemon::DaemonMetrics>(registry);
  start_serving({gpus[0].get(), gpus[1].get(), &plain}, std::move(options));
  const auto requests = [&registry] {
    return parse_exposition(registry.render()).value("joule_daemon_requests_total").value_or(-1);
  };
  auto opened = device::open_daemon_gpus(socket_path);
  ASSERT_TRUE(opened) << opened.error().message();
  ASSERT_EQ(opened->size(), 3u);

  const auto local = gpus[1]->telemetry();
  const double before = requests();
  const auto remote = (*opened)[1]->telemetry();
  EXPECT_EQ(requests() - before, 1.0);  // every field from one gpu_telemetry request
  EXPECT_TRUE(remote.errors.empty()) << remote.errors.front().second.message();
  ASSERT_TRUE(remote.temperature_c);
  EXPECT_NEAR(*remote.temperature_c, *local.temperature_c, 0.5);
  EXPECT_EQ(remote.sm_clock_mhz, local.sm_clock_mhz);
  EXPECT_EQ(remote.memory_clock_mhz, 877u);
  EXPECT_EQ(remote.gpu_utilization_pct, 98u);
  EXPECT_EQ(remote.memory_utilization_pct, local.memory_utilization_pct);
  EXPECT_EQ(remote.clock_event_reasons, local.clock_event_reasons);
  EXPECT_EQ(remote.memory_power_mw, local.memory_power_mw);
  // Single readings, and a setting made through the daemon shows in them.
  ASSERT_TRUE(local.sm_clock_mhz);
  EXPECT_EQ((*opened)[1]->sm_clock_mhz(), *local.sm_clock_mhz);
  ASSERT_TRUE((*opened)[1]->lock_sm_clocks(600, 900));
  const auto reasons = (*opened)[1]->clock_event_reasons();
  ASSERT_TRUE(reasons);
  EXPECT_NE(*reasons & device::clock_event::kApplicationClocks, 0u);

  const auto partial = (*opened)[2]->telemetry();
  EXPECT_TRUE(partial.temperature_c);
  EXPECT_TRUE(partial.memory_power_mw);
  EXPECT_FALSE(partial.memory_clock_mhz);
  ASSERT_EQ(partial.errors.size(), 1u);
  const std::string why =
      "joule daemon: GPU 2 (Tesla V100-PCIE-32GB (simulated)) does not report the memory clock (sim "
      "backend): "
      "the simulated model has no memory clock";
  EXPECT_EQ(partial.errors[0].first, device::TelemetryField::kMemoryClock);
  EXPECT_EQ(partial.errors[0].second.code(), ErrorCode::kNotSupported);
  EXPECT_EQ(partial.errors[0].second.message(), why);
  const auto single = (*opened)[2]->memory_clock_mhz();
  ASSERT_FALSE(single);
  EXPECT_EQ(single.error().code(), ErrorCode::kNotSupported);
  EXPECT_EQ(single.error().message(), why);

  // Gone daemon: every field says so.
  stop();
  const auto lost = (*opened)[0]->telemetry();
  EXPECT_EQ(lost.errors.size(), device::telemetry_fields().size());
  EXPECT_EQ(lost.errors[0].second.code(), ErrorCode::kIo);
}

}  // namespace
}  // namespace joule::test
