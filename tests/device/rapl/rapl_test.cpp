// SPDX-License-Identifier: Apache-2.0
// The RAPL backend against fake powercap trees: discovery, wraparound, the wrap-check thread and errors.
#include "joule/device/rapl.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "joule/device/discovery.hpp"

#include "fakes/rapl/fake_powercap.hpp"
#include "test_util.hpp"

namespace joule::device {
namespace {

using namespace std::chrono_literals;
using test::FakeDram;
using test::FakePowercap;

constexpr uint64_t kRealRangeUj = 262143328850;  // a typical package range (2^32 × 61.035 µJ)
constexpr uint64_t kSmallRangeUj = 1000000;      // wraps after 1 J, to test wraparound

const std::string kNoRaplReason =
    "the CPU has no Intel/AMD RAPL driver loaded (intel_rapl_common), this is a VM that does not expose "
    "RAPL, or "
    "the container does not mount /sys/class/powercap (if the host's tree is bind-mounted elsewhere, set "
    "JOULE_POWERCAP_ROOT to it)";

std::string permission_message(const std::string& path, const std::string& zone_dir) {
  return "cannot read " + path +
         ": permission denied; RAPL energy counters are readable only by root since Linux 5.10 "
         "(CVE-2020-8694, "
         "PLATYPUS). Run as root, or grant read access (until the next reboot) with: sudo chmod a+r " +
         zone_dir + "/intel-rapl:*/energy_uj " + zone_dir + "/intel-rapl:*/intel-rapl:*/energy_uj";
}

RaplOptions options_for(const FakePowercap& powercap, Nanos wrap_check_period = 60s) {
  RaplOptions options;
  options.powercap_root = powercap.root();
  options.wrap_check_period = wrap_check_period;
  return options;
}

std::vector<std::unique_ptr<Cpu>> open_or_fail(const RaplOptions& options) {
  auto cpus = open_rapl_cpus(options);
  if (!cpus) {
    ADD_FAILURE() << cpus.error().message();
    return {};
  }
  return std::move(*cpus);
}

// Makes `path` unreadable for this process for the guard's lifetime. Root reads through any file mode, so as
// root the effective uid becomes nobody (65534) until destruction; otherwise chmod 000 is enough.
class NoReadAccess {
 public:
  explicit NoReadAccess(const std::string& path) {
    if (::chmod(path.c_str(), 0) != 0) {
      return;
    }
    if (::geteuid() == 0) {
      if (::seteuid(65534) != 0) {
        return;
      }
      switched_ = true;
    }
    // The directory must stay traversable (its name file readable) so that only the counter is refused.
    const std::string name = path.substr(0, path.rfind('/')) + "/name";
    const bool name_readable = ::access(name.c_str(), R_OK) == 0;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::close(fd);
    } else {
      blocked_ = errno == EACCES && name_readable;
    }
  }
  ~NoReadAccess() {
    if (switched_ && ::seteuid(0) != 0) {
      std::abort();  // the rest of the suite must not run as nobody
    }
  }
  NoReadAccess(const NoReadAccess&) = delete;
  NoReadAccess& operator=(const NoReadAccess&) = delete;

  bool blocked() const { return blocked_; }

