// SPDX-License-Identifier: Apache-2.0
// NVIDIA Jetson boards through sysfs. The INA3221 monitors report each rail's voltage (mV) and current (mA)
// under hwmon (L4T 34 and later) or its power (mW) under iio (older L4T); devfreq gives the GPU's clocks in
// Hz; the GPU's `load` is in tenths of a percent; thermal zones are in m°C. Every conversion happens here.
#include "joule/device/jetson.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <stop_token>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "joule/core/file.hpp"
#include "joule/core/strings.hpp"

namespace joule::device {

namespace {

namespace fs = std::filesystem;

// Sysfs files hold a line; anything near this size is not the file the driver writes.
constexpr ReadLimit kJetsonSysfsLimit{"sysfs attribute", size_t{64} * 1024};

Result<std::string> jetson_read(const std::string& path) {
  return read_text_file(path, kJetsonSysfsLimit);
}

// @return the names of the entries of `dir` (files, folders, links), sorted; empty if it cannot be listed.
std::vector<std::string> jetson_list(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool jetson_exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// Reads a whole non-negative number from `path`; kParse names the file, what it should hold and what it
// holds.
Result<uint64_t> jetson_read_number(const std::string& path, std::string_view unit) {
  const std::string content = JOULE_TRY(jetson_read(path));
  const std::string_view text = trim(content);
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return fail(ErrorCode::kParse, "cannot parse {}: expected a whole number of {}, got {}", path, unit,
                quoted_excerpt(text));
  }
  return value;
}

// Device-tree strings end in NUL (compatible holds several, NUL-separated).
std::string jetson_device_tree_text(std::string content) {
  std::replace(content.begin(), content.end(), '\0', ' ');
  return std::string(trim(content));
}

uint32_t jetson_saturate_u32(uint64_t value) {
  return static_cast<uint32_t>(std::min<uint64_t>(value, std::numeric_limits<uint32_t>::max()));
}

// --- Rails ------------------------------------------------------------------------------------------------

// Where one rail's reading lives: power = voltage × current (hwmon), or power directly (iio).
struct JetsonRailSource {
  std::string name;
  std::string voltage_path;  // hwmon: inN_input, mV
  std::string current_path;  // hwmon: currN_input, mA
  std::string power_path;    // iio: in_powerN_input, mW

