// SPDX-License-Identifier: Apache-2.0
// The real `joule daemon` binary: start, serve, audit, restore on client death, lease expiry and
// SIGTERM, refuse what it must refuse.
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "joule/device/daemon_client.hpp"
#include "joule/device/sim_gpu.hpp"

#include "fakes/rapl/fake_powercap.hpp"
#include "integration/run_process.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using namespace std::chrono_literals;
namespace proto = device::daemon_protocol;

constexpr uint32_t kNobody = 65534;

class DaemonCli : public ::testing::Test {
 protected:
  DaemonCli() {
    ::chmod(dir.path().c_str(), 0755);
    socket_path = dir.path() + "/joule.sock";
    audit_path = dir.path() + "/audit/audit.log";
    // Never the machine's own RAPL counters: what the daemon serves must not depend on the host.
    env["JOULE_POWERCAP_ROOT"] = dir.path() + "/no-powercap";
  }

  std::map<std::string, std::string> env = {{"JOULE_SIM", Process::kUnset},
                                            {"JOULE_DAEMON_SOCKET", Process::kUnset},
                                            {"CUDA_VISIBLE_DEVICES", Process::kUnset}};

  /// Starts `joule --sim 2xv100 daemon --socket … --audit-log … ARGS` and waits until it serves.
  std::unique_ptr<Process> start(std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {JOULE_BINARY, "--sim",     "2xv100",      "daemon",
                                     "--socket",   socket_path, "--audit-log", audit_path};
    argv.insert(argv.end(), args.begin(), args.end());
    auto process = std::make_unique<Process>(argv, env);
    if (!process->wait_for_output(10s)) {
      ADD_FAILURE() << "the daemon did not start: " << process->err_so_far();
    }
    return process;
  }

  std::shared_ptr<device::DaemonClient> connect(bool renew = true) {
    device::DaemonClientOptions options;
    options.renew_lease = renew;
    auto client = device::DaemonClient::connect(socket_path, options);
    if (!client) {
      throw std::runtime_error(client.error().message());
    }
    return *client;
  }

  uint32_t limit(device::DaemonClient& client, int gpu) {
    return (*client.call({.op = proto::Op::kPowerLimit, .gpu = gpu}))["power_limit_mw"].get<uint32_t>();
  }

