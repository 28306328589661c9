// SPDX-License-Identifier: Apache-2.0
// CPU package and DRAM energy from Intel/AMD RAPL, read as plain files from the powercap sysfs tree.
//
// Layout: <root>/intel-rapl:N/{name,energy_uj,max_energy_range_uj} per package; inside it, sub-zones
// intel-rapl:N:M, of which the one named "dram" is the DRAM domain. The kernel also links the sub-zones at
// top level (ignored there), and older kernels and some container bind-mounts have
// <root>/intel-rapl/intel-rapl:N.
//
// Wraparound: energy_uj is a 32-bit hardware counter scaled to µJ. It takes values 0…max_energy_range_uj
// (inclusive, max_energy_range_uj is the scaled 0xffffffff) and the value after max_energy_range_uj is 0, so
// we count modulo max_energy_range_uj + 1. Strictly the period is max_energy_range_uj + one hardware energy
// unit (15–61 µJ); that error, at most 61 µJ once per wrap (~262 kJ on current parts), is far below the mJ we
// report. Each domain adds up the forward distance between consecutive raw readings, so a reading is
// monotonic and exact as long as the counter never wraps twice between two reads. A background thread per
// package reads every domain often enough (wrap_check_period) to guarantee that even when the user reads
// rarely.
//
// Resets: a counter can also go back because it was reset (CPU hot-plug, a firmware or virtual machine
// reset). Counted as a wrap, that is up to a whole range of phantom energy (262 kJ: it charged a Slurm job
// 130 kW). A step back is a wrap only if the energy it implies over the time since the last reading is at
// most RaplOptions::max_power_w; otherwise nothing is counted for it and the reset is counted and reported
// with every later reading (CpuEnergyReading::resets), so that a window across it is reported as not
// measurable. The time is the monotonic clock's, which stands still during suspend: a counter reset across a
// suspend is not taken for a wrap.
#include "joule/device/rapl.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "joule/core/file.hpp"
#include "joule/core/log.hpp"
#include "joule/core/strings.hpp"

namespace joule::device {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kZonePrefix = "intel-rapl:";
constexpr Nanos kMinWrapCheckPeriod = std::chrono::milliseconds(100);
constexpr Nanos kMaxWrapCheckPeriod = std::chrono::seconds(60);
// A step back is judged over at least this long: the counters update about every millisecond, so two
// readings microseconds apart that straddle an update would otherwise imply an absurd power.
constexpr double kMinJudgedIntervalS = 0.1;

// 1.31e6 → "1.31 MW": the power a counter reset would imply as a wrap, for people.
std::string power_text(double power_w) {
  if (power_w >= 1e6) {
    return fmt::format("{:.3g} MW", power_w / 1e6);
  }
  if (power_w >= 1e3) {
    return fmt::format("{:.3g} kW", power_w / 1e3);
  }
  return fmt::format("{:.3g} W", power_w);
}

// @return N if `text` is `prefix` followed by decimal digits only (so "intel-rapl:0:1" and
// "intel-rapl-mmio:0" do not match the package prefix), else nullopt.
std::optional<int> zone_number(std::string_view text, std::string_view prefix) {
  if (!text.starts_with(prefix)) {
    return std::nullopt;
  }
  const std::string_view digits = text.substr(prefix.size());
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  int value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    return std::nullopt;
  }
  return value;
}

Result<uint64_t> parse_uj(const std::string& path, std::string_view content) {
  const std::string_view text = trim(content);
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    constexpr size_t kShown = 40;  // enough to recognise the content without flooding the message
    const std::string shown =
        text.size() > kShown ? std::string(text.substr(0, kShown)) + "..." : std::string(text);
    return fail(ErrorCode::kParse, "cannot parse {}: expected a whole number of microjoules, got \"{}\"",
                path, shown);
  }
  return value;
}

std::string no_rapl_message(const std::string& root, std::string_view what) {
  return fmt::format(
      "no RAPL energy counters: {} {}; the CPU has no Intel/AMD RAPL driver loaded (intel_rapl_common), this "
      "is a "
      "VM that does not expose RAPL, or the container does not mount /sys/class/powercap (if the host's tree "
      "is "
      "bind-mounted elsewhere, set JOULE_POWERCAP_ROOT to it)",
      root, what);
}