 private:
  bool switched_ = false;
  bool blocked_ = false;
};

// --- discovery -------------------------------------------------------------------------------------------

TEST(RaplTest, OpensPackagesSortedNumerically) {
  FakePowercap powercap;
  for (const int index : {10, 2, 0, 1}) {
    powercap.add_package(index, "package-" + std::to_string(index), 0, kRealRangeUj);
  }
  const auto cpus = open_or_fail(options_for(powercap));
  ASSERT_EQ(cpus.size(), 4U);
  const std::vector<int> expected{0, 1, 2, 10};
  for (size_t i = 0; i < cpus.size(); ++i) {
    EXPECT_EQ(cpus[i]->info().backend, "rapl");
    EXPECT_EQ(cpus[i]->info().index, expected[i]);
    EXPECT_EQ(cpus[i]->info().name, "package-" + std::to_string(expected[i]));
    EXPECT_FALSE(cpus[i]->info().has_dram);
  }
  EXPECT_EQ(cpus[3]->label(), "CPU 10 (package-10)");
}

TEST(RaplTest, IgnoresSubzoneLinksPsysAndOtherEntries) {
  FakePowercap powercap;  // flat: intel-rapl:0:0 is also linked at top level, as the kernel does
  powercap.add_package(0, "package-0", 0, kRealRangeUj, FakeDram{});
  powercap.add_package(1, "psys", 0, kRealRangeUj);  // platform zone: would double-count
  powercap.add_package(2, "package-1", 0, kRealRangeUj);
  powercap.write_raw("intel-rapl-mmio:0/name", "package-0\n");  // MMIO duplicate of the package limits
  powercap.write_raw("intel-rapl:7", "not a directory\n");
  powercap.write_raw("intel-rapl:x/name", "package-x\n");
  const auto cpus = open_or_fail(options_for(powercap));
  ASSERT_EQ(cpus.size(), 2U);
  EXPECT_EQ(cpus[0]->info().index, 0);
  EXPECT_TRUE(cpus[0]->info().has_dram);
  EXPECT_EQ(cpus[1]->info().index, 2);
  EXPECT_EQ(cpus[1]->info().name, "package-1");
}

TEST(RaplTest, AcceptsTheNestedIntelRaplLayout) {
  FakePowercap powercap(FakePowercap::Layout::kNested);
  powercap.add_package(1, "package-1", 2000, kRealRangeUj, FakeDram{3000});
  powercap.add_package(0, "package-0", 1000, kRealRangeUj);
  const auto cpus = open_or_fail(options_for(powercap));
  ASSERT_EQ(cpus.size(), 2U);
  EXPECT_EQ(cpus[0]->info().index, 0);
  EXPECT_EQ(cpus[1]->info().index, 1);
  EXPECT_TRUE(cpus[1]->info().has_dram);
  EXPECT_EQ(cpus[1]->dram_energy_mj(), 3U);
}

TEST(RaplTest, FindsTheDramSubzoneByName) {
  FakePowercap powercap;
  // Client parts: core and uncore first, dram as intel-rapl:N:2.
  powercap.add_package(0, "package-0", 0, kRealRangeUj, FakeDram{7000, kRealRangeUj, 2});
  powercap.add_subzone(0, 0, "core", 1000, kRealRangeUj);
  powercap.add_subzone(0, 1, "uncore", 2000, kRealRangeUj);
  powercap.add_package(1, "package-1", 0, kRealRangeUj);
  powercap.add_subzone(1, 0, "core", 1000, kRealRangeUj);
  const auto cpus = open_or_fail(options_for(powercap));
  ASSERT_EQ(cpus.size(), 2U);
  EXPECT_TRUE(cpus[0]->info().has_dram);
  EXPECT_EQ(cpus[0]->dram_energy_mj(), 7U);
  EXPECT_FALSE(cpus[1]->info().has_dram);
  JOULE_EXPECT_ERROR(cpus[1]->dram_energy_mj(), ErrorCode::kNotSupported,
                     "CPU 1 (package-1) has no DRAM energy domain");
}

TEST(RaplTest, DiscoveryUsesJoulePowercapRoot) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 5000, kRealRangeUj);
  test::ScopedEnv root("JOULE_POWERCAP_ROOT", powercap.root().c_str());
  auto options = DiscoveryOptions::from_environment();
  ASSERT_TRUE(options.has_value()) << options.error().message();
  options->gpus = false;
  const auto set = discover(*options);
  ASSERT_TRUE(set.has_value()) << set.error().message();
  ASSERT_EQ(set->cpus.size(), 1U);
  EXPECT_EQ(set->cpus[0]->package_energy_mj(), 5U);
}

// --- readings and wraparound ---------------------------------------------------------------------------