  Result<uint32_t> read_mw() const {
    if (!power_path.empty()) {
      return jetson_saturate_u32(JOULE_TRY(jetson_read_number(power_path, "milliwatts")));
    }
    const uint64_t voltage_mv = JOULE_TRY(jetson_read_number(voltage_path, "millivolts"));
    const uint64_t current_ma = JOULE_TRY(jetson_read_number(current_path, "milliamperes"));
    return jetson_saturate_u32(voltage_mv * current_ma / 1000);
  }
};

struct JetsonRailName {
  std::string_view name;
  std::string_view shares_with;
};

// The GPU's rail on each board family, in order of preference, and what else it feeds.
constexpr std::array<JetsonRailName, 6> kJetsonGpuRails{{
    {"VDD_GPU", ""},                          // AGX Xavier
    {"GPU", ""},                              // Xavier NX and AGX Xavier (iio)
    {"POM_5V_GPU", ""},                       // Nano, TX2 NX
    {"VDD_SYS_GPU", ""},                      // TX2
    {"VDD_GPU_SOC", "SoC"},                   // AGX Orin
    {"VDD_CPU_GPU_CV", "CPU and CV engines"}  // Orin NX and Orin Nano
}};
// The whole module's input rail: includes every other rail.
constexpr std::array<std::string_view, 2> kJetsonModuleRails{"VDD_IN", "POM_5V_IN"};

std::optional<JetsonRailName> jetson_gpu_rail(std::string_view name) {
  for (const JetsonRailName& candidate : kJetsonGpuRails) {
    if (to_lower(candidate.name) == to_lower(name)) {
      return candidate;
    }
  }
  return std::nullopt;
}

bool jetson_module_rail(std::string_view name) {
  return std::any_of(kJetsonModuleRails.begin(), kJetsonModuleRails.end(),
                     [&](std::string_view candidate) { return to_lower(candidate) == to_lower(name); });
}

// Reads a rail's label file. Labels are single words; an empty one is a broken driver or tree.
Result<std::string> jetson_rail_label(const std::string& path) {
  const std::string content = JOULE_TRY(jetson_read(path));
  const std::string label(trim(content));
  if (label.empty()) {
    return fail(ErrorCode::kParse, "{} is empty: the rail has no name", path);
  }
  return label;
}

// The channels of one INA3221 hwmon folder: inN_label, inN_input (mV), currN_input (mA).
Result<void> jetson_hwmon_rails(const std::string& hwmon, std::vector<JetsonRailSource>& rails) {
  for (const std::string& file : jetson_list(hwmon)) {
    if (!file.starts_with("in") || !file.ends_with("_label")) {
      continue;
    }
    const std::string channel = file.substr(2, file.size() - 2 - std::string_view("_label").size());
    JetsonRailSource rail;
    rail.name = JOULE_TRY(jetson_rail_label(fmt::format("{}/{}", hwmon, file)));
    if (rail.name == "NC") {
      continue;  // a channel the board leaves unconnected
    }
    rail.voltage_path = fmt::format("{}/in{}_input", hwmon, channel);
    rail.current_path = fmt::format("{}/curr{}_input", hwmon, channel);
    rails.push_back(std::move(rail));
  }
  return {};
}

// The channels of one older INA3221 iio device: rail_name_N, in_powerN_input (mW).
Result<void> jetson_iio_rails(const std::string& iio, std::vector<JetsonRailSource>& rails) {
  for (const std::string& file : jetson_list(iio)) {
    if (!file.starts_with("rail_name_")) {
      continue;
    }
    const std::string channel = file.substr(std::string_view("rail_name_").size());
    JetsonRailSource rail;
    rail.name = JOULE_TRY(jetson_rail_label(fmt::format("{}/{}", iio, file)));
    rail.power_path = fmt::format("{}/in_power{}_input", iio, channel);
    rails.push_back(std::move(rail));
  }
  return {};
}

struct JetsonRailScan {
  std::string layout;  // "hwmon" or "iio"
  std::vector<JetsonRailSource> rails;
};

// Every rail of every INA3221 under <root>/sys/bus/i2c/drivers/ina3221*/<device>/.
Result<JetsonRailScan> jetson_scan_rails(const std::string& root) {
  const std::string drivers = root + "/sys/bus/i2c/drivers";
  JetsonRailScan scan;
  bool monitor_found = false;
  for (const std::string& driver : jetson_list(drivers)) {
    if (!driver.starts_with("ina3221")) {
      continue;
    }
    for (const std::string& device : jetson_list(fmt::format("{}/{}", drivers, driver))) {
      const std::string device_dir = fmt::format("{}/{}/{}", drivers, driver, device);
      for (const std::string& hwmon : jetson_list(device_dir + "/hwmon")) {
        if (hwmon.starts_with("hwmon")) {
          monitor_found = true;
          scan.layout = "hwmon";
          JOULE_TRY(jetson_hwmon_rails(fmt::format("{}/hwmon/{}", device_dir, hwmon), scan.rails));
        }
      }
      for (const std::string& entry : jetson_list(device_dir)) {
        if (entry.starts_with("iio:device")) {
          monitor_found = true;
          scan.layout = scan.layout.empty() ? "iio" : scan.layout;
          JOULE_TRY(jetson_iio_rails(fmt::format("{}/{}", device_dir, entry), scan.rails));
        }
      }
    }
  }
  if (!monitor_found) {
    return fail(
        ErrorCode::kNotFound,
        "no INA3221 power monitor under {}/ina3221*: the board's rails cannot be read (is the ina3221 "
        "driver loaded, and is /sys mounted in this container?)",
        drivers);
  }
  return scan;
}

// --- The GPU's other sysfs nodes --------------------------------------------------------------------------

// The GPU's devfreq node: "57000000.gpu" (Nano), "17000000.gp10b" (TX2), "17000000.gv11b" (Xavier),
// "17000000.ga10b" (Orin, L4T 35), "17000000.gpu" (Orin, L4T 36). Only the Tegra names mark a board as a
// Jetson: other SoCs have GPU devfreq nodes too (Mali's "ff9a0000.gpu").
constexpr std::array<std::string_view, 6> kJetsonTegraGpuDevfreqNames{
    "gv11b", "ga10b", "gp10b", "gm20b", "17000000.gpu", "57000000.gpu"};

bool jetson_tegra_gpu_devfreq_name(std::string_view name) {
  return std::any_of(kJetsonTegraGpuDevfreqNames.begin(), kJetsonTegraGpuDevfreqNames.end(),
                     [&](std::string_view part) { return name.find(part) != std::string_view::npos; });
}

bool jetson_gpu_devfreq_name(std::string_view name) {
  return jetson_tegra_gpu_devfreq_name(name) || name.find("gpu") != std::string_view::npos;
}

// @return the GPU's devfreq folder, "" if none.
std::string jetson_find_devfreq(const std::string& root) {
  const std::string devfreq = root + "/sys/class/devfreq";
  for (const std::string& name : jetson_list(devfreq)) {
    if (jetson_gpu_devfreq_name(name)) {
      return fmt::format("{}/{}", devfreq, name);
    }
  }
  return "";
}

// @return the file holding the GPU's load (‰), "" if none.
std::string jetson_find_load(const std::string& root, const std::string& devfreq) {
  std::vector<std::string> candidates;
  if (!devfreq.empty()) {
    candidates.push_back(devfreq + "/device/load");
  }
  candidates.push_back(root + "/sys/devices/gpu.0/load");
  candidates.push_back(root + "/sys/devices/platform/gpu.0/load");
  for (const std::string& candidate : candidates) {
    if (jetson_exists(candidate)) {
      return candidate;
    }
  }
  return "";
}

// @return the GPU thermal zone's temp file (m°C), "" if none.
std::string jetson_find_thermal(const std::string& root) {
  const std::string thermal = root + "/sys/class/thermal";
  for (const std::string& zone : jetson_list(thermal)) {
    if (!zone.starts_with("thermal_zone")) {
      continue;
    }
    auto type = jetson_read(fmt::format("{}/{}/type", thermal, zone));
    if (type) {
      const std::string lower = to_lower(trim(*type));
      if (lower == "gpu-therm" || lower == "gpu-thermal") {
        return fmt::format("{}/{}/temp", thermal, zone);
      }
    }
  }
  return "";
}

std::string jetson_model(const std::string& root) {
  auto model = jetson_read(root + "/proc/device-tree/model");
  if (model) {
    std::string text = jetson_device_tree_text(*model);
    if (!text.empty()) {
      return text;
    }
  }
  return "NVIDIA Jetson";
}

// Writes `value` to a sysfs attribute (O_TRUNC: sysfs ignores it, a copied tree needs it). kPermissionDenied
// says how to get the right.
Result<void> jetson_write(const std::string& path, uint64_t value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) {
    const int saved = errno;
    Error error = errno_error(saved, "cannot open", path);
    if (error.code() == ErrorCode::kPermissionDenied) {
      return fail(ErrorCode::kPermissionDenied,
                  "{}. Changing a Jetson's GPU clocks needs root: run joule as root (e.g. with sudo)",
                  error.message());
    }
    return tl::make_unexpected(std::move(error));
  }
  const std::string text = std::to_string(value);
  const ssize_t written = ::write(fd, text.data(), text.size());
  const int saved = errno;
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) {
    return tl::make_unexpected(
        errno_error(written < 0 ? saved : EIO, fmt::format("cannot write {} to", value), path));
  }
  return {};
}

