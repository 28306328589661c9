// SPDX-License-Identifier: Apache-2.0
// The daemon on the network (docs/fleet.md), through the real binary: four `joule daemon`s on simulated GPUs
// as four "nodes" on loopback addresses 127.0.0.2–5, each with a TLS listener, a certificate made here and a
// token file; `joule measure --nodes` and `joule fleet power` over them; every refusal (a missing or wrong
// token, a certificate of another authority, an expired one, a read token asking for a limit) in words and
// in the audit log; SIGHUP reloading the tokens without dropping a connection; a client cut off having its
// limit restored after its lease; a flood of connections that never finish their handshake while an
// established client goes on; and the files and flags the listener refuses at start.
#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "joule/device/daemon_client.hpp"

#include "integration/run_process.hpp"
#include "test_pki.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using namespace std::chrono_literals;
namespace proto = device::daemon_protocol;

constexpr uint32_t kDefaultLimitMw = 250000;  // the simulated V100's

std::string read_file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string random_token(char fill) {
  return std::string(48, fill) + "0123456789abcdef";
}

class NetworkDaemon : public ::testing::Test {
 protected:
  NetworkDaemon() : pki("net") {
    ::chmod(dir.path().c_str(), 0755);
    env["JOULE_POWERCAP_ROOT"] = dir.path() + "/no-powercap";
    authority = pki.authority("ca");
    server = pki.issue("ca", "node", "node",
                       {"IP:127.0.0.2", "IP:127.0.0.3", "IP:127.0.0.4", "IP:127.0.0.5", "DNS:localhost"});
    agent = pki.issue("ca", "agent", "agent");
    write_tokens({{"trainer", "read", trainer_token},
                  {"boss", "control", boss_token},
                  {"agent", "read", "certificate"}});
    trainer_token_file = write_private("trainer.token", trainer_token + "\n");
    boss_token_file = write_private("boss.token", boss_token + "\n");
  }

  std::string write_private(const std::string& name, const std::string& text) {
    const std::string path = dir.write(name, text);
    ::chmod(path.c_str(), 0600);
    return path;
  }

  void write_tokens(const std::vector<std::array<std::string, 3>>& lines) {
    std::string text = "# NAME SCOPE TOKEN\n";
    for (const auto& [name, scope, token] : lines) {
      text += name + " " + scope + " " + token + "\n";
    }
    tokens_file = write_private("tokens", text);
  }

  struct Node {
    std::unique_ptr<Process> process;
    std::string address;  // "127.0.0.2:PORT"
    std::string socket;
    std::string audit;
  };

  /// Starts `joule --sim 2xv100 daemon` on its own socket and audit log, listening on HOST:0 over TLS.
  Node start(const std::string& host, std::vector<std::string> extra = {}) {
    Node node;
    node.socket = dir.path() + "/" + host + ".sock";
    node.audit = dir.path() + "/audit/" + host + ".log";
    std::vector<std::string> argv = {JOULE_BINARY, "--sim",     "2xv100",          "daemon",
                                     "--socket",   node.socket, "--audit-log",     node.audit,
                                     "--listen",   host + ":0", "--tls-cert",      server.certificate,
                                     "--tls-key",  server.key,  "--tls-client-ca", authority.certificate,
                                     "--tokens",   tokens_file};
    argv.insert(argv.end(), extra.begin(), extra.end());
    node.process = std::make_unique<Process>(argv, env);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    const std::regex listening("network listener on (127\\.0\\.0\\.[0-9]+:[0-9]+)");
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch match;
      const std::string out = node.process->out_so_far();
      if (std::regex_search(out, match, listening)) {
        node.address = match[1];
        return node;
      }
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "the daemon did not listen: " << node.process->err_so_far();
    return node;
  }

  device::DaemonClientOptions options(const std::string& token) const {
    device::DaemonClientOptions options;
    options.tls_ca_file = authority.certificate;
    options.token = token;
    options.timeout = 5s;
    return options;
  }

  Result<std::shared_ptr<device::DaemonClient>> connect(const std::string& address,
                                                        const std::string& token) {
    return device::DaemonClient::connect(address, options(token));
  }

  static uint32_t limit(device::DaemonClient& client, int gpu) {
    const auto answer = client.call({.op = proto::Op::kPowerLimit, .gpu = gpu});
    return answer ? (*answer)["power_limit_mw"].get<uint32_t>() : 0;
  }