TEST(RaplTest, ReportsEnergyInMillijoules) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 1000000, kRealRangeUj, FakeDram{2000});
  const auto cpus = open_or_fail(options_for(powercap));
  ASSERT_EQ(cpus.size(), 1U);
  Cpu& cpu = *cpus[0];
  EXPECT_EQ(cpu.package_energy_mj(), 1000U);
  EXPECT_EQ(cpu.dram_energy_mj(), 2U);
  powercap.set_energy(0, 1500999);  // +500.999 mJ: µJ accumulate, mJ truncate
  powercap.set_dram_energy(0, 7999);
  EXPECT_EQ(cpu.package_energy_mj(), 1500U);
  EXPECT_EQ(cpu.dram_energy_mj(), 7U);
  powercap.set_energy(0, 1501000);
  EXPECT_EQ(cpu.package_energy_mj(), 1501U);
  EXPECT_EQ(cpu.package_energy_mj(), 1501U);  // an unchanged counter adds nothing
}

TEST(RaplTest, CorrectsAWraparound) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 990000, kSmallRangeUj, FakeDram{999999, kSmallRangeUj});
  const auto cpus = open_or_fail(options_for(powercap));
  ASSERT_EQ(cpus.size(), 1U);
  Cpu& cpu = *cpus[0];
  EXPECT_EQ(cpu.package_energy_mj(), 990U);
  // The counter runs 0…max inclusive, so from 990000 to 9999 is 10000 (to max) + 1 (max → 0) + 9999.
  powercap.set_energy(0, 9999);
  EXPECT_EQ(cpu.package_energy_mj(), 1010U);
  powercap.set_energy(0, 509999);
  EXPECT_EQ(cpu.package_energy_mj(), 1510U);
  EXPECT_EQ(cpu.dram_energy_mj(), 999U);
  powercap.set_dram_energy(0, 0);  // max → 0 is one step
  EXPECT_EQ(cpu.dram_energy_mj(), 1000U);
}

// A counter that goes back is a wrap only if the energy that implies fits the time since the last reading at
// RaplOptions::max_power_w (1 kW), judged over at least 0.1 s.
TEST(RaplTest, ACounterResetIsNotCountedAsAWrap) {
  // Before: any step back was a wrap: a reset from 5 J to 1 mJ added 262,138 J of phantom energy (a Slurm job
  // was charged 130 kW).
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 5'000'000, kRealRangeUj, FakeDram{2'000'000, kRealRangeUj});
  const auto cpus = open_or_fail(options_for(powercap));
  ASSERT_EQ(cpus.size(), 1U);
  Cpu& cpu = *cpus[0];
  const auto before = cpu.package_reading();
  ASSERT_TRUE(before) << before.error().message();
  EXPECT_EQ(before->energy_mj, 5000U);
  EXPECT_EQ(before->resets, 0U);
  powercap.set_energy(0, 1000);
  const auto reset = cpu.package_reading();
  ASSERT_TRUE(reset) << reset.error().message();
  EXPECT_EQ(reset->energy_mj, 5000U);  // nothing counted for the step back
  EXPECT_EQ(reset->resets, 1U);
  const std::string& why = reset->last_reset;
  const std::string path = powercap.package_energy_path(0);
  EXPECT_EQ(why.rfind(path + " went back from 5000000 to 1000 uJ in ", 0), 0U) << why;
  EXPECT_NE(why.find(" s: as a wrap that would be 262138 J, "), std::string::npos) << why;
  const std::string tail =
      " on average, more than the 1000 W a package can draw, so the counter was reset (CPU hot-plug, a "
      "firmware "
      "or virtual machine reset) and nothing is counted for that step";
  EXPECT_EQ(why.substr(why.size() - std::min(why.size(), tail.size())), tail) << why;
  // Counting goes on from the reset; the reset stays on every later reading, the DRAM's are its own.
  powercap.set_energy(0, 3'001'000);
  const auto after = cpu.package_reading();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->energy_mj, 8000U);
  EXPECT_EQ(after->resets, 1U);
  EXPECT_EQ(cpu.package_energy_mj(), 8000U);
  const auto dram = cpu.dram_reading();
  ASSERT_TRUE(dram);
  EXPECT_EQ(dram->resets, 0U);
  // A window across it is not measurable, one that is not is.
  EXPECT_EQ(why_not_measurable(*before, *after),
            "not measurable: the energy counter was reset once between the readings (" + why +
                "); the energy before the reset is unknown, so none is counted rather than a wrap's worth of "
                "phantom "
                "energy");
  EXPECT_EQ(why_not_measurable(*reset, *after), std::nullopt);
}