// --- The GPU
// ------------------------------------------------------------------------------------------------

struct JetsonPaths {
  JetsonRailSource gpu_rail;
  std::string devfreq;  // "" if none
  std::string load;     // "" if none
  std::string thermal;  // "" if none
};

class JetsonGpu final : public Gpu {
 public:
  JetsonGpu(GpuInfo info, JetsonPaths paths, std::shared_ptr<Clock> clock, double sampling_period_s)
      : Gpu(std::move(info)), paths_(std::move(paths)), clock_(std::move(clock)) {
    (void)sample();  // energy counts from here (a failure shows at the first energy_mj())
    if (sampling_period_s > 0) {
      const auto period = std::chrono::duration<double>(sampling_period_s);
      sampler_ = std::jthread([this, period](const std::stop_token& stop) {
        std::mutex wait_mutex;
        std::condition_variable_any wake;
        std::unique_lock lock(wait_mutex);
        while (!stop.stop_requested()) {
          // Wakes at the period, or at once when the destructor asks the thread to stop.
          (void)wake.wait_for(lock, stop, period, [] { return false; });
          if (!stop.stop_requested()) {
            (void)sample();  // a failed sample is skipped; energy_mj() reports the failure when it reads
          }
        }
      });
    }
  }

 protected:
  Result<uint64_t> do_energy_mj() override {
    const double energy_mj = JOULE_TRY(sample());
    return static_cast<uint64_t>(std::floor(energy_mj));
  }

