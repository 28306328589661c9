// SPDX-License-Identifier: Apache-2.0
// live_scale_bench: one `joule serve --threads 16` serving live Perseus jobs of thousands of ranks
// (DESIGN.md: "a live Perseus job of 4,096 ranks on 16 worker threads"). It starts the built `joule serve` on
// SQLite (or
// --db URL), registers --jobs jobs of --stages × --pipelines ranks each, and runs every rank as a client of
// its own — one keep-alive connection that long-polls GET /schedule and posts its result, as joule's client
// does — all driven by one thread here (Boost.Beast, asynchronous). The ranks report what the example
// profile's stages would measure at the scheduled clocks (data/perseus), so the job warms up, profiles,
// is planned by the server's planner thread and runs --planned-rounds planned rounds.
//
// Printed: the registration time, each round's wall time (from the previous round's last schedule to this
// one's), the requests per second, any non-200 answer (the bench fails on one), and the server's memory
// (VmRSS at start, peak VmHWM, end) and CPU seconds. Not run by `make test`; docs/perseus-live.md quotes it.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "joule/plan/pipeline.hpp"

#include "process_stats.hpp"

extern char** environ;

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string joule = JOULE_BINARY;
  std::string db;
  int stages = 8;
  int pipelines = 512;
  int jobs = 1;
  int microbatches = 8;
  int planned_rounds = 3;
  int threads = 16;
};

[[noreturn]] void die(const std::string& message) {
  std::cerr << "live_scale_bench: " << message << "\n";
  std::exit(1);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      die("usage: live_scale_bench [--joule PATH] [--db URL] [--stages 8] [--pipelines 512] [--jobs 1] "
          "[--microbatches 8] [--planned-rounds 3] [--threads 16]");
    }
    const std::string value = argv[++i];
    if (flag == "--joule") {
      options.joule = value;
    } else if (flag == "--db") {
      options.db = value;
    } else if (flag == "--stages") {
      options.stages = std::stoi(value);
    } else if (flag == "--pipelines") {
      options.pipelines = std::stoi(value);
    } else if (flag == "--jobs") {
      options.jobs = std::stoi(value);
    } else if (flag == "--microbatches") {
      options.microbatches = std::stoi(value);
    } else if (flag == "--planned-rounds") {
      options.planned_rounds = std::stoi(value);
    } else if (flag == "--threads") {
      options.threads = std::stoi(value);
    } else {
      die("unknown flag " + flag);
    }
  }
  return options;
}

using joule::bench::cpu_seconds;
using joule::bench::status_kb;

// What a stage measures at a clock: the example profile's row at or below it (stages beyond its four wrap).
struct Truth {
  joule::plan::Profile profile =
      *joule::plan::Profile::read(JOULE_SOURCE_DIR "/data/perseus/example_s4_m8_profile.csv");

  joule::plan::ProfileOption at(int stage, const std::string& name, uint32_t mhz) const {
    const auto& options =
        profile.options(stage % profile.stage_count(), *joule::plan::parse_instruction(name));
    for (const auto& option : options) {
      if (option.frequency_mhz <= mhz) {
        return option;
      }
    }
    return options.back();
  }

  json result(const json& schedule, int stage) const {
    const int iterations = schedule.at("iterations").get<int>();
    std::map<std::string, std::vector<double>> times;
    std::map<std::string, std::vector<double>> energies;
    double busy_s = 0;
    double busy_j = 0;
    for (const json& entry : schedule.at("frequencies")) {
      const auto name = entry.at(0).get<std::string>();
      const auto option = at(stage, name, entry.at(1).get<uint32_t>());
      times[name].push_back(option.time_s);
      energies[name].push_back(option.energy_j);
      busy_s += option.time_s;
      busy_j += option.energy_j;
    }
    json time_breakdown = json::object();
    json energy_breakdown = json::object();
    for (const auto& [name, values] : times) {
      time_breakdown[name] = std::vector<std::vector<double>>(static_cast<size_t>(iterations), values);
      energy_breakdown[name] =
          std::vector<std::vector<double>>(static_cast<size_t>(iterations), energies[name]);
    }
    return {
        {"rank", schedule.at("rank")},
        {"round", schedule.at("round")},
        {"iter_time", std::vector<double>(static_cast<size_t>(iterations), busy_s * 1.25)},
        {"iter_energy", std::vector<double>(static_cast<size_t>(iterations), busy_j + busy_s * 0.25 * 60)},
        {"time_breakdown", time_breakdown},
        {"energy_breakdown", energy_breakdown}};
  }
};

struct Stats {
  uint64_t requests = 0;
  uint64_t failures = 0;
  std::string first_failure;
  // Per (job, round): when its last rank got its schedule.
  std::map<std::pair<size_t, int64_t>, Clock::time_point> round_done;
  std::map<std::pair<size_t, int64_t>, int> round_answers;
  std::map<std::pair<size_t, int64_t>, std::string> round_phase;
  size_t ranks_done = 0;
};