TEST(RaplTest, AWrapAtAPlausiblePowerIsCountedAndTheBoundIsAnOption) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", kRealRangeUj - 10'000'000, kRealRangeUj);
  const auto cpus = open_or_fail(options_for(powercap));
  ASSERT_EQ(cpus.size(), 1U);
  // 10 J to the top, 1 µJ over it, 5 J after: 15 J, at most 150 W over the 0.1 s it is judged over.
  powercap.set_energy(0, 5'000'000);
  const auto wrapped = cpus[0]->package_reading();
  ASSERT_TRUE(wrapped) << wrapped.error().message();
  EXPECT_EQ(wrapped->energy_mj, (kRealRangeUj - 10'000'000 + 15'000'001) / 1000);
  EXPECT_EQ(wrapped->resets, 0U);
  // The same step where a package draws at most 1 W (0.1 J in the 0.1 s it is judged over) is a reset.
  FakePowercap small;
  small.add_package(0, "package-0", kRealRangeUj - 10'000'000, kRealRangeUj);
  RaplOptions options = options_for(small);
  options.max_power_w = 1;
  const auto limited = open_or_fail(options);
  ASSERT_EQ(limited.size(), 1U);
  small.set_energy(0, 5'000'000);
  const auto reset = limited[0]->package_reading();
  ASSERT_TRUE(reset);
  EXPECT_EQ(reset->energy_mj, (kRealRangeUj - 10'000'000) / 1000);
  EXPECT_EQ(reset->resets, 1U);
  EXPECT_NE(reset->last_reset.find("as a wrap that would be 15 J, "), std::string::npos) << reset->last_reset;
  EXPECT_NE(reset->last_reset.find(" on average, more than the 1 W a package can draw"), std::string::npos)
      << reset->last_reset;
  options.max_power_w = 0;
  JOULE_EXPECT_ERROR(open_rapl_cpus(options), ErrorCode::kInvalidArgument,
                     "the most a RAPL package can draw must be a positive number of watts, got 0");
}

TEST(RaplTest, BackgroundThreadCatchesWrapsBetweenReads) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 0, kSmallRangeUj);
  const auto cpus = open_or_fail(options_for(powercap, 1ms));
  ASSERT_EQ(cpus.size(), 1U);
  test::FileReadWatcher watcher(powercap.package_energy_path(0));
  // Three wraps and no user read in between: only the thread sees the intermediate values.
  for (int wrap = 0; wrap < 3; ++wrap) {
    powercap.set_energy(0, 600000);
    ASSERT_TRUE(watcher.wait_for_fresh_read());
    powercap.set_energy(0, 200000);
    ASSERT_TRUE(watcher.wait_for_fresh_read());
  }
  // 0 → 600000, then three times 600000 → 200000 (600001 with the wrap) and twice 200000 → 600000.
  EXPECT_EQ(cpus[0]->package_energy_mj(), (600000U + 3U * 600001U + 2U * 400000U) / 1000U);
}

TEST(RaplTest, WithoutBackgroundReadsWrapsBetweenReadsAreMissed) {
  // The control for the test above: with a period longer than the test, the wraps go unseen.
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 0, kSmallRangeUj);
  const auto cpus = open_or_fail(options_for(powercap, 60s));
  ASSERT_EQ(cpus.size(), 1U);
  for (int wrap = 0; wrap < 3; ++wrap) {
    powercap.set_energy(0, 600000);
    powercap.set_energy(0, 200000);
  }
  EXPECT_EQ(cpus[0]->package_energy_mj(), 200U);
}