  TempDir dir;
  testing::TestPki pki;
  testing::TestPki::Files authority;
  testing::TestPki::Files server;
  testing::TestPki::Files agent;
  const std::string trainer_token = random_token('t');
  const std::string boss_token = random_token('b');
  std::string tokens_file;
  std::string trainer_token_file;
  std::string boss_token_file;
  std::map<std::string, std::string> env = {{"JOULE_SIM", Process::kUnset},
                                            {"JOULE_DAEMON_SOCKET", Process::kUnset},
                                            {"JOULE_DAEMON_CA", Process::kUnset},
                                            {"JOULE_DAEMON_TOKEN_FILE", Process::kUnset},
                                            {"CUDA_VISIBLE_DEVICES", Process::kUnset}};
};

TEST_F(NetworkDaemon, FourNodesOverTlsAreOneWindowAndOneLiveTable) {
  std::vector<Node> nodes;
  for (const char* host : {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}) {
    nodes.push_back(start(host));
  }
  std::string list;
  for (const auto& node : nodes) {
    list += (list.empty() ? "" : ",") + node.address;
  }
  const auto result =
      run({JOULE_BINARY, "measure", "--nodes", list, "--node-ca", authority.certificate, "--node-token-file",
           trainer_token_file, "--format", "json", "-o", "-", "--", "sh", "-c", "sleep 0.3"},
          env);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto json = nlohmann::json::parse(result.out);
  EXPECT_EQ(json["complete"], true) << result.out;
  ASSERT_EQ(json["nodes"].size(), 4u);
  double sum_j = 0;
  for (size_t i = 0; i < 4; ++i) {
    const auto& node = json["nodes"][i];
    EXPECT_EQ(node["node"], nodes[i].address);
    EXPECT_EQ(node["complete"], true) << node.dump();
    EXPECT_EQ(node["devices"].size(), 2u);
    // Two V100s at 220.25 W over the node's own window of at least 0.3 s.
    EXPECT_GE(node["energy_j"].get<double>(), 2 * 220.25 * 0.3 * 0.99) << node.dump();
    sum_j += node["energy_j"].get<double>();
  }
  EXPECT_NEAR(json["total_energy_j"].get<double>(), sum_j, 1e-9);

  // The live table over the same nodes, authenticated by the environment this time.
  auto with_environment = env;
  with_environment["JOULE_DAEMON_CA"] = authority.certificate;
  with_environment["JOULE_DAEMON_TOKEN_FILE"] = trainer_token_file;
  const auto power =
      run({JOULE_BINARY, "fleet", "power", "--nodes", list, "--duration-s", "0.1"}, with_environment);
  ASSERT_EQ(power.exit_code, 0) << power.err;
  EXPECT_NE(power.out.find("total 1762.000 W"), std::string::npos) << power.out;  // 8 × 220.25 W
}