// One rank: a keep-alive connection that registers, then asks for schedules and reports until its job has
// run the planned rounds.
class Rank : public std::enable_shared_from_this<Rank> {
 public:
  Rank(asio::io_context& io, const tcp::endpoint& server, std::string job, size_t job_index, int rank,
       int stages, int pipelines_per_job, int planned_rounds, const Truth& truth, Stats& stats,
       const json& clocks)
      : stream_(io),
        server_(server),
        job_(std::move(job)),
        job_index_(job_index),
        rank_(rank),
        stage_(rank % stages),
        pipeline_(rank / stages),
        planned_rounds_(planned_rounds),
        truth_(truth),
        stats_(stats),
        clocks_(clocks) {
    (void)pipelines_per_job;
  }

  void start() {
    stream_.async_connect(server_, [self = shared_from_this()](const beast::error_code& error) {
      if (error) {
        self->failed("connect: " + error.message());
        return;
      }
      self->send(http::verb::post, "/register_rank/" + self->job_,
                 json{{"rank", self->rank_},
                      {"dp_rank", self->pipeline_},
                      {"pp_rank", self->stage_},
                      {"tp_rank", 0},
                      {"available_frequencies", self->clocks_}}
                     .dump(),
                 [self](const json&) { self->ask(); });
    });
  }

 private:
  void ask() {
    send(http::verb::get, fmt::format("/schedule/{}?rank={}&wait_s=600", job_, rank_), "",
         [self = shared_from_this()](const json& schedule) { self->on_schedule(schedule); });
  }

  void on_schedule(const json& schedule) {
    const int64_t round = schedule.at("round").get<int64_t>();
    const std::string phase = schedule.at("phase").get<std::string>();
    const auto key = std::make_pair(job_index_, round);
    stats_.round_done[key] = Clock::now();
    ++stats_.round_answers[key];
    stats_.round_phase[key] = phase;
    if (phase == "planned" && ++planned_ > planned_rounds_) {
      ++stats_.ranks_done;
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
      return;
    }
    send(http::verb::post, "/result/" + job_, truth_.result(schedule, stage_).dump(),
         [self = shared_from_this()](const json&) { self->ask(); });
  }

  template <class Then>
  void send(http::verb verb, const std::string& target, std::string body, Then then) {
    request_ = {};
    request_.method(verb);
    request_.target(target);
    request_.version(11);
    request_.set(http::field::host, "joule");
    request_.keep_alive(true);
    if (verb == http::verb::post) {
      request_.set(http::field::content_type, "application/json");
      request_.body() = std::move(body);
    }
    request_.prepare_payload();
    ++stats_.requests;
    http::async_write(
        stream_, request_, [self = shared_from_this(), then, target](const beast::error_code& error, size_t) {
          if (error) {
            self->failed(target + ": write: " + error.message());
            return;
          }
          self->response_ = {};
          self->parser_.emplace();
          self->parser_->body_limit(64 << 20);
          http::async_read(self->stream_, self->buffer_, *self->parser_,
                           [self, then, target](const beast::error_code& read_error, size_t) {
                             if (read_error) {
                               self->failed(target + ": read: " + read_error.message());
                               return;
                             }
                             const auto& response = self->parser_->get();
                             if (response.result_int() != 200) {
                               self->failed(fmt::format("{}: HTTP {}: {}", target, response.result_int(),
                                                        response.body()));
                               return;
                             }
                             then(json::parse(response.body()));
                           });
        });
  }

  void failed(const std::string& why) {
    if (stats_.failures++ == 0) {
      stats_.first_failure = fmt::format("rank {}: {}", rank_, why);
    }
    ++stats_.ranks_done;
  }

  beast::tcp_stream stream_;
  tcp::endpoint server_;
  std::string job_;
  size_t job_index_;
  int rank_;
  int stage_;
  int pipeline_;
  int planned_rounds_;
  int planned_ = 0;
  const Truth& truth_;
  Stats& stats_;
  const json& clocks_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  std::optional<http::response_parser<http::string_body>> parser_;
};

