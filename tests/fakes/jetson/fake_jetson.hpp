// SPDX-License-Identifier: Apache-2.0
// A fake NVIDIA Jetson sysfs tree for tests of the Jetson backend (no Jetson runs CI): the INA3221 power
// monitors in either layout, the GPU's devfreq node, its load and its thermal zone, and the device tree's
// compatible and model strings, under a temporary root that JetsonOptions::sysfs_root (or
// JOULE_JETSON_SYSFS_ROOT) points at.
//
//   test::FakeJetson board;
//   board.set_device_tree("NVIDIA Jetson AGX Orin", {"nvidia,p3701-0000", "nvidia,tegra234"});
//   board.add_hwmon_rail("1-0040", 1, "VDD_GPU_SOC", 5072, 1200);  // mV, mA
//   board.add_devfreq("17000000.ga10b", {306000000, 1300500000}, 1300500000);
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace joule::test {

class FakeJetson {
 public:
  /// The folder holding sys/ and proc/: JetsonOptions::sysfs_root.
  const std::string& root() const { return dir_.path(); }

  /// Writes `content` to `relative` under the root (creating folders). @return the full path.
  std::string write(const std::string& relative, const std::string& content) const {
    return dir_.write(relative, content);
  }
  /// Removes a file or folder under the root (a rail disappearing, a missing label).
  void remove(const std::string& relative) const { std::filesystem::remove_all(root() + "/" + relative); }

  /// proc/device-tree/model and compatible, NUL-terminated as the kernel writes them.
  void set_device_tree(const std::string& model, std::initializer_list<std::string> compatible) const {
    write("proc/device-tree/model", model + std::string(1, '\0'));
    std::string joined;
    for (const std::string& entry : compatible) {
      joined += entry + std::string(1, '\0');
    }
    write("proc/device-tree/compatible", joined);
  }

  /// The hwmon folder of INA3221 `device` (e.g. "1-0040"), as L4T 34 and later lay it out.
  static std::string hwmon_dir(const std::string& device) {
    return "sys/bus/i2c/drivers/ina3221/" + device + "/hwmon/hwmon" + std::to_string(device.back() - '0' + 3);
  }
  /// One hwmon channel: inN_label, inN_input (mV), currN_input (mA).
  void add_hwmon_rail(const std::string& device, int channel, const std::string& label, uint64_t millivolts,
                      uint64_t milliamperes) const {
    const std::string dir = hwmon_dir(device);
    write(dir + "/in" + std::to_string(channel) + "_label", label + "\n");
    set_hwmon_reading(device, channel, millivolts, milliamperes);
  }
  void set_hwmon_reading(const std::string& device, int channel, uint64_t millivolts,
                         uint64_t milliamperes) const {
    const std::string dir = hwmon_dir(device);
    write(dir + "/in" + std::to_string(channel) + "_input", std::to_string(millivolts) + "\n");
    write(dir + "/curr" + std::to_string(channel) + "_input", std::to_string(milliamperes) + "\n");
  }

  /// The iio folder of INA3221 `device` (e.g. "6-0040"), as older L4T (32.x: Nano, TX2, Xavier) lays it out.
  static std::string iio_dir(const std::string& device) {
    return "sys/bus/i2c/drivers/ina3221x/" + device + "/iio:device0";
  }
  /// One iio channel: rail_name_N and in_powerN_input (mW).
  void add_iio_rail(const std::string& device, int channel, const std::string& label,
                    uint64_t milliwatts) const {
    write(iio_dir(device) + "/rail_name_" + std::to_string(channel), label + "\n");
    set_iio_power(device, channel, milliwatts);
  }
  void set_iio_power(const std::string& device, int channel, uint64_t milliwatts) const {
    write(iio_dir(device) + "/in_power" + std::to_string(channel) + "_input",
          std::to_string(milliwatts) + "\n");
  }

  static std::string devfreq_dir(const std::string& name) { return "sys/class/devfreq/" + name; }
  /// The GPU's devfreq node (Hz): available_frequencies, cur_freq, and min/max_freq set to the full range.
  void add_devfreq(const std::string& name, const std::vector<uint64_t>& available_hz,
                   uint64_t current_hz) const {
    std::string list;
    for (const uint64_t hz : available_hz) {
      list += (list.empty() ? "" : " ") + std::to_string(hz);
    }
    const std::string dir = devfreq_dir(name);
    write(dir + "/available_frequencies", list + "\n");
    write(dir + "/cur_freq", std::to_string(current_hz) + "\n");
    write(dir + "/min_freq", std::to_string(available_hz.front()) + "\n");
    write(dir + "/max_freq", std::to_string(available_hz.back()) + "\n");
  }

  /// A thermal zone of this type, in m°C.
  void add_thermal(int zone, const std::string& type, int64_t millidegrees) const {
    const std::string dir = "sys/class/thermal/thermal_zone" + std::to_string(zone);
    write(dir + "/type", type + "\n");
    write(dir + "/temp", std::to_string(millidegrees) + "\n");
  }

  /// @return the content of a file under the root, without its trailing newline.
  std::string read(const std::string& relative) const {
    std::ifstream file(root() + "/" + relative);
    std::string line;
    std::getline(file, line);
    return line;
  }

 private:
  TempDir dir_;
};

}  // namespace joule::test