TEST_F(NetworkDaemon, EveryRefusalIsClearAndAudited) {
  const Node node = start("127.0.0.2", {"--metrics", "127.0.0.1:0"});
  // No token.
  const auto none = connect(node.address, "");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(none.error().message().find("refused hello: the daemon's network listener needs a bearer token"),
            std::string::npos)
      << none.error().message();
  // A wrong token: refused, never printed.
  const std::string wrong = random_token('w');
  const auto bad = connect(node.address, wrong);
  ASSERT_FALSE(bad);
  EXPECT_NE(
      bad.error().message().find("the token presented (64 characters) is not in the daemon's token file"),
      std::string::npos)
      << bad.error().message();
  // A client certificate of another authority.
  pki.authority("other-ca");
  const auto stranger = pki.issue("other-ca", "stranger", "agent");
  auto stranger_options = options("");
  stranger_options.tls_certificate_file = stranger.certificate;
  stranger_options.tls_private_key_file = stranger.key;
  const auto foreign = device::DaemonClient::connect(node.address, stranger_options);
  ASSERT_FALSE(foreign);
  EXPECT_NE(foreign.error().message().find("alert unknown ca"), std::string::npos)
      << foreign.error().message();
  // An expired client certificate.
  const auto expired = pki.issue("ca", "expired", "agent", {}, -7200, -3600);
  auto expired_options = options("");
  expired_options.tls_certificate_file = expired.certificate;
  expired_options.tls_private_key_file = expired.key;
  const auto old = device::DaemonClient::connect(node.address, expired_options);
  ASSERT_FALSE(old);
  EXPECT_NE(old.error().message().find("certificate expired"), std::string::npos) << old.error().message();
  // The daemon's certificate checked against another authority: the client refuses the daemon.
  auto doubting = options(trainer_token);
  doubting.tls_ca_file = pki.folder() / "other-ca.pem";
  const auto unverified = device::DaemonClient::connect(node.address, doubting);
  ASSERT_FALSE(unverified);
  EXPECT_EQ(unverified.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(unverified.error().message().find("TLS handshake with the joule daemon at " + node.address +
                                              " failed: TLS handshake: certificate verify failed: "),
            std::string::npos)
      << unverified.error().message();
  // A read token asking for a limit.
  auto trainer = connect(node.address, trainer_token);
  ASSERT_TRUE(trainer) << trainer.error().message();
  EXPECT_EQ((*trainer)->hello()["right"], "read");
  EXPECT_EQ((*trainer)->hello()["peer"]["client"], "trainer");
  const auto set = (*trainer)->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 200000});
  ASSERT_FALSE(set);
  EXPECT_NE(
      set.error().message().find("set_power_limit needs the control right; client trainer has read (token "
                                 "of trainer (scope read))"),
      std::string::npos)
      << set.error().message();
  // A client certificate its line names: the agent, read.
  auto agent_options = options("");
  agent_options.tls_certificate_file = agent.certificate;
  agent_options.tls_private_key_file = agent.key;
  const auto by_certificate = device::DaemonClient::connect(node.address, agent_options);
  ASSERT_TRUE(by_certificate) << by_certificate.error().message();
  EXPECT_EQ((*by_certificate)->hello()["reason"], "certificate of agent (scope read)");

  std::this_thread::sleep_for(100ms);
  const std::string audit = read_file_text(node.audit);
  EXPECT_NE(audit.find("reason=authentication detail=\"the daemon's network listener needs a bearer token"),
            std::string::npos)
      << audit;
  EXPECT_NE(audit.find("reason=authentication detail=\"the token presented (64 characters)"),
            std::string::npos);
  EXPECT_EQ(audit.find(wrong), std::string::npos);
  EXPECT_NE(
      audit.find("reason=tls detail=\"TLS handshake: certificate verify failed: unable to get local issuer "
                 "certificate"),
      std::string::npos)
      << audit;
  EXPECT_NE(
      audit.find("reason=tls detail=\"TLS handshake: certificate verify failed: certificate has expired"),
      std::string::npos)
      << audit;
  EXPECT_NE(audit.find("action=refused gpu=0 setting=power_limit_mw new=200000 conn="), std::string::npos);
  EXPECT_NE(audit.find("client=trainer addr=127.0.0.1:"), std::string::npos) << audit;
  // The refusals by reason on /metrics.
  std::smatch url;
  const std::string out = node.process->out_so_far();
  ASSERT_TRUE(std::regex_search(out, url, std::regex("metrics on (http://[0-9.:]+)/metrics"))) << out;
  const auto scraped = run({"/usr/bin/curl", "-sS", url[1].str() + "/metrics"});
  ASSERT_EQ(scraped.exit_code, 0) << scraped.err;
  EXPECT_NE(scraped.out.find("joule_daemon_network_refusals_total{reason=\"authentication\"} 2"), std::string::npos)
      << scraped.out;
  // tls: the stranger's and the expired certificate, and the client that did not trust the daemon's.
  EXPECT_NE(scraped.out.find("joule_daemon_network_refusals_total{reason=\"tls\"} 3"), std::string::npos)
      << scraped.out;
  EXPECT_NE(scraped.out.find("joule_daemon_refused_requests_total 1"), std::string::npos);
}