json blocking_post(const tcp::endpoint& server, const std::string& target, const json& body) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.connect(server);
  http::request<http::string_body> request(http::verb::post, target, 11);
  request.set(http::field::host, "joule");
  request.set(http::field::content_type, "application/json");
  request.body() = body.dump();
  request.prepare_payload();
  http::write(stream, request);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(stream, buffer, response);
  if (response.result_int() != 200) {
    die(fmt::format("POST {}: HTTP {}: {}", target, response.result_int(), response.body()));
  }
  return json::parse(response.body());
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  const int ranks_per_job = options.stages * options.pipelines;
  const int total = ranks_per_job * options.jobs;
  char folder_template[] = "/tmp/joule-live-bench-XXXXXX";
  if (::mkdtemp(folder_template) == nullptr) {
    die("cannot create a temporary folder");
  }
  const std::string folder = folder_template;
  const std::string db = options.db.empty() ? "sqlite:" + folder + "/live.db" : options.db;
  const std::string port_file = folder + "/serve.out";
  std::vector<std::string> args = {options.joule,
                                   "serve",
                                   "--db",
                                   db,
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--threads",
                                   std::to_string(options.threads),
                                   "--max-connections",
                                   std::to_string(total + 256),
                                   "--pfo-registrations-per-minute",
                                   "0"};
  std::vector<char*> argv_serve;
  for (auto& arg : args) {
    argv_serve.push_back(arg.data());
  }
  argv_serve.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, port_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, (folder + "/serve.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t serve = 0;
  if (::posix_spawn(&serve, args[0].c_str(), &actions, nullptr, argv_serve.data(), environ) != 0) {
    die("cannot start " + options.joule);
  }
  int port = 0;
  for (int attempt = 0; attempt < 200 && port == 0; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(port_file);
    std::string line;
    if (std::getline(in, line)) {
      const auto at = line.find("127.0.0.1:");
      if (at != std::string::npos) {
        port = std::stoi(line.substr(at + 10));
      }
    }
  }
  if (port == 0) {
    die("joule serve did not start (see " + folder + "/serve.log)");
  }
  const tcp::endpoint server(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port));
  const long rss_start_kb = status_kb(serve, "VmRSS");
  const double cpu_start_s = cpu_seconds(serve);

  std::vector<std::string> jobs;
  for (int j = 0; j < options.jobs; ++j) {
    jobs.push_back(blocking_post(server, "/register_job",
                                 {{"job_id", ""},
                                  {"pp_degree", options.stages},
                                  {"dp_degree", options.pipelines},
                                  {"tp_degree", 1},
                                  {"world_size", ranks_per_job},
                                  {"num_microbatches", options.microbatches}})
                       .get<std::string>());
  }
  json clocks = json::array();
  for (uint32_t mhz = 1410; mhz >= 810; mhz -= 15) {
    clocks.push_back(mhz);
  }
  const Truth truth;
  Stats stats;
  asio::io_context io;
  std::vector<std::shared_ptr<Rank>> ranks;
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (int rank = 0; rank < ranks_per_job; ++rank) {
      ranks.push_back(std::make_shared<Rank>(io, server, jobs[j], j, rank, options.stages, options.pipelines,
                                             options.planned_rounds, truth, stats, clocks));
    }
  }
  const auto started = Clock::now();
  for (auto& rank : ranks) {
    rank->start();
  }
  io.run();
  const double wall_s = std::chrono::duration<double>(Clock::now() - started).count();
  const long rss_end_kb = status_kb(serve, "VmRSS");
  const long rss_peak_kb = status_kb(serve, "VmHWM");
  const double cpu_used_s = cpu_seconds(serve) - cpu_start_s;
  ::kill(serve, SIGTERM);
  int status = 0;
  ::waitpid(serve, &status, 0);

  std::cout << fmt::format(
      "joule serve --threads {}: {} job(s) of {} stages × {} pipelines = {} ranks, {} "
      "microbatches, {} planned rounds, {}\n",
      options.threads, options.jobs, options.stages, options.pipelines, total, options.microbatches,
      options.planned_rounds, db.starts_with("sqlite") ? "SQLite" : db);
  Clock::time_point previous = started;
  for (const auto& [key, done] : stats.round_done) {
    if (key.first != 0) {
      continue;
    }
    std::cout << fmt::format("  job 0 round {:3} {:10} {:5} schedules, {:8.3f} s\n", key.second,
                             stats.round_phase[key], stats.round_answers[key],
                             std::chrono::duration<double>(done - previous).count());
    previous = done;
  }
  std::cout << fmt::format("  {} requests in {:.1f} s: {:.0f} requests/s; failures: {}{}\n", stats.requests,
                           wall_s, static_cast<double>(stats.requests) / wall_s, stats.failures,
                           stats.failures > 0 ? " (first: " + stats.first_failure + ")" : "");
  std::cout << fmt::format(
      "  server: RSS {:.1f} MiB at start, {:.1f} MiB at the end, peak {:.1f} MiB; {:.1f} CPU s "
      "({:.0f}% of one core)\n",
      static_cast<double>(rss_start_kb) / 1024, static_cast<double>(rss_end_kb) / 1024,
      static_cast<double>(rss_peak_kb) / 1024, cpu_used_s, 100 * cpu_used_s / wall_s);
  std::filesystem::remove_all(folder);
  return stats.failures == 0 ? 0 : 1;
}
