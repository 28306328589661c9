// SPDX-License-Identifier: Apache-2.0
// serve_bench: throughput and latency of the batch-size optimizer service under concurrent clients on
// loopback. Each client thread runs trials as Zeus's client does (next batch size, a report per epoch until
// the server says stop, end trial), with a request id per call; several clients share each job, and every
// job's history grows for the whole run.
//
//   serve_bench [--db URL] [--server URL | --serve-binary PATH] [--clients 64] [--jobs 16] [--duration-s 10]
//               [--threads N] [--window-s 5] [--slow-clients N]
//
// Without --server it serves --db (default: SQLite in a temporary directory): in this process, or with
// --serve-binary as a `joule serve` child whose resident memory (RSS) it reports at the start and the end.
// Throughput is also given per --window-s window, with the last and the whole run against the first window
// (a request cost that grows with history shows as a falling ratio). --slow-clients N holds N connections
// that send a header byte at a time (reopened when the server closes them) while a probe opens a fresh
// connection every 0.5 s and times GET /healthz.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "joule/client/client.hpp"
#include "joule/server/http_server.hpp"
#include "joule/server/service.hpp"
#include "joule/store/store.hpp"

namespace {

namespace bso = joule::optimize::batch_size;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string db;
  std::string server;
  int clients = 64;
  int jobs = 16;
  double duration_s = 10;
  size_t threads = joule::server::kDefaultThreads;
  std::string serve_binary;
  double window_s = 5;
  int slow_clients = 0;
};