TEST_F(NetworkDaemon, SighupReloadsTheTokensWithoutDroppingAConnection) {
  const Node node = start("127.0.0.3");
  auto boss = connect(node.address, boss_token);
  ASSERT_TRUE(boss) << boss.error().message();
  ASSERT_TRUE((*boss)->call({.op = proto::Op::kSetPowerLimit, .gpu = 1, .power_limit_mw = 180000}));
  // The trainer's token is replaced by a new one; the boss's line goes.
  const std::string renewed = random_token('n');
  write_tokens({{"trainer", "read", renewed}});
  node.process->signal(SIGHUP);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (read_file_text(node.audit).find("action=reload") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(read_file_text(node.audit)
                .find("action=reload conn=0 uid=0 pid=0 reason=signal detail=\"network "
                      "listener: TLS, client certificates of " +
                      authority.certificate + "; clients: trainer (read)\""),
            std::string::npos)
      << read_file_text(node.audit);
  EXPECT_FALSE(connect(node.address, trainer_token));
  EXPECT_FALSE(connect(node.address, boss_token));
  EXPECT_TRUE(connect(node.address, renewed));
  // The boss's connection, made before, still holds its limit.
  EXPECT_EQ(limit(**boss, 1), 180000u);
  EXPECT_TRUE((*boss)->connected());
  // A token file that became readable by others is not taken: the old tokens stay.
  ::chmod(tokens_file.c_str(), 0644);
  node.process->signal(SIGHUP);
  const auto second = std::chrono::steady_clock::now() + 5s;
  while (node.process->err_so_far().find("reload (signal 1) failed") == std::string::npos &&
         std::chrono::steady_clock::now() < second) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(
      node.process->err_so_far().find("reload (signal 1) failed; the network listener keeps its previous "
                                      "files: --tokens: the token file " +
                                      tokens_file + " is readable by every user"),
      std::string::npos)
      << node.process->err_so_far();
  EXPECT_TRUE(connect(node.address, renewed));
}

TEST_F(NetworkDaemon, AClientCutOffHasItsLimitRestoredWhenItsLeaseEnds) {
  const Node node = start("127.0.0.4", {"--lease-s", "0.5"});
  auto boss_options = options(boss_token);
  boss_options.renew_lease = false;  // cut off: it sends nothing more, its connection stays open
  auto boss = device::DaemonClient::connect(node.address, boss_options);
  ASSERT_TRUE(boss) << boss.error().message();
  ASSERT_TRUE((*boss)->call({.op = proto::Op::kSetPowerLimit, .gpu = 0, .power_limit_mw = 150000}));
  auto watcher = connect(node.address, trainer_token);
  ASSERT_TRUE(watcher) << watcher.error().message();
  EXPECT_EQ(limit(**watcher, 0), 150000u);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (limit(**watcher, 0) != kDefaultLimitMw && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(limit(**watcher, 0), kDefaultLimitMw);
  const std::string audit = read_file_text(node.audit);
  EXPECT_NE(audit.find("action=restore gpu=0 setting=power_limit_mw old=150000 new=250000"),
            std::string::npos)
      << audit;
  EXPECT_NE(audit.find("client=boss addr=127.0.0.1:"), std::string::npos) << audit;
  EXPECT_NE(audit.find("reason=lease-expired"), std::string::npos) << audit;
  // A control client that closes (or is killed: the kernel closes its socket) is restored at once.
  auto brief = connect(node.address, boss_token);
  ASSERT_TRUE(brief);
  ASSERT_TRUE((*brief)->call({.op = proto::Op::kSetPowerLimit, .gpu = 1, .power_limit_mw = 160000}));
  brief->reset();
  const auto closed = std::chrono::steady_clock::now() + 5s;
  while (limit(**watcher, 1) != kDefaultLimitMw && std::chrono::steady_clock::now() < closed) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(limit(**watcher, 1), kDefaultLimitMw);
}

TEST_F(NetworkDaemon, AThousandConnectionsThatNeverHandshakeDoNotStopAnEstablishedClient) {
  const Node node = start("127.0.0.5", {"--max-connections", "2048", "--max-connections-per-user", "2000",
                                        "--hello-timeout-s", "30"});
  auto client = connect(node.address, trainer_token);
  ASSERT_TRUE(client) << client.error().message();
  const auto colon = node.address.rfind(':');
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(std::stoi(node.address.substr(colon + 1))));
  ::inet_pton(AF_INET, "127.0.0.5", &address.sin_addr);
  std::vector<int> flood;
  size_t answered = 0;
  for (int i = 0; i < 1000; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
      // Half a ClientHello's record header: the daemon's handshake waits for the rest.
      (void)::send(fd, "\x16\x03\x01", 3, MSG_NOSIGNAL);
      flood.push_back(fd);
    } else if (fd >= 0) {
      ::close(fd);
    }
    if (i % 100 == 0 && (*client)->call({.op = proto::Op::kPower, .gpu = 0})) {
      ++answered;
    }
  }
  EXPECT_EQ(answered, 10u);
  EXPECT_EQ(flood.size(), 1000u);
  // Beyond --max-handshakes (64) the connections wait in the listen backlog; the established client goes on,
  // and a new client gets in once the flood is gone.
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE((*client)->call({.op = proto::Op::kPower, .gpu = 1})) << i;
  }
  for (const int fd : flood) {
    ::close(fd);
  }
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(connect(node.address, boss_token));
}