// Since Linux 5.10 energy_uj is mode 0400 (the PLATYPUS power side channel), so this is the common failure.
Error permission_error(const std::string& path, const std::string& zone_dir) {
  return Error(
      ErrorCode::kPermissionDenied,
      fmt::format(
          "cannot read {}: permission denied; RAPL energy counters are readable only by root since "
          "Linux 5.10 (CVE-2020-8694, PLATYPUS). Run as root, or grant read access (until the next "
          "reboot) with: sudo chmod a+r {}/intel-rapl:*/energy_uj {}/intel-rapl:*/intel-rapl:*/energy_uj",
          path, zone_dir, zone_dir));
}

Result<std::string> read_name(const std::string& zone_path) {
  auto content = JOULE_TRY(read_text_file(zone_path + "/name"));
  return std::string(trim(content));
}

// One energy counter (a package or its DRAM domain) and the state that makes its readings monotonic.
// Not thread-safe: the owning RaplCpu serialises calls with its counter lock.
class Counter {
 public:
  // Reads max_energy_range_uj and a first energy_uj (the origin), so permission problems show at open.
  static Result<Counter> open(const std::string& zone_path, const std::string& zone_dir, double max_power_w) {
    const std::string max_path = zone_path + "/max_energy_range_uj";
    auto max_content = JOULE_TRY(read_text_file(max_path));
    auto max_range_uj = JOULE_TRY(parse_uj(max_path, max_content));
    if (max_range_uj == 0) {
      return fail(ErrorCode::kParse, "{}: the counter range must be positive, got 0", max_path);
    }
    Counter counter(zone_path + "/energy_uj", zone_dir, max_range_uj, max_power_w);
    auto raw_uj = JOULE_TRY(counter.read_raw_uj());
    counter.last_raw_uj_ = raw_uj;
    counter.last_read_ = std::chrono::steady_clock::now();
    counter.total_uj_ = raw_uj;
    return counter;
  }

  uint64_t max_range_uj() const { return max_range_uj_; }

  // Reads the counter and advances the cumulative total (a wrap adds the distance, a reset nothing).
  // @return the total in µJ since the counter's zero, with the resets seen so far. On error the state is
  // unchanged, so a failed read never loses or invents energy.
  Result<CpuEnergyReading> sample() {
    auto raw_uj = JOULE_TRY(read_raw_uj());
    const auto now = std::chrono::steady_clock::now();
    if (raw_uj >= last_raw_uj_) {
      total_uj_ += raw_uj - last_raw_uj_;
    } else {
      // Forward distance modulo max_range_uj + 1 (see the file comment for why + 1), if a wrap can explain
      // it.
      const uint64_t wrapped_uj = (max_range_uj_ - last_raw_uj_) + 1 + raw_uj;
      const double elapsed_s = to_seconds(now - last_read_);
      const double judged_s = std::max(elapsed_s, kMinJudgedIntervalS);
      const double wrapped_j = static_cast<double>(wrapped_uj) / 1e6;
      if (wrapped_j <= max_power_w_ * judged_s) {
        total_uj_ += wrapped_uj;
      } else {
        ++resets_;
        last_reset_ = fmt::format(
            "{} went back from {} to {} uJ in {:.3g} s: as a wrap that would be {:.0f} J, {} on average, "
            "more "
            "than the {:g} W a package can draw, so the counter was reset (CPU hot-plug, a firmware or "
            "virtual "
            "machine reset) and nothing is counted for that step",
            energy_path_, last_raw_uj_, raw_uj, elapsed_s, wrapped_j, power_text(wrapped_j / judged_s),
            max_power_w_);
        log().warn("RAPL: {}", last_reset_);
      }
    }
    last_raw_uj_ = raw_uj;
    last_read_ = now;
    return CpuEnergyReading{total_uj_ / 1000, resets_, last_reset_};
  }

 private:
  Counter(std::string energy_path, std::string zone_dir, uint64_t max_range_uj, double max_power_w)
      : energy_path_(std::move(energy_path)),
        zone_dir_(std::move(zone_dir)),
        max_range_uj_(max_range_uj),
        max_power_w_(max_power_w) {}