// `joule serve` as a child on a free loopback port.
class ServeChild {
 public:
  ServeChild(const std::string& binary, const std::string& db, size_t threads) {
    int out[2];
    if (::pipe(out) != 0) {
      throw std::runtime_error("pipe failed");
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      const std::string threads_text = std::to_string(threads);
      ::execl(binary.c_str(), binary.c_str(), "serve", "--db", db.c_str(), "--listen", "127.0.0.1:0",
              "--threads", threads_text.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    std::string text;
    char buffer[256];
    static const std::regex kListening(R"(listening on http://127\.0\.0\.1:(\d+))");
    std::smatch match;
    while (!std::regex_search(text, match, kListening)) {
      const ssize_t got = ::read(out[0], buffer, sizeof buffer);
      if (got <= 0) {
        throw std::runtime_error("joule serve did not start: " + text);
      }
      text.append(buffer, static_cast<size_t>(got));
    }
    port_ = std::stoi(match[1].str());
    out_ = out[0];
  }
  ~ServeChild() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    ::close(out_);
  }
  ServeChild(const ServeChild&) = delete;
  ServeChild& operator=(const ServeChild&) = delete;
  int port() const { return port_; }
  // @return the child's resident set and its peak, in MiB.
  std::pair<double, double> rss_mib() const {
    std::ifstream status(fmt::format("/proc/{}/status", pid_));
    std::string line;
    double rss = 0;
    double peak = 0;
    while (std::getline(status, line)) {
      if (line.starts_with("VmRSS:")) {
        rss = std::stod(line.substr(6)) / 1024;
      } else if (line.starts_with("VmHWM:")) {
        peak = std::stod(line.substr(6)) / 1024;
      }
    }
    return {rss, peak};
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int port_ = 0;
};

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// N connections that trickle a request header a byte per second (reopened when closed), and a probe that
// times a fresh client's GET /healthz every 0.5 s.
class SlowClients {
 public:
  SlowClients(int port, int count) : port_(port), fds_(static_cast<size_t>(count), -1) {
    for (auto& fd : fds_) {
      fd = open_one();
    }
    dribbler_ = std::thread([this] {
      while (!stop_) {
        for (auto& fd : fds_) {
          if (fd < 0 || ::send(fd, "x", 1, MSG_NOSIGNAL) != 1) {
            if (fd >= 0) {
              ::close(fd);
              ++reopened_;
            }
            fd = open_one();
          }
        }
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    });
    prober_ = std::thread([this] {
      while (!stop_) {
        const auto started = Clock::now();
        const int fd = connect_loopback(port_);
        bool ok = false;
        if (fd >= 0) {
          const timeval timeout{5, 0};  // a probe not answered in 5 s counts as failed
          ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
          const std::string request = "GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
          ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
          char buffer[512];
          ok = ::recv(fd, buffer, sizeof buffer, 0) > 12 && std::string_view(buffer, 12) == "HTTP/1.1 200";
          ::close(fd);
        }
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
        {
          std::lock_guard lock(mutex_);
          probes_ms_.push_back(ok ? ms : -1);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
    });
  }
  ~SlowClients() {
    stop_ = true;
    dribbler_.join();
    prober_.join();
    for (const int fd : fds_) {
      if (fd >= 0) {
        ::close(fd);
      }
    }
  }
  SlowClients(const SlowClients&) = delete;
  SlowClients& operator=(const SlowClients&) = delete;

  std::string summary() {
    std::lock_guard lock(mutex_);
    std::vector<double> answered;
    int64_t failed = 0;
    for (const double ms : probes_ms_) {
      if (ms < 0) {
        ++failed;
      } else {
        answered.push_back(ms);
      }
    }
    std::sort(answered.begin(), answered.end());
    return fmt::format(
        "  slow clients {} (reopened {} times); fresh-client probes {}: failed {}, median {:.1f} ms, "
        "max {:.1f} ms\n",
        fds_.size(), reopened_.load(), probes_ms_.size(), failed,
        answered.empty() ? 0.0 : answered[answered.size() / 2], answered.empty() ? 0.0 : answered.back());
  }

 private:
  int open_one() {
    const int fd = connect_loopback(port_);
    if (fd >= 0) {
      const std::string start = "GET /healthz HTTP/1.1\r\nHost: slow\r\nX-Slow: ";
      ::send(fd, start.data(), start.size(), MSG_NOSIGNAL);
    }
    return fd;
  }

  int port_;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> reopened_{0};
  std::mutex mutex_;
  std::vector<double> probes_ms_;
  std::thread dribbler_;
  std::thread prober_;
};

// Batch size b converges after a few epochs; the largest never does (within max_epochs).
bso::TrainingResult epoch_result(const bso::TrialId& trial, int64_t epoch) {
  const int64_t converge = trial.batch_size >= 128 ? 1000 : 2 + trial.batch_size / 16;
  const double epoch_s = (40.0 / static_cast<double>(trial.batch_size) + 1.0) *
                         (1.0 + 0.05 * std::sin(static_cast<double>(trial.trial_number)));
  bso::TrainingResult result;
  result.job_id = trial.job_id;
  result.batch_size = trial.batch_size;
  result.trial_number = trial.trial_number;
  result.current_epoch = epoch;
  result.time_s = static_cast<double>(epoch) * epoch_s;
  result.energy_j = result.time_s * 200;
  result.metric = 0.5 * static_cast<double>(epoch) / static_cast<double>(converge);
  return result;
}

struct ClientStats {
  std::vector<double> latencies_ms;
  std::vector<float> completed_s;  // when each request completed, s after the start
  int64_t errors = 0;
  std::string first_error;
};

void run_client(const std::string& url, const std::string& job_id, Clock::time_point run_started,
                Clock::time_point deadline, ClientStats& stats) {
  // A server that stops answering (the old design under slow clients) must end the run, not hang it.
  joule::client::ClientOptions client_options;
  client_options.timeout = std::chrono::seconds(10);
  client_options.attempts = 2;
  auto client = joule::client::Client::connect(url, client_options);
  if (!client) {
    ++stats.errors;
    stats.first_error = client.error().message();
    return;
  }
  const auto timed = [&](auto&& call) {
    const auto started = Clock::now();
    auto result = call();
    const auto done = Clock::now();
    stats.latencies_ms.push_back(std::chrono::duration<double, std::milli>(done - started).count());
    stats.completed_s.push_back(std::chrono::duration<float>(done - run_started).count());
    if (!result) {
      if (stats.errors++ == 0) {
        stats.first_error = result.error().message();
      }
    }
    return result;
  };
  while (Clock::now() < deadline) {
    auto trial = timed([&] { return client->next_batch_size(job_id); });
    if (!trial) {
      continue;
    }
    for (int64_t epoch = 1; Clock::now() < deadline; ++epoch) {
      auto response = timed([&] { return client->report(epoch_result(*trial, epoch)); });
      if (!response || response->stop_train) {
        break;
      }
    }
    timed([&] { return client->end_trial(*trial); });
  }
}

int parse_options(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "serve_bench: " << flag << " needs a value\n";
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--db") {
      options.db = value;
    } else if (flag == "--server") {
      options.server = value;
    } else if (flag == "--clients") {
      options.clients = std::stoi(value);
    } else if (flag == "--jobs") {
      options.jobs = std::stoi(value);
    } else if (flag == "--duration-s") {
      options.duration_s = std::stod(value);
    } else if (flag == "--threads") {
      options.threads = std::stoul(value);
    } else if (flag == "--serve-binary") {
      options.serve_binary = value;
    } else if (flag == "--window-s") {
      options.window_s = std::stod(value);
    } else if (flag == "--slow-clients") {
      options.slow_clients = std::stoi(value);
    } else {
      std::cerr << "serve_bench: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (options.clients < 1 || options.jobs < 1 || !(options.duration_s > 0) || !(options.window_s > 0) ||
      options.slow_clients < 0) {
    std::cerr << "serve_bench: --clients, --jobs, --duration-s and --window-s must be positive\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (const int status = parse_options(argc, argv, options); status != 0) {
    return status;
  }
  std::filesystem::path temporary;
  std::unique_ptr<joule::server::Service> service;
  std::unique_ptr<joule::server::HttpServer> http;
  std::unique_ptr<ServeChild> child;
  std::string url = options.server;
  std::string store_description = "external server";
  // Client sockets, slow connections and (in process) the server's: room for all of them.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (url.empty() && !options.serve_binary.empty()) {
    if (options.db.empty()) {
      temporary = std::filesystem::temp_directory_path() / fmt::format("serve-bench-{}", ::getpid());
      std::filesystem::create_directories(temporary);
      options.db = "sqlite:" + (temporary / "bench.db").string();
    }
    child = std::make_unique<ServeChild>(options.serve_binary, options.db, options.threads);
    url = fmt::format("http://127.0.0.1:{}", child->port());
    store_description = joule::store::mask_password(options.db) + ", joule serve child";
  } else if (url.empty()) {
    if (options.db.empty()) {
      temporary = std::filesystem::temp_directory_path() / fmt::format("serve-bench-{}", ::getpid());
      std::filesystem::create_directories(temporary);
      options.db = "sqlite:" + (temporary / "bench.db").string();
    }
    auto opened = joule::store::open_store(options.db);
    if (!opened) {
      std::cerr << "serve_bench: " << opened.error().message() << "\n";
      return 1;
    }
    store_description = (*opened)->description();
    service =
        std::make_unique<joule::server::Service>(std::shared_ptr<joule::store::Store>(std::move(*opened)));
    joule::server::HttpServerOptions server_options;
    server_options.port = 0;
    server_options.threads = options.threads;
    http = std::make_unique<joule::server::HttpServer>(*service, server_options);
    if (auto started = http->start(); !started) {
      std::cerr << "serve_bench: " << started.error().message() << "\n";
      return 1;
    }
    url = fmt::format("http://127.0.0.1:{}", http->port());
  }

  // One job per group of clients, registered up front (Zeus's defaults; an unseeded bandit).
  auto admin = joule::client::Client::connect(url);
  if (!admin) {
    std::cerr << "serve_bench: " << admin.error().message() << "\n";
    return 1;
  }
  std::vector<std::string> jobs;
  for (int i = 0; i < options.jobs; ++i) {
    bso::JobSpec spec;
    spec.job_id_prefix = "bench";
    spec.batch_sizes = {16, 32, 64, 128};
    spec.default_batch_size = 64;
    spec.max_epochs = 8;
    auto registered = admin->register_job(spec, {300.0, 1, "NVIDIA A40"});
    if (!registered) {
      std::cerr << "serve_bench: " << registered.error().message() << "\n";
      return 1;
    }
    jobs.push_back(*registered->spec.job_id);
  }

  const auto rss_start = child ? child->rss_mib() : std::pair<double, double>{0, 0};
  std::unique_ptr<SlowClients> slow;
  if (options.slow_clients > 0) {
    const int port = std::stoi(url.substr(url.rfind(':') + 1));
    slow = std::make_unique<SlowClients>(port, options.slow_clients);
  }
  std::vector<ClientStats> stats(static_cast<size_t>(options.clients));
  std::vector<std::thread> threads;
  const auto started = Clock::now();
  const auto deadline = started + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options.duration_s));
  for (int i = 0; i < options.clients; ++i) {
    threads.emplace_back(run_client, url, jobs[static_cast<size_t>(i % options.jobs)], started, deadline,
                         std::ref(stats[static_cast<size_t>(i)]));
  }
  for (auto& thread : threads) {
    thread.join();
  }
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - started).count();

