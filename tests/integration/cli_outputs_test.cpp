// SPDX-License-Identifier: Apache-2.0
// Issue 23, item 4: no output path destroys a file or loses a measurement, and every duration is bounded.
// Runs build/joule itself; every test is a few short runs (no sleeps).
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "integration/run_process.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

// No real vendor library or sysfs tree: results do not depend on the machine.
ProcessResult run_joule_outputs(std::vector<std::string> args) {
  args.insert(args.begin(), JOULE_BINARY);
  return run(args, {{"JOULE_SIM", Process::kUnset},
                    {"CUDA_VISIBLE_DEVICES", Process::kUnset},
                    {"JOULE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                    {"JOULE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so.1"},
                    {"JOULE_AMD_SMI_LIBRARY", "/nonexistent/libamd_smi.so"},
                    {"JOULE_LEVEL_ZERO_LIBRARY", "/nonexistent/libze_loader.so.1"},
                    {"JOULE_POWERCAP_ROOT", "/nonexistent/powercap"}});
}

mode_t output_mode_of(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return info.st_mode;
}

std::string output_file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// As root, `measure -o /dev/null` renamed a regular file over /dev/null. Devices are now written through.
TEST(CliOutputs, DeviceNodesStayDevices) {
  const auto to_null = run_joule_outputs({"--sim", "v100", "measure", "-o", "/dev/null", "--", "true"});
  EXPECT_EQ(to_null.exit_code, 0) << to_null.err;
  EXPECT_EQ(to_null.err, "");
  EXPECT_TRUE(S_ISCHR(output_mode_of("/dev/null")));
  TempDir dir;
  const std::string node = dir.path() + "/null";
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod needs root";
  }
  for (const auto& flags : std::vector<std::vector<std::string>>{
           {"--sim", "v100", "measure", "-o", node, "--append-csv", node, "--", "true"},
           {"simulate", "--gpu", "v100", "--workload", "imagenet", "--recurrences", "2", "--plot", node}}) {
    const auto result = run_joule_outputs(flags);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    EXPECT_TRUE(S_ISCHR(output_mode_of(node)));
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

// `-o -` and `-o /dev/stdout` are standard output (a file the shell opened is written at its offset).
TEST(CliOutputs, DashIsStandardOutput) {
  for (const char* path : {"-", "/dev/stdout"}) {
    const auto result =
        run_joule_outputs({"--sim", "v100", "measure", "--format", "json", "-o", path, "--", "true"});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(result.err, "");
    EXPECT_EQ(nlohmann::json::parse(result.out)["command"], nlohmann::json::array({"true"})) << path;
  }
}

// A path that cannot be written used to cost the whole run, and its measurement: it is now refused before the
// command starts (the command would create the marker), with one line naming the flag, and exit code 2.
TEST(CliOutputs, UnwritablePathsAreRefusedBeforeTheCommandRuns) {
  TempDir dir;
  const std::string marker = dir.path() + "/ran";
  const std::string file = dir.write("file", "");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-o", dir.path() + "/missing/out.json"},
       "-o " + dir.path() + "/missing/out.json: the folder " + dir.path() +
           "/missing does not exist (create it "
           "first)"},
      {{"-o", dir.path()}, "-o " + dir.path() + ": is a directory; give the path of a file (in it, say)"},
      {{"-o", file + "/x"}, "-o " + file + "/x: " + file + " is a regular file, not a folder"},
      {{"--append-csv", dir.path()},
       "--append-csv " + dir.path() + ": is a directory; give the path of a file (in it, say)"},
      {{"--append-csv", dir.path() + "/no/h.csv"},
       "--append-csv " + dir.path() + "/no/h.csv: the folder " + dir.path() +
           "/no does not exist (create it "
           "first)"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"--sim", "v100", "measure"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "touch", marker});
    const auto result = run_joule_outputs(args);
    EXPECT_EQ(result.exit_code, 2) << message;
    EXPECT_EQ(result.err, "joule: error: " + message + "\n");
    EXPECT_FALSE(std::filesystem::exists(marker)) << message;
  }
  // /proc takes no new file, not even from root.
  const auto in_proc =
      run_joule_outputs({"--sim", "v100", "measure", "-o", "/proc/joule.json", "--", "touch", marker});
  EXPECT_EQ(in_proc.exit_code, 2);
  EXPECT_EQ(in_proc.err,
            "joule: error: -o /proc/joule.json: cannot create a file in /proc: its file system takes no new "
            "files\n");
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);  // no temporary left
}

// The same check in every command that writes files, before its computation.
TEST(CliOutputs, EveryCommandChecksItsOutputsFirst) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing/x";
  const std::string trace =
      dir.write("trace.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,20,8\n");
  const std::string profile = std::string(JOULE_SOURCE_DIR) + "/data/perseus/example_s4_m8_profile.csv";
  const std::string refusal =
      fmt::format("the folder {}/missing does not exist (create it first)\n", dir.path());
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"plan", "--profile", profile, "--stages", "4", "--microbatches", "8", "--plan-out", missing},
       "--plan-out"},
      {{"plan", "--profile", profile, "--stages", "4", "--microbatches", "8", "--timeline", missing},
       "--timeline"},
      {{"simulate", "--gpu", "v100", "--workload", "imagenet", "--plot", missing}, "--plot"},
      {{"infer", "replay", "--trace", trace, "--slo-ttft-s", "1", "--slo-tpot-s", "0.1", "--metrics-out",
        missing},
       "--metrics-out"},
      {{"infer", "replay", "--trace", trace, "--slo-ttft-s", "1", "--slo-tpot-s", "0.1", "--requests-out",
        missing},
       "--requests-out"},
      {{"--sim", "v100", "infer", "bench", "--endpoint", "http://127.0.0.1:9", "--trace", trace,
        "--requests-out", missing},
       "--requests-out"},
      {{"carbon", "replay", "--trace",
        std::string(JOULE_SOURCE_DIR) + "/data/carbon/synthetic_us_solar_14d.csv", "--plot", missing},
       "--plot"},
      {{"demo", "--out", dir.path() + "/trace.csv/plots"}, ""},
  };
  for (const auto& [args, flag] : cases) {
    const auto result = run_joule_outputs(args);
    EXPECT_EQ(result.exit_code, 2) << args[0] << " " << flag << ": " << result.err;
    EXPECT_EQ(result.out, "") << args[0];
    if (!flag.empty()) {
      EXPECT_EQ(result.err, fmt::format("joule: error: {} {}: {}", flag, missing, refusal));
    } else {
      EXPECT_EQ(result.err.rfind(
                    "joule: error: --out " + dir.path() + "/trace.csv/plots: cannot make the folder: ", 0),
                0u)
          << result.err;
    }
  }
}

