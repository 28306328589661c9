// SPDX-License-Identifier: Apache-2.0
// The simulator's GPU models and workloads.
#include <fmt/format.h>

#include "joule/core/strings.hpp"
#include "joule/device/sim_gpu.hpp"

namespace joule::device::sim {

namespace {

GpuModel make_model(std::string key, std::string name, std::string trace, uint32_t min_w, uint32_t max_w,
                    uint32_t min_mhz, uint32_t max_mhz, double idle_w, bool counter,
                    std::string description) {
  GpuModel model;
  model.key = std::move(key);
  model.name = std::move(name);
  model.trace = std::move(trace);
  model.min_power_limit_mw = min_w * 1000;
  model.max_power_limit_mw = max_w * 1000;
  model.default_power_limit_mw = max_w * 1000;
  model.min_sm_clock_mhz = min_mhz;
  model.max_sm_clock_mhz = max_mhz;
  model.idle_power_w = idle_w;
  model.has_energy_counter = counter;
  model.description = std::move(description);
  return model;
}

// @return the entry of `list` whose key is `wanted` (already lower case), or kNotFound naming `what`.
template <class Entry>
Result<const Entry*> find_by_key(const std::vector<Entry>& list, const std::string& wanted,
                                 std::string_view asked, std::string_view what) {
  std::vector<std::string> keys;
  for (const auto& entry : list) {
    if (entry.key == wanted) {
      return &entry;
    }
    keys.push_back(entry.key);
  }
  return fail(ErrorCode::kNotFound, "unknown {} '{}' (known: {})", what, asked, fmt::join(keys, ", "));
}

}  // namespace

const std::vector<GpuModel>& gpu_models() {
  static const std::vector<GpuModel> models = [] {
    std::vector<GpuModel> list;
    list.push_back(make_model("v100", "Tesla V100-PCIE-32GB (simulated)", "v100", 100, 250, 135, 1380, 25,
                              true, "NVIDIA V100 (Volta), 100-250 W, Zeus V100 power trace"));
    list.push_back(make_model("a40", "NVIDIA A40 (simulated)", "a40", 100, 300, 210, 1740, 30, true,
                              "NVIDIA A40 (Ampere), 100-300 W, Zeus A40 power trace"));
    list.push_back(
        make_model("p100", "Tesla P100-PCIE-16GB (simulated)", "p100", 125, 250, 544, 1328, 25, false,
                   "NVIDIA P100 (Pascal, no energy counter: energy from power samples), 125-250 W, "
                   "Zeus P100 power trace"));
    list.push_back(make_model("rtx6000", "Quadro RTX 6000 (simulated)", "rtx6000", 100, 260, 300, 2100, 20,
                              true, "NVIDIA Quadro RTX 6000 (Turing), 100-260 W, Zeus RTX 6000 power trace"));
    const uint32_t memory_clocks_mhz[] = {877, 7251, 715, 7000};  // as nvidia-smi reports them
    for (size_t i = 0; i < list.size(); ++i) {
      list[i].memory_clock_mhz = memory_clocks_mhz[i];
      list[i].lockable_memory_clocks_mhz = {memory_clocks_mhz[i]};
    }
    // GDDR6 boards list several memory clocks (nvidia-smi -q -d SUPPORTED_CLOCKS on an A40 and a Quadro RTX
    // 6000); HBM2 boards one.
    list[1].lockable_memory_clocks_mhz = {7251, 5001, 810, 405};
    list[3].lockable_memory_clocks_mhz = {7000, 5001, 810, 405};
    GpuModel generic =
        make_model("generic", "Generic 400 W GPU (simulated)", "a40", 150, 400, 210, 1980, 40, true,
                   "a modern 400 W-class GPU: the A40 trace with 4/3 the power and twice the speed");
    generic.trace_power_scale = 4.0 / 3.0;
    generic.trace_speed_scale = 2.0;
    generic.memory_clock_mhz = 1593;
    generic.lockable_memory_clocks_mhz = {1593};
    list.push_back(std::move(generic));
    return list;
  }();
  return models;
}

Result<const GpuModel*> find_gpu_model(std::string_view key) {
  return find_by_key(gpu_models(), to_lower(key), key, "simulated GPU");
}

const std::vector<WorkloadInfo>& workloads() {
  // Training-set sizes turn the traces' epoch times into iteration times. squad counts BERT features
  // (max length 384, stride 128); movielens-1m counts NCF's positives plus 4 sampled negatives each.
  static const std::vector<WorkloadInfo> list = {
      {"cifar100", "cifar100", "shufflenetv2", "adadelta", 1024, 50'000},
      {"imagenet", "imagenet", "resnet50", "adadelta", 256, 1'281'167},
      {"squad", "squad", "bert_base_uncased", "adamw", 32, 88'641},
      {"librispeech", "librispeech", "deepspeech2", "adamw", 192, 281'241},
      {"movielens-1m", "movielens-1m", "ncf", "adam", 1024, 4'970'845},
      {"sentiment140", "sentiment140", "bert_base_uncased", "adamw", 128, 1'600'000},
  };
  return list;
}

const WorkloadInfo& default_workload() {
  return workloads()[1];
}

Result<const WorkloadInfo*> find_workload(std::string_view key) {
  std::string wanted = to_lower(key);
  if (wanted == "movielens") {
    wanted = "movielens-1m";
  }
  return find_by_key(workloads(), wanted, key, "workload");
}

}  // namespace joule::device::sim