  bool wait_for_limit(device::DaemonClient& client, int gpu, uint32_t expected_mw) {
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (limit(client, gpu) == expected_mw) {
        return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  std::string audit_text() const {
    std::ifstream in(audit_path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  TempDir dir;
  std::string socket_path;
  std::string audit_path;
};

TEST_F(DaemonCli, ServesAndRestoresEverythingOnSigterm) {
  auto daemon = start({"--lease-s", "30"});
  EXPECT_EQ(daemon->out_so_far().rfind(
                fmt::format("joule daemon: serving 2 GPUs on {} (protocol 1, lease 30 s, audit log {})\n"
                            "joule daemon: control: root; read: (no rule); others: read\n"
                            "joule daemon: no CPU energy to serve: no RAPL energy counters: {}/no-powercap ",
                            socket_path, audit_path, dir.path()),
                0),
            0u)
      << daemon->out_so_far();
  auto client = connect();
  ASSERT_TRUE(client->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 150'000}));
  ASSERT_TRUE(client->call({.op = proto::Op::kLockSmClocks, .gpu = 1, .min_mhz = 600, .max_mhz = 900}));
  EXPECT_EQ(limit(*client, 0), 150'000u);
  daemon->signal(SIGTERM);
  const auto result = daemon->wait();
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("joule daemon: stopped by SIGTERM; every setting made through it is restored"),
            std::string::npos)
      << result.out;
  const std::string audit = audit_text();
  EXPECT_NE(audit.find("action=set gpu=0 setting=power_limit_mw old=250000 new=150000"), std::string::npos)
      << audit;
  EXPECT_NE(audit.find("action=set gpu=1 setting=sm_clocks_mhz old=unlocked new=600-900"), std::string::npos);
  EXPECT_NE(audit.find("action=restore gpu=0 setting=power_limit_mw old=150000 new=250000"),
            std::string::npos);
  EXPECT_NE(audit.find("action=restore gpu=1 setting=sm_clocks_mhz old=600-900 new=unlocked"),
            std::string::npos);
  EXPECT_NE(audit.find("reason=shutdown"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(socket_path));
  // The client learns that its daemon is gone.
  const auto after = client->call({.op = proto::Op::kPowerLimit, .gpu = 0});
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code(), ErrorCode::kIo);
}

TEST_F(DaemonCli, EveryCommandCanUseTheDaemonsGpus) {
  auto daemon = start();
  // The flag and the environment variable select the daemon's GPUs; no vendor library is loaded.
  Process by_flag({JOULE_BINARY, "--daemon", socket_path, "devices", "--format", "json"}, env);
  const auto listed = by_flag.wait();
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const auto devices = nlohmann::json::parse(listed.out);
  ASSERT_EQ(devices["gpus"].size(), 2u) << listed.out;
  EXPECT_EQ(devices["gpus"][0]["backend"], "daemon");
  EXPECT_EQ(devices["gpus"][1]["name"], "Tesla V100-PCIE-32GB (simulated)");
  EXPECT_EQ(devices["backends"][0]["detail"], "joule daemon at " + socket_path);

  auto with_env = env;
  with_env["JOULE_DAEMON_SOCKET"] = socket_path;
  Process measured({JOULE_BINARY, "measure", "--format", "json", "--", "sleep", "0.2"}, with_env);
  const auto result = measured.wait();
  ASSERT_EQ(result.exit_code, 0) << result.err;
  // Like perf stat, the report goes to standard error.
  const auto report = nlohmann::json::parse(result.err);
  ASSERT_EQ(report["devices"].size(), 2u) << result.err;
  EXPECT_GT(report["devices"][0]["energy_j"].get<double>(), 0.0) << result.err;

  // Nothing listens: asked for by name, that is an error (exit 1) that says where it looked and how to start
  // the daemon.
  Process absent({JOULE_BINARY, "--daemon", dir.path() + "/nothing.sock", "devices"}, env);
  const auto refused = absent.wait();
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(
      refused.err.rfind("joule: error: --daemon " + dir.path() + "/nothing.sock: no GPU found: daemon: ", 0),
      0u)
      << refused.err;
  EXPECT_NE(refused.err.find("cannot connect to the joule daemon at " + dir.path() +
                             "/nothing.sock: No such file or directory (is `joule daemon` running?"),
            std::string::npos)
      << refused.err;
}

TEST_F(DaemonCli, AKilledClientIsRestored) {
  auto daemon = start();
  Process helper({JOULE_DAEMON_HELPER, "--socket", socket_path, "--request",
                  R"({"id":2,"op":"set_power_limit","gpu":0,"power_limit_mw":110000})", "--hold"});
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (helper.out_so_far().find("holding") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_NE(helper.out_so_far().find(R"({"id":2,"ok":true)"), std::string::npos) << helper.out_so_far();
  auto observer = connect();
  EXPECT_EQ(limit(*observer, 0), 110'000u);
  const pid_t helper_pid = helper.pid();
  helper.signal(SIGKILL);
  helper.wait();
  EXPECT_TRUE(wait_for_limit(*observer, 0, 250'000));
  const std::string audit = audit_text();
  EXPECT_NE(
      audit.find(fmt::format("action=restore gpu=0 setting=power_limit_mw old=110000 new=250000 conn=1 uid=0 "
                             "pid={} reason=disconnected",
                             helper_pid)),
      std::string::npos)
      << audit;
}

TEST_F(DaemonCli, AnExpiredLeaseIsRestored) {
  auto daemon = start({"--lease-s", "0.4"});
  auto owner = connect(/*renew=*/false);
  ASSERT_TRUE(owner->call({.op = proto::Op::kSetPowerLimit, .gpu = 1, .power_limit_mw = 130'000}));
  auto observer = connect();
  EXPECT_TRUE(wait_for_limit(*observer, 1, 250'000));
  const auto told = owner->call({.op = proto::Op::kPowerLimit, .gpu = 1});
  ASSERT_FALSE(told);
  EXPECT_EQ(told.error().code(), ErrorCode::kState);
  EXPECT_NE(audit_text().find("old=130000 new=250000 conn=1 uid=0 pid=" + std::to_string(::getpid()) +
                              " reason=lease-expired"),
            std::string::npos)
      << audit_text();
}

TEST_F(DaemonCli, AnotherUserIsRefusedControlAndAudited) {
  auto daemon = start();
  const auto result = run({JOULE_DAEMON_HELPER, "--uid", std::to_string(kNobody), "--socket", socket_path,
                           "--request", R"({"id":2,"op":"list_devices"})", "--request",
                           R"({"id":3,"op":"lock_sm_clocks","gpu":1,"min_mhz":600,"max_mhz":900})"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find(R"({"id":2,"ok":true,"result":{"gpus":[)"), std::string::npos) << result.out;
  EXPECT_NE(
      result.out.find(R"({"id":3,"ok":false,"error":{"code":"permission-denied","message":"lock_sm_clocks )"
                      R"(needs the 'control' right; nobody has 'read')"),
      std::string::npos)
      << result.out;
  EXPECT_NE(audit_text().find("action=refused gpu=1 setting=sm_clocks_mhz new=600-900 conn=1 uid=65534"),
            std::string::npos)
      << audit_text();
}

TEST_F(DaemonCli, AllowGroupCountsSupplementaryGroups) {
  // A user who is a member of a group only through /etc/group (not as the primary group), if any.
  std::optional<std::tuple<std::string, uid_t, gid_t>> member;
  setgrent();
  while (const group* entry = getgrent()) {
    if (entry->gr_mem != nullptr && entry->gr_mem[0] != nullptr) {
      if (const passwd* user = getpwnam(entry->gr_mem[0]); user != nullptr && user->pw_gid != entry->gr_gid) {
        member = std::tuple{std::string(entry->gr_name), user->pw_uid, user->pw_gid};
        break;
      }
    }
  }
  endgrent();
  if (!member) {
    GTEST_SKIP() << "no user with a supplementary group on this system";
  }
  const auto& [group_name, uid, gid] = *member;
  auto daemon = start({"--allow-group", group_name, "--others", "none"});
  // The helper drops every supplementary group of its own: only the user database can tell the daemon.
  const auto result =
      run({JOULE_DAEMON_HELPER, "--uid", std::to_string(uid), "--gid", std::to_string(gid), "--socket",
           socket_path, "--request", R"({"id":2,"op":"set_power_limit","gpu":0,"power_limit_mw":150000})"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find(R"("reason":"--allow-group )" + group_name), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(R"({"id":2,"ok":true)"), std::string::npos) << result.out;
}

TEST_F(DaemonCli, OneDaemonPerSocketAndStaleSocketsAreReplaced) {
  auto first = start();
  const auto second = run({JOULE_BINARY, "--sim", "v100", "daemon", "--socket", socket_path}, env);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_EQ(second.err,
            fmt::format("joule: error: another joule daemon (pid {}) is serving {} (it holds {}.lock); "
                        "stop it or choose another --socket\n",
                        first->pid(), socket_path, socket_path));
  // kill -9 leaves the socket file behind; the next daemon takes it over.
  first->signal(SIGKILL);
  first->wait();
  ASSERT_TRUE(std::filesystem::exists(socket_path));
  auto replacement = start();
  auto client = connect();
  EXPECT_EQ(limit(*client, 1), 250'000u);
}

TEST_F(DaemonCli, ADaemonKilledWithSigkillIsRecoveredByTheNext) {
  auto first = start();
  const pid_t first_pid = first->pid();
  {
    auto client = connect();
    ASSERT_TRUE(client->call({.op = proto::Op::kSetPowerLimit, .gpu = 1, .power_limit_mw = 140'000}));
    ASSERT_TRUE(std::filesystem::exists(socket_path + ".state"));
    first->signal(SIGKILL);
    first->wait();
  }
  auto next = start();
  const std::string audit = audit_text();
  EXPECT_NE(
      audit.find(fmt::format("action=restore gpu=1 setting=power_limit_mw new=250000 conn=0 uid=0 pid={} "
                             "reason=recovered",
                             first_pid)),
      std::string::npos)
      << audit;
  EXPECT_FALSE(std::filesystem::exists(socket_path + ".state"));
}

// `joule measure --nodes`: the command runs here, its energy is measured on several daemons at once; a node
// whose daemon goes away mid-window is named, and the total is not a lower figure.
TEST_F(DaemonCli, MeasureOnNodesSumsTheirDaemonsAndNamesOneThatWentAway) {
  auto first = start();
  const std::string first_socket = socket_path;
  socket_path = dir.path() + "/second.sock";
  audit_path = dir.path() + "/audit/second.log";
  auto second = start();
  const std::string nodes = "a=" + first_socket + ",b=" + socket_path;
  const auto result = run({JOULE_BINARY, "measure", "--nodes", nodes, "--format", "json", "-o", "-", "--",
                           "sh", "-c", "sleep 0.2; exit 4"},
                          env);
  ASSERT_EQ(result.exit_code, 4) << result.err;
  const auto json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["complete"], true);
  ASSERT_EQ(json["nodes"].size(), 2u);
  double sum_j = 0;
  for (const auto& node : json["nodes"]) {
    EXPECT_EQ(node["complete"], true) << node.dump();
    EXPECT_EQ(node["devices"].size(), 2u);  // every GPU of the node, whatever CUDA_VISIBLE_DEVICES says here
    sum_j += node["energy_j"].get<double>();
  }
  EXPECT_NEAR(json["total_energy_j"].get<double>(), sum_j, 1e-9);
  EXPECT_GE(json["total_energy_j"].get<double>(), 4 * 220.0 * 0.2);

  // b's daemon is killed while the command runs.
  const auto cut = run({JOULE_BINARY, "measure", "--nodes", nodes, "--format", "json", "-o", "-", "--", "sh",
                        "-c", fmt::format("kill -9 {}; sleep 0.2", second->pid())},
                       env);
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  const auto incomplete = nlohmann::json::parse(cut.out);
  EXPECT_EQ(incomplete["complete"], false);
  EXPECT_TRUE(incomplete["total_energy_j"].is_null());
  EXPECT_EQ(incomplete["nodes"][0]["complete"], true);
  EXPECT_EQ(incomplete["nodes"][1]["node"], "b");
  EXPECT_EQ(incomplete["nodes"][1]["complete"], false);
  EXPECT_TRUE(incomplete["nodes"][1]["energy_j"].is_null());
  EXPECT_FALSE(incomplete["nodes"][1]["error"].get<std::string>().empty());
  (void)second->wait();

  // A node that cannot be reached, a node named twice, and flags that do not apply: one clear line each.
  const auto unreachable = run({JOULE_BINARY, "measure", "--nodes", nodes, "--", "true"}, env);
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_EQ(unreachable.err.rfind("joule: error: cannot reach node b (" + socket_path + "): ", 0), 0u)
      << unreachable.err;
  const auto twice =
      run({JOULE_BINARY, "measure", "--nodes", "a=" + first_socket + ",a=/x", "--", "true"}, env);
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_EQ(twice.err, "joule: error: node \"a\" is listed twice\n");
  const auto with_gpus = run({JOULE_BINARY, "measure", "--nodes", nodes, "--gpus", "0", "--", "true"}, env);
  EXPECT_EQ(with_gpus.exit_code, 2);
  EXPECT_EQ(
      with_gpus.err,
      "joule: error: measure --nodes: --gpus/--cpus do not apply: the nodes' daemons serve every GPU and CPU "
      "package they have, measured once\n");
  const auto stray =
      run({JOULE_BINARY, "--sim", "v100", "measure", "--node-ca", "ca.pem", "--", "true"}, env);
  EXPECT_EQ(stray.exit_code, 2);
  EXPECT_EQ(
      stray.err,
      "joule: error: measure: --node-ca, --node-cert, --node-key, --node-token-file and --node-plain-tcp are "
      "for --nodes HOST:PORT,…: give the nodes too\n");
}

TEST_F(DaemonCli, FleetPowerPrintsEveryNodesGpus) {
  auto first = start();
  const std::string nodes = "a=" + socket_path;
  const auto result = run({JOULE_BINARY, "fleet", "power", "--nodes", nodes, "--interval-ms", "100",
                           "--duration-s", "0.25", "--format", "csv"},
                          env);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::istringstream lines(result.out);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "time_unix_ms,node,gpu,power_w");
  int rows = 0;
  while (std::getline(lines, line)) {
    EXPECT_NE(line.find(",a,"), std::string::npos) << line;
    EXPECT_NE(line.find(",220.25"), std::string::npos) << line;  // the simulated V100 at its default limit
    ++rows;
  }
  EXPECT_GE(rows, 4);  // 2 GPUs × at least 2 readings
  EXPECT_EQ(rows % 2, 0);
  const auto text = run({JOULE_BINARY, "fleet", "power", "--nodes", nodes, "--duration-s", "0.1"}, env);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Z  a 440.500 W  total 440.500 W\n"), std::string::npos) << text.out;
  const auto missing = run({JOULE_BINARY, "fleet", "power", "--duration-s", "0.1"}, env);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.err, "joule: error: --nodes is required (see 'joule fleet power --help')\n");
}

TEST_F(DaemonCli, BadFlagsAreOneClearLine) {
  const std::vector<std::pair<std::vector<std::string>, std::pair<int, std::string>>> cases = {
      {{"--lease-s", "0"},
       {2,
        "joule: error: --lease-s must be a finite number in (0, 86400], got 0 (see 'joule daemon "
        "--help')\n"}},
      {{"--allow-user", "no-such-user-joule"},
       {1,
        "joule: error: --allow-user no-such-user-joule: no such user (give a name from /etc/passwd or a "
        "numeric "
        "id)\n"}},
      {{"--read-group", "no-such-group-joule"},
       {1,
        "joule: error: --read-group no-such-group-joule: no such group (give a name from /etc/group or a "
        "numeric "
        "id)\n"}},
      {{"--others", "everyone"}, {2, ""}},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> argv = {JOULE_BINARY, "--sim", "v100", "daemon", "--socket", socket_path};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto result = run(argv, env);
    EXPECT_EQ(result.exit_code, expected.first) << args[0] << ": " << result.err;
    if (!expected.second.empty()) {
      EXPECT_EQ(result.err, expected.second);
    }
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
  const auto file = dir.write("not-a-socket", "x");
  const auto refused = run({JOULE_BINARY, "--sim", "v100", "daemon", "--socket", file}, env);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.err,
            "joule: error: " + file + " exists and is not a socket; remove it or choose another --socket\n");
}

TEST_F(DaemonCli, RealGpusNeedRootUnlessAllowed) {
  // A folder the unprivileged daemon may create its socket in.
  const std::string folder = dir.path() + "/open";
  std::filesystem::create_directories(folder);
  // Sticky, as /tmp: the daemon refuses a folder others may write unless it is (docs/daemon.md).
  ::chmod(folder.c_str(), 01777);
  socket_path = folder + "/joule.sock";
  auto fake = env;
  fake["JOULE_NVML_LIBRARY"] = JOULE_FAKE_NVML_PATH;
  fake["JOULE_ROCM_SMI_LIBRARY"] = "/nonexistent/librocm_smi64.so.1";
  fake["JOULE_AMD_SMI_LIBRARY"] = "/nonexistent/libamd_smi.so";
  fake["JOULE_LEVEL_ZERO_LIBRARY"] = "/nonexistent/libze_loader.so.1";
  const std::vector<std::string> as_nobody = {
      JOULE_DAEMON_HELPER, "--uid",    std::to_string(kNobody), "--exec", JOULE_BINARY, "daemon",
      "--socket",          socket_path};
  const auto refused = run(as_nobody, fake);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(
      refused.err.find("joule: error: joule daemon runs as uid 65534, not root, so it could not change the "
                       "power limits and clocks of GPU 0"),
      std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("--allow-unprivileged"), std::string::npos);

  auto allowed_argv = as_nobody;
  allowed_argv.push_back("--allow-unprivileged");
  Process allowed(allowed_argv, fake);
  ASSERT_TRUE(allowed.wait_for_output(10s)) << allowed.err_so_far();
  auto client = connect();
  EXPECT_EQ((*client->call({.op = proto::Op::kListDevices}))["gpus"][0]["backend"], "nvml");
  // The daemon's own user may control; the fake library lets it.
  EXPECT_EQ(client->hello()["reason"], "root");
  allowed.signal(SIGTERM);
  EXPECT_EQ(allowed.wait().exit_code, 0);
}

TEST_F(DaemonCli, UnsafeFoldersAndBadConnectionLimitsAreOneClearLine) {
  const std::string open = dir.path() + "/open";
  std::filesystem::create_directories(open);
  ::chmod(open.c_str(), 0777);
  const std::string canonical = std::filesystem::canonical(open).string();
  const auto unsafe = run({JOULE_BINARY, "--sim", "v100", "daemon", "--socket", open + "/joule.sock"}, env);
  EXPECT_EQ(unsafe.exit_code, 1);
  EXPECT_EQ(
      unsafe.err,
      fmt::format("joule: error: the socket folder {0} is writable by its group and others (mode 0777) and "
                  "not sticky: any user could plant files that the daemon opens as root; make it 0755 "
                  "(chmod go-w {0}) or sticky (chmod +t {0}), or choose another --socket\n",
                  canonical));
  EXPECT_TRUE(std::filesystem::is_empty(open));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--max-connections", "0"},
       "joule: error: --max-connections must be a whole number in [1, 65536], got 0 (see 'joule daemon "
       "--help')\n"},
      {{"--max-connections-per-user", "0"},
       "joule: error: --max-connections-per-user must be a whole number > 0, got 0 (see 'joule daemon "
       "--help')\n"},
      {{"--max-connections", "8", "--root-reserved-connections", "8"},
       "joule: error: --root-reserved-connections 8 must be less than --max-connections 8 (other users need "
       "room too)\n"},
      {{"--hello-timeout-s", "0"},
       "joule: error: --hello-timeout-s must be a finite number in (0, 3600], got 0 (see 'joule daemon "
       "--help')\n"},
      {{"--max-connections", "many"}, ""},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> argv = {JOULE_BINARY, "--sim", "v100", "daemon", "--socket", socket_path};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto result = run(argv, env);
    EXPECT_EQ(result.exit_code, 2) << args[0] << ": " << result.err;
    if (!expected.empty()) {
      EXPECT_EQ(result.err, expected);
    }
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_FALSE(std::filesystem::exists(socket_path));
  }
}

TEST_F(DaemonCli, AStateFilePlantedByAUserIsNotReplayed) {
  // The attack of issue 11: a user writes SOCKET.state in a folder they may write (here sticky, as /tmp);
  // the daemon replayed it at start, setting GPU 0 to 100 W as root, audited as "recovered".
  const std::string shared = dir.path() + "/shared";
  std::filesystem::create_directories(shared);
  ::chmod(shared.c_str(), 01777);
  socket_path = shared + "/joule.sock";
  const std::string state = socket_path + ".state";
  auto clock = std::make_shared<VirtualClock>();
  const auto sims = device::sim::open_sim_gpus(*device::sim::parse_spec("2xv100"), clock);
  ASSERT_TRUE(sims);
  const std::string planted =
      nlohmann::json{{"format", "joule-daemon-state"},
                     {"version", 1},
                     {"pid", 4242},
                     {"settings", nlohmann::json::array({{{"gpu", 0},
                                                          {"uuid", (*sims)[0]->info().uuid},
                                                          {"setting", "power_limit_mw"},
                                                          {"original", 100'000}}})}}
          .dump();
  const auto planting = run({JOULE_DAEMON_HELPER, "--uid", std::to_string(kNobody), "--exec", "/bin/sh", "-c",
                             R"(umask 022; printf '%s\n' "$0" > "$1")", planted, state});
  ASSERT_EQ(planting.exit_code, 0) << planting.err;
  auto daemon = start();
  auto client = connect();
  EXPECT_EQ(limit(*client, 0), 250'000u);
  EXPECT_NE(
      daemon->err_so_far().find("joule: error: not replaying the daemon state file " + state +
                                ": it belongs to uid 65534, not to the daemon's user (root); nothing was "
                                "restored from it; it was moved to " +
                                state + ".untrusted."),
      std::string::npos)
      << daemon->err_so_far();
  daemon->signal(SIGTERM);
  EXPECT_EQ(daemon->wait().exit_code, 0);
  EXPECT_EQ(audit_text().find("recovered"), std::string::npos) << audit_text();
  EXPECT_FALSE(std::filesystem::exists(state));
}

TEST_F(DaemonCli, ConnectionLimitsAreFlags) {
  auto daemon = start(
      {"--max-connections", "3", "--root-reserved-connections", "1", "--max-connections-per-user", "1"});
  const std::vector<std::string> as_nobody = {JOULE_DAEMON_HELPER, "--uid",     std::to_string(kNobody),
                                              "--socket",          socket_path, "--hold"};
  Process first(as_nobody);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (first.out_so_far().find("holding") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_NE(first.out_so_far().find(R"("ok":true)"), std::string::npos) << first.out_so_far();
  // The same user again: told why instead of a hello answer.
  const auto second = run({JOULE_DAEMON_HELPER, "--uid", std::to_string(kNobody), "--socket", socket_path});
  EXPECT_EQ(
      second.out,
      R"({"id":null,"ok":false,"error":{"code":"state","message":"uid 65534 (nobody) already has 1 )"
      R"(connection to the daemon, the most one user may hold (--max-connections-per-user 1); close one )"
      R"(first"}})"
      "\n");
  // Root still gets in.
  auto client = connect();
  EXPECT_EQ(limit(*client, 1), 250'000u);
}

TEST_F(DaemonCli, RefusalAndIdleLimitsAreFlagsAndThePlantedAuditLogIsRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--max-refusals-in-a-row", "0"}, "--max-refusals-in-a-row must be a whole number > 0, got 0"},
      {{"--requests-per-turn", "0"}, "--requests-per-turn must be a whole number > 0, got 0"},
      {{"--idle-timeout-s", "0"}, "--idle-timeout-s must be a finite number in (0, 86400], got 0"},
      {{"--max-idle-connections-per-user", "0"},
       "--max-idle-connections-per-user must be a whole number > 0, got 0"},
      {{"--max-idle-connections", "0"}, "--max-idle-connections must be a whole number > 0, got 0"},
      {{"--audit-refusals-per-user", "-1"}, "--audit-refusals-per-user must be a whole number ≥ 0, got -1"},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> argv = {JOULE_BINARY, "--sim", "v100", "daemon", "--socket", socket_path};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto result = run(argv, env);
    EXPECT_EQ(result.exit_code, 2) << args[0] << ": " << result.err;
    EXPECT_EQ(result.err, "joule: error: " + expected + " (see 'joule daemon --help')\n");
  }
  // A link planted where the audit log goes: refused in one line, never followed.
  const std::string victim = dir.write("victim", "precious\n");
  std::filesystem::create_directories(dir.path() + "/audit");
  ::chmod((dir.path() + "/audit").c_str(), 0750);
  ASSERT_EQ(::symlink(victim.c_str(), audit_path.c_str()), 0);
  const auto planted =
      run({JOULE_BINARY, "--sim", "v100", "daemon", "--socket", socket_path, "--audit-log", audit_path}, env);
  EXPECT_EQ(planted.exit_code, 1);
  EXPECT_EQ(planted.err,
            "joule: error: the audit log " + audit_path +
                " is a symbolic link: someone planted it to make the daemon append to another file; it "
                "is not followed: remove it (after checking who made it) or choose another "
                "--audit-log\n");
  EXPECT_EQ(planted.out, "");
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), "precious\n");
  ASSERT_EQ(::unlink(audit_path.c_str()), 0);
  // The limits reach the daemon: one refusal line per user, the rest summarised; two refusals in a row close.
  Process daemon({JOULE_BINARY,
                  "--log-level",
                  "info",
                  "--sim",
                  "2xv100",
                  "daemon",
                  "--socket",
                  socket_path,
                  "--audit-log",
                  audit_path,
                  "--audit-refusals-per-user",
                  "1",
                  "--max-refusals-in-a-row",
                  "2",
                  "--requests-per-turn",
                  "1",
                  "--idle-timeout-s",
                  "30",
                  "--max-idle-connections-per-user",
                  "1",
                  "--max-idle-connections",
                  "1"},
                 env);
  ASSERT_TRUE(daemon.wait_for_output(10s)) << daemon.err_so_far();
  const std::string refused_set = R"({"id":2,"op":"set_power_limit","gpu":0,"power_limit_mw":150000})";
  const auto result = run({JOULE_DAEMON_HELPER, "--uid", std::to_string(kNobody), "--socket", socket_path,
                           "--request", refused_set, "--request", refused_set});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (daemon.err_so_far().find("2 requests in a row refused; closing it") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_NE(daemon.err_so_far().find("(uid 65534 (nobody), pid "), std::string::npos) << daemon.err_so_far();
  EXPECT_NE(daemon.err_so_far().find("2 requests in a row refused; closing it"), std::string::npos)
      << daemon.err_so_far();
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait().exit_code, 0);
  const std::string audit = audit_text();
  EXPECT_EQ(std::count(audit.begin(), audit.end(), '\n'), 2) << audit;
  EXPECT_NE(audit.find("action=refused gpu=0 setting=power_limit_mw new=150000 conn=1 uid=65534"),
            std::string::npos)
      << audit;
  EXPECT_NE(
      audit.find("action=refused-summary conn=0 uid=65534 pid=0 detail=\"uid 65534: 1 more refusal in the "
                 "last "),
      std::string::npos)
      << audit;
}

TEST_F(DaemonCli, AnotherUserMeasuresCpuEnergyThroughTheDaemon) {
  // RAPL is root-only since Linux 5.10: the daemon (root) reads a fake tree that a user's command changes.
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 5'000'000, 262'143'328'850, FakeDram{1'000'000});
  ::chmod(powercap.package_dir(0).c_str(), 0777);  // so that the measured command (nobody) can move energy
  env["JOULE_POWERCAP_ROOT"] = powercap.root();
  auto daemon = start();
  EXPECT_NE(daemon->out_so_far().find("joule daemon: serving the energy of 1 CPU package (RAPL at " +
                                      powercap.root() + ")\n"),
            std::string::npos)
      << daemon->out_so_far();
  // The peer could not read the counters itself: it has no powercap tree at all.
  env["JOULE_POWERCAP_ROOT"] = dir.path() + "/no-powercap";
  const std::string zone = powercap.package_dir(0);
  const auto result = run({JOULE_DAEMON_HELPER, "--uid", std::to_string(kNobody), "--exec", JOULE_BINARY,
                           "--daemon", socket_path, "measure", "--cpus", "--format", "json", "--", "/bin/sh",
                           "-c", fmt::format("echo 8000000 > {0}/e.tmp && mv {0}/e.tmp {0}/energy_uj", zone)},
                          env);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto report = nlohmann::json::parse(result.err);
  std::map<std::string, double> energy_j;
  for (const auto& device : report["devices"]) {
    energy_j[device["kind"].get<std::string>()] += device["energy_j"].get<double>();
  }
  ASSERT_TRUE(energy_j.contains("cpu")) << result.err;
  EXPECT_DOUBLE_EQ(energy_j["cpu"], 3.0) << result.err;
  EXPECT_DOUBLE_EQ(energy_j["dram"], 0.0) << result.err;
  EXPECT_GT(energy_j["gpu"], 0.0) << result.err;
}

TEST_F(DaemonCli, ACpuOnlyDaemonServesCpuEnergyAndNothingToServeIsAnError) {
  auto no_gpu = env;
  no_gpu["JOULE_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1";
  no_gpu["JOULE_ROCM_SMI_LIBRARY"] = "/nonexistent/librocm_smi64.so.1";
  no_gpu["JOULE_AMD_SMI_LIBRARY"] = "/nonexistent/libamd_smi.so";
  no_gpu["JOULE_LEVEL_ZERO_LIBRARY"] = "/nonexistent/libze_loader.so.1";
  const std::vector<std::string> argv = {JOULE_BINARY, "daemon",      "--socket",
                                         socket_path,  "--audit-log", audit_path};
  const auto nothing = run(argv, no_gpu);
  EXPECT_EQ(nothing.exit_code, 1);
  EXPECT_EQ(nothing.err.rfind("joule: error: daemon: nothing to serve: no GPU found: ", 0), 0u)
      << nothing.err;
  EXPECT_NE(nothing.err.find("; no CPU energy counters found: rapl: no RAPL energy counters: "),
            std::string::npos)
      << nothing.err;

  FakePowercap powercap;
  powercap.add_package(0, "package-0", 5'000'000, 262'143'328'850);
  no_gpu["JOULE_POWERCAP_ROOT"] = powercap.root();
  Process daemon(argv, no_gpu);
  ASSERT_TRUE(daemon.wait_for_output(10s)) << daemon.err_so_far();
  EXPECT_EQ(daemon.out_so_far().rfind("joule daemon: serving 0 GPUs on ", 0), 0u) << daemon.out_so_far();
  no_gpu["JOULE_POWERCAP_ROOT"] = dir.path() + "/no-powercap";
  const auto cpus = run(
      {JOULE_BINARY, "--daemon", socket_path, "measure", "--cpus", "--format", "json", "--", "true"}, no_gpu);
  ASSERT_EQ(cpus.exit_code, 0) << cpus.err;
  const std::string warning =
      "joule: warning: no GPU will be measured: no GPU found: daemon: joule daemon at " + socket_path +
      " loaded, but it reports no GPU. For a simulated GPU, run joule "
      "--sim v100 measure …\n";
  ASSERT_EQ(cpus.err.rfind(warning, 0), 0u) << cpus.err;
  const auto report = nlohmann::json::parse(cpus.err.substr(warning.size()));
  ASSERT_EQ(report["devices"].size(), 1u) << cpus.err;
  EXPECT_EQ(report["devices"][0]["kind"], "cpu");
  // Without --cpus nothing the daemon serves is measured: an error, as for any daemon without GPUs.
  const auto gpus = run({JOULE_BINARY, "--daemon", socket_path, "measure", "--", "true"}, no_gpu);
  EXPECT_EQ(gpus.exit_code, 1);
  EXPECT_EQ(gpus.err.rfind("joule: error: --daemon " + socket_path + ": no GPU found: daemon: ", 0), 0u)
      << gpus.err;
}

}  // namespace
}  // namespace joule::test