TEST(RaplTest, ChoosesAShortPeriodForASmallRange) {
  // range 1000 µJ wraps in 1 µs at 1 kW: the automatic period is clamped to its 0.1 s minimum.
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 0, 1000);
  const auto cpus = open_or_fail(options_for(powercap, Nanos(0)));
  ASSERT_EQ(cpus.size(), 1U);
  test::FileReadWatcher watcher(powercap.package_energy_path(0));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(watcher.wait_for_fresh_read(1s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
}

TEST(RaplTest, DestructionStopsTheThreadPromptly) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 0, kRealRangeUj, FakeDram{});
  powercap.add_package(1, "package-1", 0, kRealRangeUj, FakeDram{});
  auto cpus = open_or_fail(options_for(powercap, Nanos(0)));  // automatic: 60 s for this range
  ASSERT_EQ(cpus.size(), 2U);
  const auto start = std::chrono::steady_clock::now();
  cpus.clear();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
}

TEST(RaplTest, ConcurrentReadsStayMonotonic) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 0, kSmallRangeUj, FakeDram{0, kSmallRangeUj});
  const auto cpus = open_or_fail(options_for(powercap, 1ms));
  ASSERT_EQ(cpus.size(), 1U);
  Cpu& cpu = *cpus[0];
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      uint64_t last_package_mj = 0;
      uint64_t last_dram_mj = 0;
      while (!done) {
        const auto package_mj = cpu.package_energy_mj();
        const auto dram_mj = cpu.dram_energy_mj();
        if (!package_mj || !dram_mj || *package_mj < last_package_mj || *dram_mj < last_dram_mj) {
          ++failures;
          return;
        }
        last_package_mj = *package_mj;
        last_dram_mj = *dram_mj;
      }
    });
  }
  for (uint64_t step = 1; step <= 100; ++step) {
    powercap.set_energy(0, step * 300000 % (kSmallRangeUj + 1));
    powercap.set_dram_energy(0, step * 70000 % (kSmallRangeUj + 1));
  }
  done = true;
  for (auto& reader : readers) {
    reader.join();
  }
  EXPECT_EQ(failures, 0);
}

// --- errors --------------------------------------------------------------------------------------------

TEST(RaplTest, MissingRootSaysWhyThereIsNoRapl) {
  test::TempDir dir;
  RaplOptions options;
  options.powercap_root = dir.path() + "/powercap";
  JOULE_EXPECT_ERROR(
      open_rapl_cpus(options), ErrorCode::kNotFound,
      "no RAPL energy counters: " + options.powercap_root + " does not exist; " + kNoRaplReason);
}

TEST(RaplTest, RootWithoutZonesSaysWhyThereIsNoRapl) {
  FakePowercap powercap;
  powercap.write_raw("intel-rapl-mmio:0/name", "package-0\n");
  JOULE_EXPECT_ERROR(
      open_rapl_cpus(options_for(powercap)), ErrorCode::kNotFound,
      "no RAPL energy counters: " + powercap.root() + " has no intel-rapl:N zones; " + kNoRaplReason);
}

TEST(RaplTest, OnlyPsysIsNotAPackage) {
  FakePowercap powercap;
  powercap.add_package(0, "psys", 0, kRealRangeUj);
  JOULE_EXPECT_ERROR(open_rapl_cpus(options_for(powercap)), ErrorCode::kNotFound,
                     "no RAPL energy counters: " + powercap.root() +
                         " has only psys (platform) zones, no package; " + kNoRaplReason);
}

TEST(RaplTest, UnreadablePackageCounterSaysHowToGrantAccess) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 0, kRealRangeUj);
  const std::string path = powercap.package_energy_path(0);
  NoReadAccess guard(path);
  if (!guard.blocked()) {
    GTEST_SKIP() << "cannot make " << path << " unreadable for this process";
  }
  JOULE_EXPECT_ERROR(open_rapl_cpus(options_for(powercap)), ErrorCode::kPermissionDenied,
                     permission_message(path, powercap.root()));
}

