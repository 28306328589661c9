// SPDX-License-Identifier: Apache-2.0
// daemon_bench: `joule daemon` under many clients streaming power (issue 11 §6). It starts the real binary on
// simulated GPUs as a child process, connects N raw protocol clients (one thread each), has each stream the
// power of every GPU and send a `power` request every --request-every-ms, and reports:
//
//   - throughput: lines the clients received per second (stream events and responses);
//   - latency: p50/p99/max round trip of the `power` requests, and p99 lag of the events (the time a client
//     read an event less the daemon's sample time; millisecond resolution, the protocol's);
//   - the daemon's resident memory (VmRSS) at start (idle), once every client streams, and at the end, and
//     its CPU time;
//   - drops: the samples the daemon skipped for each client, as its events tell them (`dropped`): none for a
//     client that keeps up; with --stalled N, N more clients that stream but read nothing until the end (they
//     must cost the others nothing), and what they are told once they read.
//
//   daemon_bench [--joule PATH] [--clients 100] [--duration-s 60] [--period-ms 10] [--sim 4xv100]
//                [--request-every-ms 100] [--energy 0|1] [--stalled 0] [--network unix|tls|plain]
//                [--handshakes 0]
//
// --network tls: the clients are remote ones, over TCP and TLS to the daemon's network listener on 127.0.0.2
// (a certificate authority, the daemon's certificate and a token made with Debian's openssl in the bench's
// folder), each authenticated by the token; plain: the same over plain TCP (--allow-plain-loopback).
// --handshakes N (tls): N more connections during the run, each a full TLS handshake, hello and close, from 8
// threads as fast as the daemon takes them: the streaming clients' round trips and lags are measured under
// it.
//
// Issue 25's figures: daemon_bench --clients 100 --sim 8xv100 --period-ms 100 --duration-s 60 --energy 1
// [--network tls] [--handshakes 1000]
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "joule/http/tls.hpp"

#include "process_stats.hpp"

extern char** environ;

namespace {

using SteadyClock = std::chrono::steady_clock;

struct Options {
  std::string joule = JOULE_BINARY;
  int clients = 100;
  double duration_s = 60;
  int period_ms = 10;
  std::string sim = "4xv100";
  int request_every_ms = 100;
  bool energy = false;           // the streams carry each GPU's energy counter
  int stalled = 0;               // clients that stream but read nothing until the end
  std::string network = "unix";  // unix, tls or plain
  int handshakes = 0;            // connections that only handshake, say hello and close, during the run
};

// Where and how the clients reach the daemon.
struct Endpoint {
  std::string socket;  // the Unix socket (network "unix")
  std::string host;    // the network listener's address
  int port = 0;
  std::shared_ptr<joule::http::TlsContext> tls;  // null: plain
  std::string token;                             // hello's token (network)
  bool network() const { return port != 0; }
};

[[noreturn]] void die(const std::string& message) {
  std::cerr << "daemon_bench: " << message << "\n";
  std::exit(1);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      die("missing value after " + flag);
    }
    const std::string value = argv[++i];
    try {
      if (flag == "--joule") {
        options.joule = value;
      } else if (flag == "--clients") {
        options.clients = std::stoi(value);
      } else if (flag == "--duration-s") {
        options.duration_s = std::stod(value);
      } else if (flag == "--period-ms") {
        options.period_ms = std::stoi(value);
      } else if (flag == "--sim") {
        options.sim = value;
      } else if (flag == "--request-every-ms") {
        options.request_every_ms = std::stoi(value);
      } else if (flag == "--energy") {
        options.energy = std::stoi(value) != 0;
      } else if (flag == "--stalled") {
        options.stalled = std::stoi(value);
      } else if (flag == "--network") {
        options.network = value;
      } else if (flag == "--handshakes") {
        options.handshakes = std::stoi(value);
      } else {
        die("unknown flag " + flag);
      }
    } catch (const std::exception&) {
      die(fmt::format("{} '{}' is not a number", flag, value));
    }
  }
  if (options.clients < 1 || options.duration_s <= 0 || options.period_ms < 10 ||
      options.request_every_ms < 1 || options.stalled < 0 || options.handshakes < 0) {
    die("--clients ≥ 1, --duration-s > 0, --period-ms ≥ 10, --request-every-ms ≥ 1, --stalled ≥ 0 and "
        "--handshakes ≥ 0 please");
  }
  if (options.network != "unix" && options.network != "tls" && options.network != "plain") {
    die("--network is unix, tls or plain");
  }
  if (options.handshakes > 0 && options.network != "tls") {
    die("--handshakes needs --network tls");
  }
  return options;
}