  std::vector<double> latencies;
  int64_t errors = 0;
  std::string first_error;
  const auto windows = static_cast<size_t>(std::ceil(options.duration_s / options.window_s));
  std::vector<int64_t> per_window(std::max<size_t>(windows, 1), 0);
  for (const auto& client : stats) {
    latencies.insert(latencies.end(), client.latencies_ms.begin(), client.latencies_ms.end());
    for (const float at : client.completed_s) {
      ++per_window[std::min(per_window.size() - 1, static_cast<size_t>(at / options.window_s))];
    }
    errors += client.errors;
    if (first_error.empty()) {
      first_error = client.first_error;
    }
  }
  std::sort(latencies.begin(), latencies.end());
  const auto percentile = [&](double p) {
    if (latencies.empty()) {
      return 0.0;
    }
    const auto index = static_cast<size_t>(std::ceil(p * static_cast<double>(latencies.size()))) - 1;
    return latencies[std::min(index, latencies.size() - 1)];
  };
  std::cout << fmt::format(
      "serve_bench: {} clients on {} jobs for {:.1f} s against {} ({})\n"
      "  requests {}  errors {}\n"
      "  throughput {:.0f} requests/s\n"
      "  latency p50 {:.2f} ms  p99 {:.2f} ms  max {:.2f} ms\n",
      options.clients, options.jobs, elapsed_s, url, store_description, latencies.size(), errors,
      static_cast<double>(latencies.size()) / elapsed_s, percentile(0.50), percentile(0.99),
      latencies.empty() ? 0.0 : latencies.back());
  std::string series;
  for (const int64_t count : per_window) {
    series += fmt::format(" {:.0f}", static_cast<double>(count) / options.window_s);
  }
  const double first = static_cast<double>(per_window.front()) / options.window_s;
  const double last = static_cast<double>(per_window.back()) / options.window_s;
  std::cout << fmt::format(
      "  requests/s per {:g} s window:{}\n  last window / first: {:.0f}%  whole run / first: {:.0f}%\n",
      options.window_s, series, first > 0 ? 100 * last / first : 0.0,
      first > 0 ? 100 * (static_cast<double>(latencies.size()) / elapsed_s) / first : 0.0);
  if (child) {
    const auto rss_end = child->rss_mib();
    std::cout << fmt::format("  server RSS: start {:.1f} MiB, end {:.1f} MiB, peak {:.1f} MiB\n",
                             rss_start.first, rss_end.first, rss_end.second);
  }
  if (slow) {
    std::cout << slow->summary();
    slow.reset();
  }
  if (errors > 0) {
    std::cout << "  first error: " << first_error << "\n";
  }
  child.reset();
  if (http) {
    http->stop();
  }
  if (!temporary.empty()) {
    std::filesystem::remove_all(temporary);
  }
  return errors > 0 ? 1 : 0;
}