  Result<uint64_t> read_raw_uj() const {
    auto content = read_text_file(energy_path_);
    if (!content) {
      if (content.error().code() == ErrorCode::kPermissionDenied) {
        return tl::make_unexpected(permission_error(energy_path_, zone_dir_));
      }
      return tl::make_unexpected(content.error());
    }
    auto raw_uj = parse_uj(energy_path_, *content);
    if (raw_uj && *raw_uj > max_range_uj_) {
      // The modular arithmetic would be wrong; the kernel never does this, so say so rather than guess.
      return fail(ErrorCode::kDevice, "{} reads {} uJ, more than its max_energy_range_uj ({} uJ)",
                  energy_path_, *raw_uj, max_range_uj_);
    }
    return raw_uj;
  }

  std::string energy_path_;
  std::string zone_dir_;  // for the chmod hint in permission errors
  uint64_t max_range_uj_;
  double max_power_w_;
  uint64_t last_raw_uj_ = 0;
  std::chrono::steady_clock::time_point last_read_{};
  uint64_t total_uj_ = 0;
  uint64_t resets_ = 0;
  std::string last_reset_;
};

// One package. Owns a thread that samples its counters every period so that no wrap is missed between two
// user reads far apart. The thread and the public calls share counter_mutex_ (the base class lock is private
// to Cpu).
class RaplCpu final : public Cpu {
 public:
  RaplCpu(CpuInfo info, Counter package, std::optional<Counter> dram, Nanos period)
      : Cpu(std::move(info)), package_(std::move(package)), dram_(std::move(dram)), period_(period) {
    watcher_ = std::thread([this] { watch(); });
  }

  ~RaplCpu() override {
    {
      std::lock_guard lock(counter_mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    watcher_.join();
  }

  RaplCpu(const RaplCpu&) = delete;
  RaplCpu& operator=(const RaplCpu&) = delete;

 protected:
  Result<uint64_t> do_package_energy_mj() override {
    return do_package_reading().map([](const CpuEnergyReading& reading) { return reading.energy_mj; });
  }

  Result<uint64_t> do_dram_energy_mj() override {
    return do_dram_reading().map([](const CpuEnergyReading& reading) { return reading.energy_mj; });
  }

  Result<CpuEnergyReading> do_package_reading() override {
    std::lock_guard lock(counter_mutex_);
    return package_.sample();
  }

  Result<CpuEnergyReading> do_dram_reading() override {
    std::lock_guard lock(counter_mutex_);
    if (!dram_) {
      return fail(ErrorCode::kNotSupported, "{} has no DRAM energy domain", label());
    }
    return dram_->sample();
  }

 private:
  // Samples every counter each period until stopping_. Never throws: errors are left for the next user read
  // to report, and the counter state does not change on a failed read.
  void watch() noexcept {
    try {
      std::unique_lock lock(counter_mutex_);
      while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
        try {
          (void)package_.sample();
          if (dram_) {
            (void)dram_->sample();
          }
        } catch (...) {  // e.g. bad_alloc: skip this round, try again next period
        }
      }
    } catch (...) {  // the lock or wait failed: readings stay correct unless reads are a full wrap apart
    }
  }

  std::mutex counter_mutex_;  // guards package_, dram_ and stopping_
  std::condition_variable wake_;
  bool stopping_ = false;
  Counter package_;
  std::optional<Counter> dram_;
  Nanos period_;
  std::thread watcher_;  // last: starts only once everything it touches exists
};

struct Zone {
  int number = 0;
  std::string path;
};

// @return the directories in `dir` named `prefix` + a number, sorted by that number (so 10 follows 2).
Result<std::vector<Zone>> list_zones(const std::string& dir, std::string_view prefix) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return tl::make_unexpected(errno_error(ec.value(), "cannot list", dir));
  }
  std::vector<Zone> zones;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const auto number = zone_number(it->path().filename().string(), prefix);
    std::error_code ignored;                                // a dangling link is simply not a zone
    if (number && fs::is_directory(it->path(), ignored)) {  // follows the kernel's symlinks
      zones.push_back({*number, it->path().string()});
    }
  }
  if (ec) {
    return tl::make_unexpected(errno_error(ec.value(), "cannot list", dir));
  }
  std::sort(zones.begin(), zones.end(), [](const Zone& a, const Zone& b) { return a.number < b.number; });
  return zones;
}

struct ZoneTree {
  std::string zone_dir;  // the directory that holds intel-rapl:N
  std::vector<Zone> packages;
};