// A write that fails at the end (disk full, folder removed meanwhile) used to turn the exit code into 1 and
// lose the summary: the summary goes to stderr instead and the exit code stays the command's.
TEST(CliOutputs, FailedWriteAtTheEndKeepsTheSummaryAndTheExitCode) {
  const auto full = run_joule_outputs({"--sim", "v100", "measure", "-o", "/dev/full", "--append-csv",
                                       "/dev/full", "--", "sh", "-c", "exit 3"});
  EXPECT_EQ(full.exit_code, 3);
  const std::string history_error =
      "joule: error: --append-csv /dev/full: cannot write: No space left on device; here it is instead:\n"
      "timestamp,run,command,exit_code,";
  EXPECT_EQ(full.err.rfind(history_error, 0), 0u) << full.err;
  const std::string summary_error =
      "joule: error: -o /dev/full: cannot write: No space left on device; here it is instead:\n\n"
      " joule measure: sh -c exit 3\n";
  EXPECT_NE(full.err.find(summary_error), std::string::npos) << full.err;
  EXPECT_NE(full.err.find("           3     exit code\n"), std::string::npos) << full.err;

  TempDir dir;
  const std::string folder = dir.path() + "/results";
  std::filesystem::create_directory(folder);
  const auto removed = run_joule_outputs(
      {"--sim", "v100", "measure", "--format", "json", "-o", folder + "/out.json", "--", "rm", "-r", folder});
  EXPECT_EQ(removed.exit_code, 0);
  const std::string removed_error =
      "joule: error: -o " + folder +
      "/out.json: cannot replace it: No such file or directory; here it is instead:\n";
  ASSERT_EQ(removed.err.rfind(removed_error, 0), 0u) << removed.err;
  EXPECT_EQ(nlohmann::json::parse(removed.err.substr(removed_error.size()))["exit_code"], 0);

  // Computations have no exit code of their own to keep: 1, with what was printed still printed.
  const std::string profile = std::string(JOULE_SOURCE_DIR) + "/data/perseus/example_s4_m8_profile.csv";
  const std::string plot = dir.path() + "/frontier.svg";
  const auto plan = run_joule_outputs({"plan", "--profile", profile, "--stages", "4", "--microbatches", "8",
                                       "--plan-out", "/dev/full", "--plot", plot});
  EXPECT_EQ(plan.exit_code, 1);
  EXPECT_EQ(plan.err, "joule: error: --plan-out /dev/full: cannot write: No space left on device\n");
  EXPECT_NE(plan.out.find("  plot written to " + plot + "\n"), std::string::npos) << plan.out;
  EXPECT_EQ(plan.out.find("plan written to"), std::string::npos) << plan.out;
  EXPECT_NE(output_file_text(plot).find("<svg"), std::string::npos);
}

// `power --duration-s 1e10` stopped at once with 0 (1e19 ns wrapped to a deadline in the past), and `devices
// --check --duration-s 1e10` failed a healthy GPU. Every duration flag is bounded by one rule (100 years).
TEST(CliOutputs, DurationsBeyondOneHundredYearsAreRefused) {
  const std::string message =
      "--duration-s must be at most 3.15576e+09, got 1e+10: 100 years is the longest duration joule takes";
  const auto power = run_joule_outputs({"--sim", "v100", "power", "--duration-s", "1e10"});
  EXPECT_EQ(power.exit_code, 2);
  EXPECT_EQ(power.err, "joule: error: " + message + " (see 'joule power --help')\n");
  EXPECT_EQ(power.out, "");
  const auto check = run_joule_outputs({"--sim", "v100", "devices", "--check", "--duration-s", "1e10"});
  EXPECT_EQ(check.exit_code, 2);
  EXPECT_EQ(check.err, "joule: error: " + message + " (see 'joule devices --help')\n");
  for (const auto& [args, flag] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"carbon", "intensity", "--history-hours", "1e9"}, "--history-hours"},
           {{"job", "next", "--job-id", "j", "--timeout-s", "1e10"}, "--timeout-s"},
           {{"serve", "--response-ttl-s", "1e10"}, "--response-ttl-s"}}) {
    const auto result = run_joule_outputs(args);
    EXPECT_EQ(result.exit_code, 2) << flag;
    EXPECT_EQ(result.err.rfind("joule: error: " + flag + " must be at most ", 0), 0u) << result.err;
    EXPECT_NE(result.err.find(": 100 years is the longest duration joule takes (see 'joule "),
              std::string::npos)
        << result.err;
  }
}

}  // namespace
}  // namespace joule::test