  Result<uint32_t> do_power_mw() override { return read_gpu_rail(); }

  Result<PowerLimitConstraints> do_power_limit_constraints() override {
    return tl::unexpected(no_power_limit());
  }
  Result<uint32_t> do_power_limit_mw() override { return tl::unexpected(no_power_limit()); }
  Result<void> do_set_power_limit_mw(uint32_t /*power_limit_mw*/) override {
    return tl::unexpected(no_power_limit());
  }

  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override {
    const std::vector<uint64_t> hz = JOULE_TRY(available_hz());
    std::vector<uint32_t> mhz;
    mhz.reserve(hz.size());
    for (const uint64_t value : hz) {
      mhz.push_back(jetson_saturate_u32(value / 1'000'000));
    }
    std::sort(mhz.begin(), mhz.end(), std::greater<>());
    mhz.erase(std::unique(mhz.begin(), mhz.end()), mhz.end());
    return mhz;
  }

  Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    const std::vector<uint32_t> clocks = JOULE_TRY(do_supported_sm_clocks_mhz());
    if (clocks.empty() || min_mhz < clocks.back() || max_mhz > clocks.front()) {
      return fail(ErrorCode::kOutOfRange, "SM clock range {}-{} MHz is outside {}'s supported {}-{} MHz",
                  min_mhz, max_mhz, label(), clocks.empty() ? 0 : clocks.back(),
                  clocks.empty() ? 0 : clocks.front());
    }
    if (!original_hz_) {
      // What reset_sm_clocks puts back: the range in force before joule's first lock.
      const uint64_t min_hz = JOULE_TRY(jetson_read_number(paths_.devfreq + "/min_freq", "hertz"));
      const uint64_t max_hz = JOULE_TRY(jetson_read_number(paths_.devfreq + "/max_freq", "hertz"));
      original_hz_ = std::make_pair(min_hz, max_hz);
    }
    return write_range(uint64_t{min_mhz} * 1'000'000, uint64_t{max_mhz} * 1'000'000,
                       fmt::format("cannot lock the SM clock of {} to {}-{} MHz", label(), min_mhz, max_mhz));
  }

  Result<void> do_reset_sm_clocks() override {
    const std::vector<uint64_t> hz = JOULE_TRY(available_hz());
    const auto [lowest, highest] = std::minmax_element(hz.begin(), hz.end());
    const auto range = original_hz_.value_or(std::make_pair(*lowest, *highest));
    JOULE_TRY(
        write_range(range.first, range.second, fmt::format("cannot reset the SM clock of {}", label())));
    original_hz_.reset();
    return {};
  }

  Result<double> do_temperature_c() override {
    if (paths_.thermal.empty()) {
      return tl::unexpected(telemetry_not_supported(TelemetryField::kTemperature,
                                                    "no thermal zone of type GPU-therm or gpu-thermal"));
    }
    const std::string content = JOULE_TRY(jetson_read(paths_.thermal));
    const std::string_view text = trim(content);
    int64_t millidegrees = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), millidegrees);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      return fail(ErrorCode::kParse,
                  "cannot parse {}: expected a whole number of millidegrees Celsius, got {}", paths_.thermal,
                  quoted_excerpt(text));
    }
    return static_cast<double>(millidegrees) / 1000.0;
  }

  Result<uint32_t> do_sm_clock_mhz() override {
    if (paths_.devfreq.empty()) {
      return tl::unexpected(telemetry_not_supported(TelemetryField::kSmClock, "no GPU devfreq node"));
    }
    const uint64_t hz = JOULE_TRY(jetson_read_number(paths_.devfreq + "/cur_freq", "hertz"));
    return jetson_saturate_u32(hz / 1'000'000);
  }

  Result<uint32_t> do_gpu_utilization_pct() override {
    if (paths_.load.empty()) {
      return tl::unexpected(telemetry_not_supported(TelemetryField::kGpuUtilization, "no GPU load file"));
    }
    const uint64_t permille = JOULE_TRY(jetson_read_number(paths_.load, "tenths of a percent"));
    if (permille > 1000) {
      return fail(ErrorCode::kParse, "{} holds {}, more than 1000 (100 %)", paths_.load, permille);
    }
    return static_cast<uint32_t>((permille + 5) / 10);
  }

 private:
  Result<uint32_t> read_gpu_rail() const {
    auto power = paths_.gpu_rail.read_mw();
    if (!power && power.error().code() == ErrorCode::kNotFound) {
      return fail(
          ErrorCode::kNotFound,
          "the GPU rail {} of {} has disappeared: {} (was the INA3221 driver unbound, or the sysfs tree "
          "unmounted?)",
          paths_.gpu_rail.name, label(), power.error().message());
    }
    if (!power) {
      return tl::make_unexpected(power.error().with_context(
          fmt::format("cannot read the GPU rail {} of {}", paths_.gpu_rail.name, label())));
    }
    return power;
  }

  // Reads the rail and adds the trapezoid since the previous sample. @return the energy so far, mJ.
  Result<double> sample() {
    const uint32_t power_mw = JOULE_TRY(read_gpu_rail());
    const Nanos now = clock_->now();
    std::lock_guard lock(integral_mutex_);
    if (last_time_) {
      const double dt_s = std::chrono::duration<double>(now - *last_time_).count();
      if (dt_s > 0) {
        energy_mj_ += (last_power_mw_ + static_cast<double>(power_mw)) / 2.0 * dt_s;
      }
    }
    if (!last_time_ || now >= *last_time_) {
      last_time_ = now;
      last_power_mw_ = static_cast<double>(power_mw);
    }
    return energy_mj_;
  }

  Error no_power_limit() const {
    return Error(
        ErrorCode::kNotSupported,
        fmt::format("{} has no power limit joule can set: a Jetson's power budget is its nvpmodel power "
                    "mode (nvpmodel -q shows it, sudo nvpmodel -m N changes it)",
                    label()));
  }

  Result<std::vector<uint64_t>> available_hz() const {
    if (paths_.devfreq.empty()) {
      return fail(ErrorCode::kNotSupported, "{} has no GPU devfreq node: its clocks cannot be listed or set",
                  label());
    }
    const std::string path = paths_.devfreq + "/available_frequencies";
    const std::string content = JOULE_TRY(jetson_read(path));
    std::vector<uint64_t> hz;
    std::string_view rest = trim(content);
    while (!rest.empty()) {
      const size_t space = rest.find_first_of(" \t\n");
      const std::string_view word = rest.substr(0, space);
      uint64_t value = 0;
      const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
      if (ec != std::errc() || end != word.data() + word.size()) {
        return fail(ErrorCode::kParse, "cannot parse {}: expected frequencies in hertz, got {}", path,
                    quoted_excerpt(word));
      }
      hz.push_back(value);
      rest = space == std::string_view::npos ? std::string_view() : trim(rest.substr(space));
    }
    if (hz.empty()) {
      return fail(ErrorCode::kParse, "{} lists no frequency", path);
    }
    return hz;
  }

  // Sets devfreq's range. The kernel refuses min above max, so min first goes to the lowest frequency,
  // then max, then min: every step is a valid range whatever the range before.
  Result<void> write_range(uint64_t min_hz, uint64_t max_hz, const std::string& action) {
    const std::vector<uint64_t> hz = JOULE_TRY(available_hz());
    const uint64_t lowest = *std::min_element(hz.begin(), hz.end());
    for (const auto& [file, value] :
         {std::pair{"/min_freq", lowest}, std::pair{"/max_freq", max_hz}, std::pair{"/min_freq", min_hz}}) {
      auto written = jetson_write(paths_.devfreq + file, value);
      if (!written) {
        return tl::make_unexpected(written.error().with_context(action));
      }
    }
    return {};
  }

  JetsonPaths paths_;
  std::shared_ptr<Clock> clock_;
  std::optional<std::pair<uint64_t, uint64_t>> original_hz_;  // min, max Hz before the first lock
  std::mutex integral_mutex_;
  std::optional<Nanos> last_time_;
  double last_power_mw_ = 0;
  double energy_mj_ = 0;
  std::jthread sampler_;  // last: stopped and joined before the members it uses go
};