// Finds the package zones directly under `root`, else under `root`/intel-rapl.
Result<ZoneTree> find_packages(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return tl::make_unexpected(Error(ErrorCode::kNotFound, no_rapl_message(root, "does not exist")));
  }
  for (const std::string& zone_dir : {root, root + "/intel-rapl"}) {
    if (zone_dir != root && !fs::is_directory(zone_dir, ec)) {
      continue;
    }
    auto zones = list_zones(zone_dir, kZonePrefix);
    if (!zones) {
      return tl::make_unexpected(zones.error());
    }
    if (!zones->empty()) {
      return ZoneTree{zone_dir, std::move(*zones)};
    }
  }
  return tl::make_unexpected(Error(ErrorCode::kNotFound, no_rapl_message(root, "has no intel-rapl:N zones")));
}

Nanos choose_wrap_check_period(const RaplOptions& options, uint64_t smallest_range_uj) {
  if (options.wrap_check_period > Nanos(0)) {
    return options.wrap_check_period;
  }
  // At max_power_w the counter wraps in range_uj / max_power_w µs (1 kW: 1 µJ per ns). Check four times per
  // wrap.
  const double wrap_ns = static_cast<double>(smallest_range_uj) * 1e3 / options.max_power_w;
  const auto quarter_ns = static_cast<uint64_t>(std::min(wrap_ns / 4, 9e18));
  const auto max_ns = static_cast<uint64_t>(kMaxWrapCheckPeriod.count());
  return std::max(kMinWrapCheckPeriod, Nanos(static_cast<Nanos::rep>(std::min(quarter_ns, max_ns))));
}

Result<std::unique_ptr<Cpu>> open_package(const Zone& zone, const std::string& zone_dir,
                                          const std::string& name, const RaplOptions& options) {
  auto package = JOULE_TRY(Counter::open(zone.path, zone_dir, options.max_power_w));
  std::optional<Counter> dram;
  auto subzones = JOULE_TRY(list_zones(zone.path, fmt::format("{}{}:", kZonePrefix, zone.number)));
  for (const Zone& subzone : subzones) {
    auto subzone_name = JOULE_TRY(read_name(subzone.path));
    if (subzone_name == "dram") {
      auto counter = JOULE_TRY(Counter::open(subzone.path, zone_dir, options.max_power_w));
      dram = std::move(counter);
      break;
    }
  }
  uint64_t smallest_range_uj = package.max_range_uj();
  if (dram) {
    smallest_range_uj = std::min(smallest_range_uj, dram->max_range_uj());
  }
  const Nanos period = choose_wrap_check_period(options, smallest_range_uj);
  CpuInfo info{"rapl", zone.number, name, dram.has_value()};
  try {
    return std::unique_ptr<Cpu>(
        std::make_unique<RaplCpu>(std::move(info), std::move(package), std::move(dram), period));
  } catch (const std::system_error& error) {
    return fail(ErrorCode::kInternal, "cannot start the RAPL wraparound thread for {}: {}", zone.path,
                error.what());
  }
}

}  // namespace

Result<std::vector<std::unique_ptr<Cpu>>> open_rapl_cpus(const RaplOptions& options) {
  if (options.wrap_check_period < Nanos(0)) {
    return fail(ErrorCode::kInvalidArgument, "the RAPL wrap check period must not be negative, got {} ns",
                options.wrap_check_period.count());
  }
  if (!(options.max_power_w > 0 && std::isfinite(options.max_power_w))) {
    return fail(ErrorCode::kInvalidArgument,
                "the most a RAPL package can draw must be a positive number of watts, "
                "got {}",
                options.max_power_w);
  }
  auto tree = JOULE_TRY(find_packages(options.powercap_root));
  std::vector<std::unique_ptr<Cpu>> cpus;
  for (const Zone& zone : tree.packages) {
    auto name = JOULE_TRY(read_name(zone.path));
    // psys (platform) zones measure the whole SoC/board, not a package: counting them would double-count.
    if (name == "psys") {
      continue;
    }
    auto cpu = JOULE_TRY(open_package(zone, tree.zone_dir, name, options));
    cpus.push_back(std::move(cpu));
  }
  if (cpus.empty()) {
    return tl::make_unexpected(Error(
        ErrorCode::kNotFound, no_rapl_message(tree.zone_dir, "has only psys (platform) zones, no package")));
  }
  return cpus;
}

}  // namespace joule::device
