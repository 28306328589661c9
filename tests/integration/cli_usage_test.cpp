// SPDX-License-Identifier: Apache-2.0
// Issue 23, item 5: what a newcomer meets on the command line. Every help page has an example and marks its
// required options; every unknown name exits 2; --country (and auto) on measure, power and daemon; values
// beyond any real one are refused naming the likely slip of unit; infer replay refuses --sim.
// Runs build/joule itself; every run is short (no sleeps).
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "integration/run_process.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

ProcessResult run_joule_usage(std::vector<std::string> args, std::map<std::string, std::string> extra = {}) {
  args.insert(args.begin(), JOULE_BINARY);
  std::map<std::string, std::string> env = {{"JOULE_SIM", Process::kUnset},
                                            {"CUDA_VISIBLE_DEVICES", Process::kUnset},
                                            {"JOULE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                                            {"JOULE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so.1"},
                                            {"JOULE_AMD_SMI_LIBRARY", "/nonexistent/libamd_smi.so"},
                                            {"JOULE_LEVEL_ZERO_LIBRARY", "/nonexistent/libze_loader.so.1"},
                                            {"JOULE_POWERCAP_ROOT", "/nonexistent/powercap"}};
  for (auto& [name, value] : extra) {
    env[name] = value;
  }
  return run(args, env);
}

// The subcommands a help page lists ("Subcommands:" then "  name   description" lines).
std::vector<std::string> listed_subcommands(const std::string& help) {
  std::vector<std::string> names;
  const auto start = help.find("\nSubcommands:\n");
  if (start == std::string::npos) {
    return names;
  }
  std::istringstream lines(help.substr(start + 14));
  std::string line;
  while (std::getline(lines, line) && line.rfind("  ", 0) == 0) {
    names.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  return names;
}

// The options a help page marks REQUIRED ("  --profile FILE REQUIRED   …").
std::set<std::string> required_options(const std::string& help) {
  std::set<std::string> names;
  static const std::regex kRequired(R"(\n  (?:-\w,)?(--[\w-]+) [^\n]*REQUIRED)");
  for (auto it = std::sregex_iterator(help.begin(), help.end(), kRequired); it != std::sregex_iterator();
       ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

// Every help page, found by walking the commands from `joule --help`, shows at least one example and the exit
// codes, and marks the options it cannot run without; each marked option is enforced (exit 2, "is required").
TEST(CliUsage, EveryHelpPageHasAnExampleAndMarksRequiredOptions) {
  const std::map<std::string, std::set<std::string>> expected_required = {
      {"plan", {"--profile", "--stages", "--microbatches"}},
      {"job next", {"--job-id"}},
      {"job report",
       {"--job-id", "--trial", "--batch-size", "--time-s", "--energy-j", "--metric", "--epoch"}},
      {"job end", {"--job-id", "--trial", "--batch-size"}},
      {"job status", {"--job-id"}},
      {"job delete", {"--job-id"}},
      {"carbon replay", {"--trace"}},
      {"carbon forecast", {"--trace"}},
      {"infer replay", {"--trace", "--slo-ttft-s", "--slo-tpot-s"}},
      {"infer bench", {"--endpoint", "--trace"}},
      {"infer govern", {"--engine", "--slo-ttft-s", "--slo-tpot-s"}},
      {"fleet power", {"--nodes"}},
      {"cluster replay", {"--carbon-trace"}},
  };
  std::vector<std::vector<std::string>> pending = {{}};
  std::set<std::string> seen;
  while (!pending.empty()) {
    const std::vector<std::string> path = pending.back();
    pending.pop_back();
    std::vector<std::string> args = path;
    args.emplace_back("--help");
    const auto help = run_joule_usage(args);
    const std::string name = fmt::format("{}", fmt::join(path, " "));
    seen.insert(name);
    ASSERT_EQ(help.exit_code, 0) << name;
    static const std::regex kExample(R"(\nExamples?:\n  (sudo )?joule )");
    EXPECT_TRUE(std::regex_search(help.out, kExample)) << "no example in 'joule " << name << " --help'";
    EXPECT_NE(help.out.find("\nExit codes: 0 success; 1 a runtime error"), std::string::npos) << name;
    const auto required = required_options(help.out);
    const auto expected = expected_required.find(name);
    EXPECT_EQ(required, expected == expected_required.end() ? std::set<std::string>{} : expected->second)
        << "REQUIRED marks of 'joule " << name << " --help'";
    if (!required.empty()) {
      const auto bare = run_joule_usage(path);
      EXPECT_EQ(bare.exit_code, 2) << name;
      const std::regex said(R"(^joule: error: (--[\w-]+) is required \(see 'joule [\w ]+ --help'\)\n$)");
      std::smatch match;
      ASSERT_TRUE(std::regex_match(bare.err, match, said)) << bare.err;
      EXPECT_EQ(required.count(match[1]), 1u) << bare.err;
    }
    for (const auto& sub : listed_subcommands(help.out)) {
      std::vector<std::string> next = path;
      next.push_back(sub);
      pending.push_back(next);
    }
  }
  // The walk found every command (and so every page above was checked).
  for (const char* command : {"",
                              "devices",
                              "measure",
                              "power",
                              "demo",
                              "simulate",
                              "plan",
                              "daemon",
                              "serve",
                              "job",
                              "job register",
                              "job next",
                              "job report",
                              "job end",
                              "job status",
                              "job delete",
                              "carbon",
                              "carbon replay",
                              "carbon forecast",
                              "carbon intensity",
                              "carbon countries",
                              "infer",
                              "infer replay",
                              "infer bench",
                              "infer govern",
                              "counters",
                              "fleet",
                              "fleet power",
                              "probe",
                              "cluster",
                              "cluster replay"}) {
    EXPECT_EQ(seen.count(command), 1u) << command;
  }
}

// An unknown GPU, model, workload or country used to exit 1 in some commands and 2 in others: every unknown
// name is now a usage error, exit 2, one line, before any work (the command would create the marker).
TEST(CliUsage, EveryUnknownNameExitsTwo) {
  TempDir dir;
  const std::string trace =
      dir.write("trace.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,20,8\n");
  const std::string carbon = std::string(JOULE_SOURCE_DIR) + "/data/carbon/synthetic_us_solar_14d.csv";
  const std::string marker = dir.path() + "/ran";
  const std::string v100_card = std::string(JOULE_SOURCE_DIR) + "/data/cards/sim-v100.json";
  const std::string no_country =
      "unknown country code 'XYZ': not an ISO 3166-1 alpha-3 or alpha-2 code of "
      "data/carbon/country_intensity.csv "
      "(`joule carbon countries` lists them)";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"frobnicate"},
       "unknown command 'frobnicate' (commands: devices, measure, power, demo, simulate, plan, daemon, "
       "serve, job, "
       "carbon, infer, counters, fleet, probe, cluster) (see 'joule --help')"},
      {{"simulate", "--gpu", "h200", "--workload", "imagenet"},
       "unknown GPU 'h200' (traces exist for: v100, a40, p100, rtx6000)"},
      {{"simulate", "--gpu", "v100", "--workload", "mnist"},
       "unknown workload 'mnist' (known: cifar100, imagenet, squad, librispeech, movielens-1m, "
       "sentiment140)"},
      {{"carbon", "replay", "--trace", carbon, "--gpu", "h200"},
       "unknown simulated GPU 'h200' (known: v100, a40, p100, rtx6000, generic)"},
      {{"carbon", "replay", "--trace", carbon, "--workload", "mnist"},
       "unknown workload 'mnist' (known: cifar100, imagenet, squad, librispeech, movielens-1m, "
       "sentiment140)"},
      {{"carbon", "intensity", "--country", "XYZ"}, no_country},
      {{"infer", "replay", "--trace", trace, "--slo-ttft-s", "1", "--slo-tpot-s", "0.1", "--model", "gpt-5"},
       "unknown model 'gpt-5': known models are llama-3-8b, llama-3-70b, llama-2-70b (or a JSON file, see "
       "docs/inference.md)"},
      {{"--sim", "v100", "measure", "--country", "XYZ", "--", "touch", marker}, no_country},
      {{"--sim", "v100", "power", "--serve", "127.0.0.1:0", "--country", "XYZ"}, no_country},
      {{"--sim", "v100", "daemon", "--socket", dir.path() + "/d.sock", "--metrics", "127.0.0.1:0",
        "--country", "XYZ"},
       no_country},
      // A frontier card of another GPU model (docs/optimize.md, "Starting from a frontier card").
      {{"--sim", "p100", "demo", "--no-simulation", "--out", dir.path(), "--card", v100_card},
       v100_card + " is for Tesla V100-PCIE-32GB (simulated) (driver sim), not Tesla P100-PCIE-16GB "
                   "(simulated) (driver sim): "
                   "make a card for this device with 'joule probe'"},
  };
  for (const auto& [args, message] : cases) {
    const auto result = run_joule_usage(args);
    EXPECT_EQ(result.exit_code, 2) << args[0] << " " << args[1];
    EXPECT_EQ(result.err, "joule: error: " + message + "\n");
  }
  EXPECT_FALSE(std::filesystem::exists(marker));
}

// --country was only on `carbon intensity`, though measure's error named it; auto was Python's only.
TEST(CliUsage, CountryAndAutoOnMeasurePowerAndDaemon) {
  const std::map<std::string, std::string> berlin = {{"TZ", "Europe/Berlin"}};
  const auto measured = run_joule_usage(
      {"--sim", "v100", "measure", "--country", "auto", "--format", "json", "-o", "-", "--", "true"}, berlin);
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  const auto json = nlohmann::json::parse(measured.out);
  EXPECT_EQ(json["carbon"]["source"].get<std::string>().rfind("yearly average of Germany (DEU, ", 0), 0u)
      << json["carbon"];
  const auto chosen = run_joule_usage(
      {"--sim", "v100", "measure", "--country", "fr", "--format", "json", "-o", "-", "--", "true"});
  ASSERT_EQ(chosen.exit_code, 0) << chosen.err;
  EXPECT_EQ(nlohmann::json::parse(chosen.out)["carbon"]["source"].get<std::string>().rfind(
                "yearly average of France (FRA, ", 0),
            0u);
  const auto intensity = run_joule_usage({"carbon", "intensity", "--country", "AUTO"}, berlin);
  ASSERT_EQ(intensity.exit_code, 0) << intensity.err;
  EXPECT_NE(intensity.err.find("yearly average of Germany (DEU, "), std::string::npos) << intensity.err;
  EXPECT_NE(intensity.err.find("inferred from timezone Europe/Berlin"), std::string::npos) << intensity.err;
  // Only the metrics use an intensity in power and daemon: said, not ignored.
  const auto power = run_joule_usage({"--sim", "v100", "power", "--country", "DEU", "--duration-s", "1"});
  EXPECT_EQ(power.exit_code, 2);
  EXPECT_EQ(
      power.err,
      "joule: error: power: --carbon-intensity, --carbon-trace, --zone and --country are only used by the "
      "metrics: add --serve HOST:PORT\n");
  TempDir dir;
  const auto daemon =
      run_joule_usage({"--sim", "v100", "daemon", "--socket", dir.path() + "/d.sock", "--country", "DEU"});
  EXPECT_EQ(daemon.exit_code, 2);
  EXPECT_EQ(daemon.err,
            "joule: error: daemon: --country is only used by the metrics: add --metrics HOST:PORT\n");
  const auto both =
      run_joule_usage({"--sim", "v100", "daemon", "--socket", dir.path() + "/d.sock", "--metrics",
                       "127.0.0.1:0", "--country", "DEU", "--carbon-intensity", "300"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_EQ(both.err, "joule: error: daemon: give --carbon-intensity or --country, not both\n");
}

// A value far beyond any real one is most likely in another unit: the refusal says which.
TEST(CliUsage, ImplausibleValuesNameTheLikelySlipOfUnit) {
  const std::string profile = std::string(JOULE_SOURCE_DIR) + "/data/perseus/example_s4_m8_profile.csv";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--sim", "v100", "measure", "--carbon-intensity", "380000", "--", "true"},
       "--carbon-intensity must be at most 2000, got 380000: is it in g/MWh? The unit here is g/kWh (see "
       "'joule "
       "measure --help')"},
      {{"plan", "--profile", profile, "--stages", "4", "--microbatches", "8", "--p-blocking-w", "75000"},
       "--p-blocking-w must be at most 5000, got 75000: is it in mW? The unit here is W (see 'joule plan "
       "--help')"},
      {{"infer", "replay", "--trace", profile, "--slo-ttft-s", "1", "--slo-tpot-s", "50"},
       "--slo-tpot-s must be at most 10, got 50: is it in ms? The unit here is s (see 'joule infer replay "
       "--help')"},
      {{"--sim", "v100", "power", "--interval-ms", "5000000"},
       "--interval-ms must be at most 3.6e+06, got 5e+06: is it in µs? The unit here is ms (see 'joule power "
       "--help')"},
      {{"job", "register", "--max-power-w", "250000"},
       "--max-power-w must be at most 5000, got 250000: is it in mW? The unit here is W (see 'joule job "
       "register "
       "--help')"},
      {{"job", "report", "--job-id", "j", "--trial", "1", "--batch-size", "8", "--time-s", "1", "--metric",
        "0.5", "--epoch", "1", "--energy-j", "3e18"},
       "--energy-j must be at most 1e+15, got 3e+18: is it in mJ or µJ? The unit here is J (see 'joule job "
       "report "
       "--help')"},
      {{"carbon", "replay", "--trace", profile, "--period-min", "1800"},
       "--period-min must be at most 1440, got 1800: is it in seconds? The unit here is minutes (see 'joule "
       "carbon "
       "replay --help')"},
  };
  for (const auto& [args, message] : cases) {
    const auto result = run_joule_usage(args);
    EXPECT_EQ(result.exit_code, 2) << message;
    EXPECT_EQ(result.err, "joule: error: " + message + "\n");
  }
}

// `infer replay` simulates its own GPUs: --sim is refused as `plan` and `simulate` refuse it.
TEST(CliUsage, InferReplayRefusesSim) {
  const auto result = run_joule_usage(
      {"--sim", "v100", "infer", "replay", "--trace", "t.csv", "--slo-ttft-s", "1", "--slo-tpot-s", "0.1"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(
      result.err,
      "joule: error: --sim does not apply to 'joule infer replay': it simulates its own GPUs (choose them "
      "with --gpu, --model and --tp)\n");
}

// counters --job-energy and daemon --job-energy-period-s: each bad value is a usage error (exit 2, one line)
// before any daemon is asked.
TEST(CliUsage, JobEnergyFlagsAreCheckedBeforeAnyWork) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--daemon", "/nonexistent/joule.sock", "counters", "--job-energy", "42;rm"},
       "job id \"42;rm\" is not one: expected 1 to 64 letters, digits, '.', '_' or '-' (a Slurm job id, e.g. "
       "4242)"},
      {{"counters", "--job-energy", "42"},
       "counters --job-energy: only joule daemon can tell a job's share of a shared GPU (it samples the "
       "GPUs' processes all along): give --daemon SOCKET or set JOULE_DAEMON_SOCKET"},
      {{"--daemon", "/nonexistent/joule.sock", "counters", "--job-energy", "42", "--gpus", "0"},
       "counters --job-energy: --gpus, --nodes and --sim do not apply: the daemon answers for every GPU the "
       "job was sampled on"},
      {{"--sim", "v100", "daemon", "--job-energy-period-s", "61"},
       "--job-energy-period-s must be a finite number in [0, 60], got 61 (see 'joule daemon --help')"},
      {{"--sim", "v100", "daemon", "--job-energy-period-s", "-1"},
       "--job-energy-period-s must be a finite number in [0, 60], got -1 (see 'joule daemon --help')"},
  };
  for (const auto& [args, message] : cases) {
    const auto result = run_joule_usage(args, {{"JOULE_DAEMON_SOCKET", Process::kUnset}});
    EXPECT_EQ(result.exit_code, 2) << fmt::format("{}", fmt::join(args, " "));
    EXPECT_EQ(result.err, "joule: error: " + message + "\n");
  }
  // No daemon there: a runtime error naming the socket.
  const auto absent =
      run_joule_usage({"--daemon", "/nonexistent/joule.sock", "counters", "--job-energy", "42"});
  EXPECT_EQ(absent.exit_code, 1);
  EXPECT_EQ(
      absent.err.rfind("joule: error: cannot connect to the joule daemon at /nonexistent/joule.sock", 0), 0u)
      << absent.err;
}

