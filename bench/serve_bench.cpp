// SPDX-License-Identifier: Apache-2.0
// serve_bench: throughput and latency of the batch-size optimizer service under concurrent clients on
// loopback. Each client thread runs trials as Zeus's client does (next batch size, a report per epoch until
// the server says stop, end trial), with a request id per call; several clients share each job.
//
//   serve_bench [--db URL] [--server URL] [--clients 64] [--jobs 16] [--duration-s 10] [--threads N]
//
// Without --server it serves --db (default: SQLite in a temporary directory) in this process on a free port.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "joule/server/client.hpp"
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
  int64_t errors = 0;
  std::string first_error;
};

void run_client(const std::string& url, const std::string& job_id, Clock::time_point deadline,
                ClientStats& stats) {
  auto client = joule::server::Client::connect(url);
  if (!client) {
    ++stats.errors;
    stats.first_error = client.error().message();
    return;
  }
  const auto timed = [&](auto&& call) {
    const auto started = Clock::now();
    auto result = call();
    stats.latencies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - started).count());
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
    } else {
      std::cerr << "serve_bench: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (options.clients < 1 || options.jobs < 1 || !(options.duration_s > 0)) {
    std::cerr << "serve_bench: --clients, --jobs and --duration-s must be positive\n";
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
  std::string url = options.server;
  std::string store_description = "external server";
  if (url.empty()) {
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
  auto admin = joule::server::Client::connect(url);
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

  std::vector<ClientStats> stats(static_cast<size_t>(options.clients));
  std::vector<std::thread> threads;
  const auto started = Clock::now();
  const auto deadline = started + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options.duration_s));
  for (int i = 0; i < options.clients; ++i) {
    threads.emplace_back(run_client, url, jobs[static_cast<size_t>(i % options.jobs)], deadline,
                         std::ref(stats[static_cast<size_t>(i)]));
  }
  for (auto& thread : threads) {
    thread.join();
  }
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - started).count();

  std::vector<double> latencies;
  int64_t errors = 0;
  std::string first_error;
  for (const auto& client : stats) {
    latencies.insert(latencies.end(), client.latencies_ms.begin(), client.latencies_ms.end());
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
  if (errors > 0) {
    std::cout << "  first error: " << first_error << "\n";
  }
  if (http) {
    http->stop();
  }
  if (!temporary.empty()) {
    std::filesystem::remove_all(temporary);
  }
  return errors > 0 ? 1 : 0;
}