std::string jetson_scope_text(const JetsonRail& rail) {
  return rail.shares_with.empty() ? "GPU only" : fmt::format("shared with the {}", rail.shares_with);
}

}  // namespace

bool looks_like_jetson(const std::string& sysfs_root) {
  if (auto compatible = jetson_read(sysfs_root + "/proc/device-tree/compatible")) {
    if (compatible->find("nvidia,tegra") != std::string::npos) {
      return true;
    }
  }
  const std::vector<std::string> nodes = jetson_list(sysfs_root + "/sys/class/devfreq");
  return std::any_of(nodes.begin(), nodes.end(), jetson_tegra_gpu_devfreq_name);
}

namespace {

// The board as `scan` found it: board.rails[i] is scan.rails[i], read now and classified.
Result<JetsonBoard> jetson_board_from(const std::string& sysfs_root, const JetsonRailScan& scan) {
  JetsonBoard board;
  board.model = jetson_model(sysfs_root);
  board.layout = scan.layout;
  board.devfreq = jetson_find_devfreq(sysfs_root);
  for (const JetsonRailSource& source : scan.rails) {
    JetsonRail rail;
    rail.name = source.name;
    auto power = source.read_mw();
    if (!power) {
      return tl::make_unexpected(
          power.error().with_context(fmt::format("cannot read the rail {}", source.name)));
    }
    rail.power_mw = *power;
    if (const auto gpu = jetson_gpu_rail(source.name)) {
      rail.scope = JetsonRailScope::kGpu;
      rail.shares_with = gpu->shares_with;
    } else if (jetson_module_rail(source.name)) {
      rail.scope = JetsonRailScope::kModule;
    }
    board.rails.push_back(std::move(rail));
  }
  // The preferred GPU rail (a GPU-only one before a shared one), and the first module rail.
  for (const JetsonRailName& preferred : kJetsonGpuRails) {
    for (size_t i = 0; i < board.rails.size() && !board.gpu_rail; ++i) {
      if (to_lower(board.rails[i].name) == to_lower(preferred.name)) {
        board.gpu_rail = i;
      }
    }
  }
  for (size_t i = 0; i < board.rails.size() && !board.module_rail; ++i) {
    if (board.rails[i].scope == JetsonRailScope::kModule) {
      board.module_rail = i;
    }
  }
  return board;
}

}  // namespace