// The serving simulator's GPUs (infer replay --gpu) are probed as `joule --sim h100 probe`, so that their
// cards can be made for infer replay --card; other commands still take only the sim spec's GPUs.
TEST(CliUsage, ServingGpusAreProbedForTheirCards) {
  const auto probe = run_joule_usage({"--sim", "h100", "probe", "--quick"});
  ASSERT_EQ(probe.exit_code, 0) << probe.err;
  const auto card = nlohmann::json::parse(probe.out);
  EXPECT_EQ(card["device"]["model"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(card["device"]["driver_version"], "sim");
  EXPECT_EQ(card["frontiers"].size(), 4u);
  const auto devices = run_joule_usage({"--sim", "h100", "devices"});
  EXPECT_EQ(devices.exit_code, 2);
  EXPECT_NE(devices.err.find("sim spec 'h100': unknown simulated GPU 'h100'"), std::string::npos)
      << devices.err;
}

// joule serve --pfo-card with --pfo-profile: a job given a profile profiles nothing, so the card would go
// unused; refused before the store is opened.
TEST(CliUsage, ServeRefusesACardWithAProfile) {
  TempDir dir;
  const auto result = run_joule_usage(
      {"serve", "--db", "sqlite:" + dir.path() + "/serve.db", "--listen", "127.0.0.1:0", "--pfo-card",
       std::string(JOULE_SOURCE_DIR) + "/data/cards/sim-v100.json", "--pfo-profile",
       std::string(JOULE_SOURCE_DIR) + "/data/perseus/example_s4_m8_profile.csv"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.err,
            "joule: error: serve: --pfo-card and --pfo-profile: a job given a profile profiles nothing (keep "
            "one)\n");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/serve.db"));
}

// joule serve's cluster autopilot flags: each bad value or combination is refused in one line (exit 2) before
// the store is opened.
TEST(CliUsage, ServeRefusesBadClusterFlags) {
  TempDir dir;
  const std::vector<std::string> base = {"serve", "--db", "sqlite:" + dir.path() + "/serve.db", "--listen",
                                         "127.0.0.1:0"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--cluster-power-cap-w", "-5"},
       "--cluster-power-cap-w must be a finite number > 0, got -5 (see 'joule serve --help')"},
      {{"--cluster-power-cap-w", "0"},
       "--cluster-power-cap-w must be a finite number > 0, got 0 (see 'joule serve --help')"},
      {{"--cluster-nodes", "n1=/run/n1.sock"},
       "serve: --cluster-nodes needs --cluster-power-cap-w (the cluster autopilot is off without a cap)"},
      {{"--cluster-degrade-slos"},
       "serve: --cluster-degrade-slos needs --cluster-power-cap-w (the cluster autopilot is off without a "
       "cap)"},
      {{"--cluster-power-cap-w", "4000", "--cluster-nodes", "n1=/run/a.sock,n1=/run/b.sock"},
       "serve: --cluster-nodes: node \"n1\" is listed twice"},
      {{"--cluster-power-cap-w", "4000", "--cluster-nodes", "n1=/run/a.sock,"},
       "serve: --cluster-nodes: an empty entry in the node list \"n1=/run/a.sock,\""},
      {{"--cluster-power-cap-w", "4000", "--cluster-control-period-s", "60"},
       "serve: --cluster-control-period-s 60 must be shorter than --cluster-node-timeout-s 30: each period's "
       "enforcement round is how nodes are heard from"},
      {{"--cluster-power-cap-w", "4000", "--cluster-node-timeout-s", "-1"},
       "--cluster-node-timeout-s must be a finite number > 0, got -1 (see 'joule serve --help')"},
      {{"--cluster-advertise", "http://10.0.0.5:7787"},
       "serve: --cluster-advertise needs --cluster-power-cap-w (the cluster autopilot is off without a cap)"},
      {{"--cluster-lease-s", "5"},
       "serve: --cluster-lease-s needs --cluster-power-cap-w (the cluster autopilot is off without a cap)"},
      {{"--cluster-power-cap-w", "4000", "--cluster-advertise", "10.0.0.5:7787"},
       "serve: --cluster-advertise '10.0.0.5:7787' must be a URL (http://HOST:PORT) that clients of the "
       "other "
       "replicas can reach"},
      {{"--cluster-power-cap-w", "4000", "--cluster-lease-s", "0"},
       "--cluster-lease-s must be a finite number > 0, got 0 (see 'joule serve --help')"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), flags.begin(), flags.end());
    const auto result = run_joule_usage(args);
    EXPECT_EQ(result.exit_code, 2) << fmt::format("{}", fmt::join(flags, " "));
    EXPECT_EQ(result.err, "joule: error: " + message + "\n");
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/serve.db"));
}

}  // namespace
}  // namespace joule::test