TEST(RaplTest, UnreadableDramCounterNamesTheActualZoneDirectory) {
  FakePowercap powercap(FakePowercap::Layout::kNested);
  powercap.add_package(0, "package-0", 0, kRealRangeUj, FakeDram{});
  const std::string path = powercap.dram_energy_path(0);
  NoReadAccess guard(path);
  if (!guard.blocked()) {
    GTEST_SKIP() << "cannot make " << path << " unreadable for this process";
  }
  JOULE_EXPECT_ERROR(open_rapl_cpus(options_for(powercap)), ErrorCode::kPermissionDenied,
                     permission_message(path, powercap.root() + "/intel-rapl"));
}

TEST(RaplTest, CounterBecomingUnreadableAfterOpenIsReported) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 4000, kRealRangeUj);
  const auto cpus = open_or_fail(options_for(powercap));
  ASSERT_EQ(cpus.size(), 1U);
  const std::string path = powercap.package_energy_path(0);
  {
    NoReadAccess guard(path);
    if (!guard.blocked()) {
      GTEST_SKIP() << "cannot make " << path << " unreadable for this process";
    }
    JOULE_EXPECT_ERROR(cpus[0]->package_energy_mj(), ErrorCode::kPermissionDenied,
                       permission_message(path, powercap.root()));
  }
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  EXPECT_EQ(cpus[0]->package_energy_mj(), 4U);
}

TEST(RaplTest, MalformedCounterIsAParseErrorNamingTheFile) {
  for (const std::string content : {"abc\n", "", "\n", "-5\n", "12 34\n", "99999999999999999999999\n"}) {
    SCOPED_TRACE("content: " + content);
    FakePowercap powercap;
    powercap.add_package(0, "package-0", 0, kRealRangeUj);
    const std::string path = powercap.package_energy_path(0);
    powercap.write_raw(path, content);
    std::string shown = content;
    if (!shown.empty() && shown.back() == '\n') {
      shown.pop_back();
    }
    JOULE_EXPECT_ERROR(
        open_rapl_cpus(options_for(powercap)), ErrorCode::kParse,
        "cannot parse " + path + ": expected a whole number of microjoules, got \"" + shown + "\"");
  }
}

TEST(RaplTest, MalformedRangeIsAParseErrorNamingTheFile) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 0, kRealRangeUj);
  const std::string path = powercap.package_dir(0) + "/max_energy_range_uj";
  powercap.write_raw(path, "12x\n");
  JOULE_EXPECT_ERROR(open_rapl_cpus(options_for(powercap)), ErrorCode::kParse,
                     "cannot parse " + path + ": expected a whole number of microjoules, got \"12x\"");
  powercap.write_raw(path, "0\n");
  JOULE_EXPECT_ERROR(open_rapl_cpus(options_for(powercap)), ErrorCode::kParse,
                     path + ": the counter range must be positive, got 0");
}

TEST(RaplTest, MalformedReadAfterOpenLeavesTheTotalIntact) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 3000, kSmallRangeUj);
  const auto cpus = open_or_fail(options_for(powercap));
  ASSERT_EQ(cpus.size(), 1U);
  const std::string path = powercap.package_energy_path(0);
  powercap.write_raw(path, "");
  JOULE_EXPECT_ERROR(cpus[0]->package_energy_mj(), ErrorCode::kParse,
                     "cannot parse " + path + ": expected a whole number of microjoules, got \"\"");
  powercap.set_energy(0, 5000);
  EXPECT_EQ(cpus[0]->package_energy_mj(), 5U);
}

TEST(RaplTest, CounterAboveItsRangeIsADeviceError) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", kSmallRangeUj + 1, kSmallRangeUj);
  JOULE_EXPECT_ERROR(
      open_rapl_cpus(options_for(powercap)), ErrorCode::kDevice,
      powercap.package_energy_path(0) + " reads 1000001 uJ, more than its max_energy_range_uj (1000000 uJ)");
}

TEST(RaplTest, NegativeWrapCheckPeriodIsInvalid) {
  FakePowercap powercap;
  powercap.add_package(0, "package-0", 0, kRealRangeUj);
  JOULE_EXPECT_ERROR(open_rapl_cpus(options_for(powercap, Nanos(-1))), ErrorCode::kInvalidArgument,
                     "the RAPL wrap check period must not be negative, got -1 ns");
}

}  // namespace
}  // namespace joule::device