Result<JetsonBoard> read_jetson_board(const std::string& sysfs_root) {
  const JetsonRailScan scan = JOULE_TRY(jetson_scan_rails(sysfs_root));
  return jetson_board_from(sysfs_root, scan);
}

Result<JetsonGpus> open_jetson_gpus(const JetsonOptions& options, const VisibleDevices& visible) {
  if (!std::isfinite(options.sampling_period_s) || options.sampling_period_s < 0) {
    return fail(ErrorCode::kInvalidArgument,
                "the Jetson energy sampling period must be a non-negative number of seconds, not {}",
                options.sampling_period_s);
  }
  const std::string& root = options.sysfs_root;
  if (!looks_like_jetson(root)) {
    return fail(
        ErrorCode::kNotFound,
        "not a Jetson board: {}/proc/device-tree/compatible does not name nvidia,tegra and {}/sys/class/"
        "devfreq has no Tegra GPU node",
        root, root);
  }
  const JetsonRailScan scan = JOULE_TRY(jetson_scan_rails(root));
  JetsonBoard board = JOULE_TRY(jetson_board_from(root, scan));
  if (!board.gpu_rail) {
    std::vector<std::string> names;
    for (const JetsonRail& rail : board.rails) {
      names.push_back(rail.name);
    }
    return fail(
        ErrorCode::kNotFound,
        "the Jetson board's power monitors have no GPU rail (one of VDD_GPU, GPU, POM_5V_GPU, VDD_SYS_GPU, "
        "VDD_GPU_SOC, VDD_CPU_GPU_CV); the rails found: {}",
        names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
  }
  const JetsonRail& gpu_rail = board.rails[*board.gpu_rail];
  JetsonPaths paths;
  paths.gpu_rail = scan.rails[*board.gpu_rail];  // the files the GPU reads on every call
  paths.devfreq = board.devfreq;
  paths.load = jetson_find_load(root, board.devfreq);
  paths.thermal = jetson_find_thermal(root);

  GpuInfo info;
  info.backend = "jetson";
  info.name = board.model;
  info.has_energy_counter = true;  // integrated in software: the detail says so
  auto clock = options.clock ? options.clock
                             : std::shared_ptr<Clock>(std::shared_ptr<Clock>{}, &SteadyClock::instance());

  JetsonGpus opened;
  std::string module = "no module rail";
  if (board.module_rail) {
    module = fmt::format("module power on {} (the whole module, GPU included: never add the two)",
                         board.rails[*board.module_rail].name);
  }
  const std::string sampling =
      options.sampling_period_s > 0
          ? fmt::format("every {} ms", std::llround(options.sampling_period_s * 1000))
          : std::string("at each energy read");
  opened.detail = fmt::format(
      "{} ({} rails): GPU power from rail {} ({}); {}; energy integrated in software from "
      "the GPU rail's power, sampled {}",
      board.model, board.layout, gpu_rail.name, jetson_scope_text(gpu_rail), module, sampling);
  // One GPU, without a UUID: selectable as index 0 only.
  const std::vector<int> order = JOULE_TRY(resolve_visible_devices(visible, {""}));
  if (!order.empty()) {
    opened.gpus.push_back(std::make_unique<JetsonGpu>(std::move(info), std::move(paths), std::move(clock),
                                                      options.sampling_period_s));
  }
  opened.board = std::move(board);
  return opened;
}

}  // namespace joule::device