using joule::bench::cpu_seconds;
using joule::bench::status_kb;

int connect_tcp(const std::string& host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &address.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

int connect_to(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    sent += static_cast<size_t>(n);
  }
  return true;
}

// The integer after `"key":` in `line`, or nullopt. Enough for the daemon's own lines, and far cheaper than
// a JSON parse per event (the clients share the CPU with the daemon).
std::optional<int64_t> field(std::string_view line, std::string_view key) {
  const std::string needle = fmt::format("\"{}\":", key);
  const size_t at = line.find(needle);
  if (at == std::string_view::npos) {
    return std::nullopt;
  }
  const char* begin = line.data() + at + needle.size();
  char* end = nullptr;
  const long long value = std::strtoll(begin, &end, 10);
  if (end == begin) {
    return std::nullopt;
  }
  return value;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct ClientResult {
  int64_t lines = 0;
  int64_t events = 0;
  int64_t responses = 0;
  std::vector<double> latencies_ms;  // power request round trips
  std::vector<int64_t> lags_ms;      // event receive time less sample time
  int64_t dropped = 0;               // samples skipped, as the events told
  std::string error;
};

class Client {
 public:
  explicit Client(int fd, std::unique_ptr<joule::http::TlsStream> tls = nullptr)
      : fd_(fd), tls_(std::move(tls)) {}
  ~Client() {
    tls_.reset();
    ::close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Reads one line, waiting until `deadline`. @return false on timeout, EOF or error.
  bool read_line(SteadyClock::time_point deadline, std::string& line) {
    while (true) {
      if (const size_t newline = buffer_.find('\n', start_); newline != std::string::npos) {
        line.assign(buffer_, start_, newline - start_);
        start_ = newline + 1;
        if (start_ > 64 * 1024) {
          buffer_.erase(0, start_);
          start_ = 0;
        }
        return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (left.count() < 0) {
        return false;
      }
      if (!tls_ || tls_->pending() == 0) {
        pollfd entry{fd_, POLLIN, 0};
        const int ready = ::poll(&entry, 1, static_cast<int>(left.count()) + 1);
        if (ready < 0 && errno == EINTR) {
          continue;
        }
        if (ready <= 0) {
          return false;
        }
      }
      char chunk[16 * 1024];
      const ssize_t n = receive(chunk, sizeof chunk);
      if (n <= 0) {
        eof_ = true;
        return false;
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  bool eof() const { return eof_; }
  int fd() const { return fd_; }

  bool send_all(const std::string& data) {
    if (!tls_) {
      return ::send_all(fd_, data);
    }
    size_t sent = 0;
    while (sent < data.size()) {  // a blocking socket: each write completes or fails
      const auto io = tls_->write(data.data() + sent, data.size() - sent);
      if (!io || io->closed) {
        return false;
      }
      sent += io->bytes;
    }
    return true;
  }

 private:
  ssize_t receive(char* buffer, size_t size) {
    if (!tls_) {
      return ::recv(fd_, buffer, size, 0);
    }
    const auto io = tls_->read(buffer, size);
    if (!io || io->closed) {
      return 0;
    }
    return static_cast<ssize_t>(io->bytes);
  }

  int fd_;
  std::unique_ptr<joule::http::TlsStream> tls_;
  std::string buffer_;
  size_t start_ = 0;
  bool eof_ = false;
};

std::string stream_request(const Options& options) {
  return fmt::format(R"({{"id":2,"op":"stream_power","period_ms":{}{}}})"
                     "\n",
                     options.period_ms, options.energy ? R"(,"energy":true)" : "");
}

// Connects and says hello as `name`. @return the client, or nullptr with result.error set.
std::unique_ptr<Client> connect_and_greet(const Endpoint& endpoint, std::string_view name,
                                          ClientResult& result) {
  const int fd = endpoint.network() ? connect_tcp(endpoint.host, endpoint.port) : connect_to(endpoint.socket);
  if (fd < 0) {
    result.error = fmt::format("cannot connect: {}", std::strerror(errno));
    return nullptr;
  }
  std::unique_ptr<joule::http::TlsStream> tls;
  if (endpoint.tls) {
    auto stream = joule::http::TlsStream::client(endpoint.tls, fd, endpoint.host);
    const auto done = stream ? (*stream)->handshake()
                             : joule::Result<joule::http::TlsWait>(tl::make_unexpected(stream.error()));
    if (!done) {
      ::close(fd);
      result.error = "TLS: " + done.error().message();
      return nullptr;
    }
    tls = std::move(*stream);
  }
  auto client = std::make_unique<Client>(fd, std::move(tls));
  std::string line;
  const std::string token =
      endpoint.token.empty() ? std::string() : fmt::format(R"(,"token":"{}")", endpoint.token);
  if (!client->send_all(fmt::format(R"({{"id":1,"op":"hello","protocol":1,"client":"{}"{}}})"
                                    "\n",
                                    name, token)) ||
      !client->read_line(SteadyClock::now() + std::chrono::seconds(10), line) ||
      line.find(R"("ok":true)") == std::string::npos) {
    result.error = "hello refused or unanswered: " + line;
    return nullptr;
  }
  return client;
}

// A client that subscribes like the others, reads nothing until `end`, then reads for 2 s: the samples the
// daemon skipped for it are told in the events it then reads.
void run_stalled_client(const Options& options, const Endpoint& endpoint, SteadyClock::time_point start,
                        SteadyClock::time_point end, ClientResult& result) {
  auto client = connect_and_greet(endpoint, "daemon_bench stalled", result);
  if (!client) {
    return;
  }
  std::string line;
  std::this_thread::sleep_until(start);
  if (!client->send_all(stream_request(options))) {
    result.error = "cannot send stream_power";
    return;
  }
  std::this_thread::sleep_until(end);
  const auto drain_end = SteadyClock::now() + std::chrono::seconds(2);
  while (client->read_line(drain_end, line)) {
    ++result.lines;
    result.dropped += field(line, "dropped").value_or(0);
  }
}

void run_client(const Options& options, int index, const Endpoint& endpoint, std::atomic<int>& streaming,
                SteadyClock::time_point start, SteadyClock::time_point end, ClientResult& result) {
  auto connected = connect_and_greet(endpoint, "daemon_bench", result);
  if (!connected) {
    return;
  }
  Client& client = *connected;
  std::string line;
  // Everyone begins together, streams included: no backlog of samples from the connection phase.
  std::this_thread::sleep_until(start);
  if (!client.send_all(stream_request(options))) {
    result.error = "cannot send stream_power";
    return;
  }
  ++streaming;
  const auto every = std::chrono::milliseconds(options.request_every_ms);
  // Spread the requests of the clients over the interval.
  auto next_request = start + every * index / options.clients;
  uint64_t next_id = 3;
  std::optional<std::pair<uint64_t, SteadyClock::time_point>> pending;
  while (true) {
    const auto now = SteadyClock::now();
    if (now >= end) {
      break;
    }
    if (!pending && now >= next_request) {
      const uint64_t id = next_id++;
      if (!client.send_all(fmt::format(R"({{"id":{},"op":"power","gpu":0}})"
                                       "\n",
                                       id))) {
        result.error = "the daemon closed the connection";
        return;
      }
      pending = std::pair{id, SteadyClock::now()};
      next_request += every;
    }
    const auto wait_until = pending ? end : std::min(end, next_request);
    if (!client.read_line(wait_until, line)) {
      if (client.eof()) {
        result.error = "the daemon closed the connection";
        return;
      }
      continue;
    }
    const auto received = SteadyClock::now();
    ++result.lines;
    if (line.rfind(R"({"event")", 0) == 0) {
      ++result.events;
      if (const auto time_ms = field(line, "time_ms")) {
        result.lags_ms.push_back(unix_ms_now() - *time_ms);
      }
      result.dropped += field(line, "dropped").value_or(0);
      continue;
    }
    ++result.responses;
    if (pending && field(line, "id") == static_cast<int64_t>(pending->first)) {
      result.latencies_ms.push_back(
          std::chrono::duration<double, std::milli>(received - pending->second).count());
      pending.reset();
    }
  }
}

template <class T>
T percentile(std::vector<T>& values, double p) {
  if (values.empty()) {
    return T{};
  }
  std::sort(values.begin(), values.end());
  const auto index = static_cast<size_t>(std::ceil(p * static_cast<double>(values.size()))) - 1;
  return values[std::min(index, values.size() - 1)];
}

// Runs a shell command in `folder`; dies with its output if it fails.
void shell(const std::string& folder, const std::string& command) {
  const std::string line = fmt::format("cd '{}' && ( {} ) > openssl.log 2>&1", folder, command);
  if (std::system(line.c_str()) != 0) {
    std::ifstream log(folder + "/openssl.log");
    die(fmt::format("`{}` failed: {}", command, std::string(std::istreambuf_iterator<char>(log), {})));
  }
}

// A certificate authority and the daemon's certificate for 127.0.0.2, with Debian's openssl, and a token.
void make_pki(const std::string& folder) {
  const std::string curve = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
  shell(folder, "openssl req -x509 " + curve + " -days 2 -subj /CN=bench-ca -keyout ca.key -out ca.pem");
  shell(folder, "openssl req " + curve + " -subj /CN=node -keyout node.key -out node.csr");
  shell(folder, "printf 'subjectAltName=IP:127.0.0.2\\n' > node.ext");
  shell(folder,
        "openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile node.ext "
        "-out node.pem");
  shell(folder,
        "printf 'bench read %s\\n' \"$(openssl rand -hex 32)\" > tokens && chmod 600 tokens node.key ca.key");
}

// A free TCP port on `host` (bound, read, closed: the daemon binds it a moment later).
int free_port(const std::string& host) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  ::inet_pton(AF_INET, host.c_str(), &address.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    die("cannot find a free port on " + host);
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// Full TLS connections (handshake, hello, close) from `threads` threads until `count` are made or `end`.
struct HandshakeFlood {
  std::atomic<int> made{0};
  std::atomic<int> failed{0};
  std::string first_error;
  double seconds = 0;
};

void run_flood(const Endpoint& endpoint, int count, SteadyClock::time_point start,
               SteadyClock::time_point end, HandshakeFlood& flood) {
  std::this_thread::sleep_until(start);
  const auto began = SteadyClock::now();
  std::atomic<int> next{0};
  std::mutex error_mutex;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      while (next++ < count && SteadyClock::now() < end) {
        ClientResult result;
        if (connect_and_greet(endpoint, "daemon_bench handshake", result)) {
          ++flood.made;
        } else {
          ++flood.failed;
          std::lock_guard lock(error_mutex);
          if (flood.first_error.empty()) {
            flood.first_error = result.error;
          }
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  flood.seconds = std::chrono::duration<double>(SteadyClock::now() - began).count();
}

std::string mib(long kb) {
  return kb < 0 ? std::string("?") : fmt::format("{:.1f} MiB", static_cast<double>(kb) / 1024);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  // One descriptor per client here, one per connection in the daemon.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  char folder_template[] = "/tmp/joule-daemon-bench-XXXXXX";
  if (::mkdtemp(folder_template) == nullptr) {
    die("cannot create a temporary folder");
  }
  const std::string folder = folder_template;
  ::chmod(folder.c_str(), 0755);
  const std::string socket = folder + "/joule.sock";
  const std::string audit = folder + "/audit.log";
  const std::string connections = std::to_string(std::max(256, options.clients + options.stalled + 16));
  std::vector<std::string> args = {options.joule,       "--sim",    options.sim,   "daemon",
                                   "--socket",          socket,     "--audit-log", audit,
                                   "--max-connections", connections};
  Endpoint endpoint;
  endpoint.socket = socket;
  if (options.network != "unix") {
    endpoint.host = "127.0.0.2";
    endpoint.port = free_port(endpoint.host);
    make_pki(folder);
    std::ifstream tokens(folder + "/tokens");
    std::string name;
    std::string scope;
    tokens >> name >> scope >> endpoint.token;
    const std::string per_client = std::to_string(options.clients + options.stalled + 16);
    args.insert(args.end(), {"--listen", fmt::format("{}:{}", endpoint.host, endpoint.port), "--tokens",
                             folder + "/tokens", "--max-connections-per-user", per_client,
                             "--max-idle-connections-per-user", per_client});
    if (options.network == "tls") {
      args.insert(args.end(), {"--tls-cert", folder + "/node.pem", "--tls-key", folder + "/node.key"});
      auto context = joule::http::TlsContext::client({"", "", folder + "/ca.pem"});
      if (!context) {
        die(context.error().message());
      }
      endpoint.tls = *context;
    } else {
      args.emplace_back("--allow-plain-loopback");
    }
  }
  std::vector<char*> argv_daemon;
  for (auto& arg : args) {
    argv_daemon.push_back(arg.data());
  }
  argv_daemon.push_back(nullptr);
  pid_t daemon = 0;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (::posix_spawn(&daemon, args[0].c_str(), &actions, nullptr, argv_daemon.data(), environ) != 0) {
    die("cannot start " + options.joule);
  }
  posix_spawn_file_actions_destroy(&actions);
  // Serving once a connection succeeds.
  const auto ready_deadline = SteadyClock::now() + std::chrono::seconds(20);
  while (true) {
    const int probe = endpoint.network() ? connect_tcp(endpoint.host, endpoint.port) : connect_to(socket);
    if (probe >= 0) {
      ::close(probe);
      break;
    }
    int status = 0;
    if (::waitpid(daemon, &status, WNOHANG) == daemon) {
      die("the daemon exited before serving");
    }
    if (SteadyClock::now() > ready_deadline) {
      ::kill(daemon, SIGKILL);
      die("the daemon did not serve within 20 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const long rss_start_kb = status_kb(daemon, "VmRSS");

  std::atomic<int> streaming{0};
  const auto start = SteadyClock::now() + std::chrono::seconds(3);  // time to connect everyone first
  const auto end = start + std::chrono::duration_cast<SteadyClock::duration>(
                               std::chrono::duration<double>(options.duration_s));
  std::vector<ClientResult> results(static_cast<size_t>(options.clients));
  std::vector<std::thread> threads;
  threads.reserve(results.size());
  for (int index = 0; index < options.clients; ++index) {
    threads.emplace_back([&options, index, &endpoint, &streaming, start, end, &results] {
      run_client(options, index, endpoint, streaming, start, end, results[static_cast<size_t>(index)]);
    });
  }
  std::vector<ClientResult> stalled(static_cast<size_t>(options.stalled));
  for (auto& result : stalled) {
    threads.emplace_back([&options, &endpoint, start, end, &result] {
      run_stalled_client(options, endpoint, start, end, result);
    });
  }
  HandshakeFlood flood;
  if (options.handshakes > 0) {
    // A second into the run, so that the streams are steady when it begins.
    threads.emplace_back([&options, &endpoint, start, end, &flood] {
      run_flood(endpoint, options.handshakes, start + std::chrono::seconds(1), end, flood);
    });
  }
  std::this_thread::sleep_until(start + std::chrono::seconds(1));
  const long rss_streaming_kb = status_kb(daemon, "VmRSS");
  const double cpu_at_start = cpu_seconds(daemon);
  std::this_thread::sleep_until(end);
  const double cpu_at_end = cpu_seconds(daemon);
  const long rss_end_kb = status_kb(daemon, "VmRSS");
  for (auto& thread : threads) {
    thread.join();
  }
  const long peak_kb = status_kb(daemon, "VmHWM");  // (after the stalled clients' backlogs)
  ::kill(daemon, SIGTERM);
  int status = 0;
  ::waitpid(daemon, &status, 0);
  std::filesystem::remove_all(folder);

  ClientResult total;
  int failed = 0;
  std::string first_error;
  for (auto& result : results) {
    if (!result.error.empty()) {
      ++failed;
      if (first_error.empty()) {
        first_error = result.error;
      }
    }
    total.lines += result.lines;
    total.events += result.events;
    total.responses += result.responses;
    total.latencies_ms.insert(total.latencies_ms.end(), result.latencies_ms.begin(),
                              result.latencies_ms.end());
    total.lags_ms.insert(total.lags_ms.end(), result.lags_ms.begin(), result.lags_ms.end());
    total.dropped += result.dropped;
  }
  int64_t stalled_dropped = 0;
  for (const auto& result : stalled) {
    if (!result.error.empty()) {
      ++failed;
      if (first_error.empty()) {
        first_error = result.error;
      }
    }
    stalled_dropped += result.dropped;
  }
  const double seconds = options.duration_s;
  const int gpus = std::atoi(options.sim.c_str()) > 0 ? std::atoi(options.sim.c_str()) : 1;
  const double expected_events = static_cast<double>(options.clients) * gpus * 1000.0 / options.period_ms;
  std::cout << fmt::format(
      "daemon_bench: {} clients ({} streaming{}), GPUs {}, stream period {} ms, a power request every {} ms, "
      "{} s\n"
      "  throughput: {:.0f} messages/s received ({:.0f} events/s of {:.0f} scheduled, {:.0f} responses/s)\n"
      "  power request round trip: p50 {:.3f} ms  p99 {:.3f} ms  max {:.3f} ms ({} requests)\n"
      "  event lag (read time - sample time, 1 ms resolution): p50 {} ms  p99 {} ms  max {} ms\n"
      "  daemon RSS: {} at start (idle), {} with every client streaming, {} at the end (peak {})\n"
      "  daemon CPU: {:.0f}% of one core while streaming\n"
      "  drops: {} samples skipped for the {} reading clients; {} told to the {} stalled clients once they "
      "read\n",
      options.clients, streaming.load(),
      options.network == "unix" ? std::string(", Unix socket")
                                : fmt::format(", {} to {}:{}", options.network == "tls" ? "TLS" : "plain TCP",
                                              endpoint.host, endpoint.port),
      options.sim, options.period_ms, options.request_every_ms, seconds,
      static_cast<double>(total.lines) / seconds, static_cast<double>(total.events) / seconds,
      expected_events, static_cast<double>(total.responses) / seconds, percentile(total.latencies_ms, 0.50),
      percentile(total.latencies_ms, 0.99), percentile(total.latencies_ms, 1.0), total.latencies_ms.size(),
      percentile(total.lags_ms, 0.50), percentile(total.lags_ms, 0.99), percentile(total.lags_ms, 1.0),
      mib(rss_start_kb), mib(rss_streaming_kb), mib(rss_end_kb), mib(peak_kb),
      100 * (cpu_at_end - cpu_at_start) / seconds, total.dropped, options.clients, stalled_dropped,
      options.stalled);
  if (options.handshakes > 0) {
    std::cout << fmt::format(
        "  TLS handshake flood: {} connections made (handshake, hello, close) in {:.1f} s ({:.0f}/s) from 8 "
        "threads, {} refused or failed{}\n",
        flood.made.load(), flood.seconds, flood.seconds > 0 ? flood.made.load() / flood.seconds : 0.0,
        flood.failed.load(),
        flood.first_error.empty() ? std::string() : " (the first: " + flood.first_error + ")");
  }
  if (failed > 0) {
    std::cout << fmt::format("  {} clients failed; the first: {}\n", failed, first_error);
    return 1;
  }
  return 0;
}