TEST_F(NetworkDaemon, ASlowHandshakeIsClosedAtTheHelloTimeoutAndAudited) {
  const Node node = start("127.0.0.3", {"--hello-timeout-s", "0.3"});
  const auto colon = node.address.rfind(':');
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(std::stoi(node.address.substr(colon + 1))));
  ::inet_pton(AF_INET, "127.0.0.3", &address.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  (void)::send(fd, "\x16\x03\x01\x02", 4, MSG_NOSIGNAL);  // a ClientHello that never comes whole
  timeval limit{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  char byte = 0;
  const auto began = std::chrono::steady_clock::now();
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0);  // closed by the daemon, not by the 5 s receive limit
  EXPECT_LT(std::chrono::steady_clock::now() - began, 4s);
  ::close(fd);
  std::this_thread::sleep_for(50ms);
  EXPECT_NE(read_file_text(node.audit)
                .find("reason=handshake-timeout detail=\"no TLS handshake within 0.3 s of "
                      "connecting\""),
            std::string::npos)
      << read_file_text(node.audit);
}

TEST_F(NetworkDaemon, TheListenersFilesAndFlagsAreCheckedAtStart) {
  const std::string base_socket = dir.path() + "/bad.sock";
  const auto daemon = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {JOULE_BINARY, "--sim", "v100", "daemon", "--socket", base_socket};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, env);
  };
  const auto plain_everywhere =
      daemon({"--listen", "0.0.0.0:0", "--allow-plain-loopback", "--tokens", tokens_file});
  EXPECT_EQ(plain_everywhere.exit_code, 2) << plain_everywhere.err;
  EXPECT_EQ(
      plain_everywhere.err,
      "joule: error: --listen 0.0.0.0:0: plain TCP (no --tls-cert) is allowed only on a loopback address "
      "(127.0.0.1, [::1]); 0.0.0.0:0 is not one: give the daemon a certificate (docs/fleet.md)\n");
  const auto no_tls = daemon({"--listen", "127.0.0.2:0", "--tokens", tokens_file});
  EXPECT_EQ(no_tls.exit_code, 2);
  EXPECT_EQ(
      no_tls.err,
      "joule: error: --listen needs --tls-cert and --tls-key: the daemon speaks TLS on the network (plain "
      "TCP only on loopback, with --allow-plain-loopback)\n");
  const auto nobody =
      daemon({"--listen", "127.0.0.2:0", "--tls-cert", server.certificate, "--tls-key", server.key});
  EXPECT_EQ(nobody.exit_code, 2);
  EXPECT_NE(nobody.err.find("--listen needs --tokens FILE or --tls-client-ca FILE"), std::string::npos);
  const auto stray = daemon({"--tokens", tokens_file});
  EXPECT_EQ(stray.exit_code, 2);
  EXPECT_NE(stray.err.find("are for the network listener: give --listen HOST:PORT too"), std::string::npos);
  ::chmod(server.key.c_str(), 0644);
  const auto open_key = daemon({"--listen", "127.0.0.2:0", "--tls-cert", server.certificate, "--tls-key",
                                server.key, "--tokens", tokens_file});
  EXPECT_EQ(open_key.exit_code, 1);
  EXPECT_EQ(open_key.err,
            "joule: error: --tls-key: the TLS private key " + server.key +
                " is readable by every user (mode 0644): whoever reads it can pose as the daemon; `chown "
                "root: " +
                server.key + " && chmod 600 " + server.key + "`\n");
  ::chmod(server.key.c_str(), 0600);
  const std::string garbage = dir.write("garbage.pem", "-----BEGIN CERTIFICATE-----\nnot base64\n");
  const auto malformed = daemon(
      {"--listen", "127.0.0.2:0", "--tls-cert", garbage, "--tls-key", server.key, "--tokens", tokens_file});
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_NE(
      malformed.err.find("joule: error: --tls-cert/--tls-key/--tls-client-ca: cannot use the certificate " +
                         garbage + ": "),
      std::string::npos)
      << malformed.err;
  const std::string bad_tokens = write_private("bad-tokens", "trainer read short\n");
  const auto unparsed = daemon({"--listen", "127.0.0.2:0", "--tls-cert", server.certificate, "--tls-key",
                                server.key, "--tokens", bad_tokens});
  EXPECT_EQ(unparsed.exit_code, 1);
  EXPECT_NE(unparsed.err.find("--tokens: " + bad_tokens + ":1: the token of trainer has 5 characters"),
            std::string::npos)
      << unparsed.err;
  for (const auto& result : {plain_everywhere, no_tls, nobody, stray, open_key, malformed, unparsed}) {
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
}

}  // namespace
}  // namespace joule::test
