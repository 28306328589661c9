// SPDX-License-Identifier: Apache-2.0
// Workloads driven by the built-in Zeus power traces.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "joule/core/csv.hpp"
#include "joule/device/sim_gpu.hpp"

namespace joule::embedded {
std::optional<std::string_view> zeus_power_traces(std::string_view file_name);
}

namespace joule::device::sim {

namespace {

// (dataset, optimizer, batch size) → rows sorted by power limit, unscaled.
using TraceTable = std::map<std::tuple<std::string, std::string, int>, std::vector<TracePoint>>;

Result<TraceTable> parse_trace(std::string_view text, const std::string& source) {
  auto table = JOULE_TRY(csv::parse(text, source));
  size_t columns[6];
  const char* names[6] = {"dataset",     "optimizer",      "batch_size",
                          "power_limit", "time_per_epoch", "average_power"};
  for (size_t i = 0; i < 6; ++i) {
    auto column = JOULE_TRY(table.column(names[i]));
    columns[i] = column;
  }
  TraceTable traces;
  for (size_t r = 0; r < table.row_count(); ++r) {
    const auto row = table.row(r);
    auto batch_size = row.integer(columns[2]);
    auto power_limit = row.number(columns[3]);
    auto time = row.number(columns[4]);
    auto power = row.number(columns[5]);
    for (const auto* value : {&power_limit, &time, &power}) {
      if (!*value) {
        return tl::make_unexpected(value->error());
      }
    }
    if (!batch_size) {
      return tl::make_unexpected(batch_size.error());
    }
    traces[{std::string(row.text(columns[0])), std::string(row.text(columns[1])),
            static_cast<int>(*batch_size)}]
        .push_back({*power_limit, *time, *power});
  }
  for (auto& [key, points] : traces) {
    std::sort(points.begin(), points.end(),
              [](const TracePoint& a, const TracePoint& b) { return a.power_limit_w < b.power_limit_w; });
  }
  return traces;
}

// @return `text` with the data lines of datasets other than `dataset` left blank (the CSV reader skips blank
// lines, so line numbers stay those of the file): the built-in traces list the dataset first. A simulated GPU
// runs one workload, and parsing the whole trace cost every simulated start ~0.4 ms (issue 24).
std::string rows_of_dataset(std::string_view text, std::string_view dataset) {
  std::string kept;
  kept.reserve(text.size());
  bool header = true;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    if (header || (line.size() > dataset.size() && line.compare(0, dataset.size(), dataset) == 0 &&
                   line[dataset.size()] == ',')) {
      kept.append(line);
    }
    kept.push_back('\n');
    header = false;
    start = end + 1;
  }
  return kept;
}

// Parses each built-in trace once per dataset; thread-safe.
Result<const TraceTable*> builtin_trace(const std::string& trace, const std::string& dataset) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, TraceTable> cache;
  std::lock_guard lock(mutex);
  if (auto found = cache.find({trace, dataset}); found != cache.end()) {
    return &found->second;
  }
  const std::string file = fmt::format("summary_power_{}.csv", trace);
  const auto text = builtin_power_trace(trace);
  if (!text) {
    return fail(ErrorCode::kInternal, "no built-in power trace {}", file);
  }
  if (text->substr(0, 8) != "dataset,") {
    return fail(ErrorCode::kInternal, "the built-in power trace {} does not list the dataset first", file);
  }
  auto parsed = JOULE_TRY(parse_trace(rows_of_dataset(*text, dataset), "<built-in " + file + ">"));
  return &cache.emplace(std::pair{trace, dataset}, std::move(parsed)).first->second;
}

double lerp(double a, double b, double t) {
  return a + (b - a) * t;
}

}  // namespace

std::optional<std::string_view> builtin_power_trace(std::string_view gpu) {
  return joule::embedded::zeus_power_traces(fmt::format("summary_power_{}.csv", gpu));
}

Result<std::vector<int>> available_batch_sizes(const GpuModel& model, const WorkloadInfo& workload) {
  auto traces = JOULE_TRY(builtin_trace(model.trace, workload.dataset));
  std::vector<int> sizes;
  for (const auto& [key, points] : *traces) {
    if (std::get<0>(key) == workload.dataset && std::get<1>(key) == workload.optimizer) {
      sizes.push_back(std::get<2>(key));
    }
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

Result<std::shared_ptr<const TraceWorkload>> make_trace_workload(const GpuModel& model,
                                                                 const WorkloadInfo& workload,
                                                                 std::optional<int> batch_size) {
  auto sizes = JOULE_TRY(available_batch_sizes(model, workload));
  if (sizes.empty()) {
    return fail(ErrorCode::kNotFound, "the {} power trace has no {} runs", model.key, workload.key);
  }
  int chosen = 0;
  if (batch_size) {
    if (std::find(sizes.begin(), sizes.end(), *batch_size) == sizes.end()) {
      return fail(ErrorCode::kNotFound, "no power trace for {} at batch size {} on {} (available: {})",
                  workload.key, *batch_size, model.key, fmt::join(sizes, ", "));
    }
    chosen = *batch_size;
  } else {
    // The paper's b0, capped by the largest batch size that fit on this GPU.
    chosen = sizes.front();
    for (const int size : sizes) {
      if (size <= workload.default_batch_size) {
        chosen = size;
      }
    }
  }
  const TraceTable* traces = *builtin_trace(model.trace, workload.dataset);
  std::vector<TracePoint> points = traces->at({workload.dataset, workload.optimizer, chosen});
  for (auto& point : points) {
    point.power_limit_w *= model.trace_power_scale;
    point.average_power_w *= model.trace_power_scale;
    point.time_per_epoch_s /= model.trace_speed_scale;
  }
  return std::make_shared<const TraceWorkload>(model, workload, chosen, std::move(points));
}

TraceWorkload::TraceWorkload(const GpuModel& model, const WorkloadInfo& info, int batch_size,
                             std::vector<TracePoint> points)
    : description_(fmt::format("{} ({}, batch size {})", info.key, info.network, batch_size)),
      batch_size_(batch_size),
      iterations_per_epoch_(std::ceil(static_cast<double>(info.samples_per_epoch) / batch_size)),
      idle_power_w_(model.idle_power_w),
      max_sm_clock_mhz_(model.max_sm_clock_mhz),
      points_(std::move(points)),
      compute_share_(0.5) {
  if (points_.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "a trace workload needs at least one trace point");
  }
  // Fit the compute-bound share from how much slower the lowest limit runs at its clock ratio.
  const TracePoint& low = points_.front();
  const TracePoint& top = points_.back();
  const double r_low = clock_ratio_for_power(low.average_power_w);
  if (r_low < 0.97 && top.time_per_epoch_s > 0) {
    const double slowdown = low.time_per_epoch_s / top.time_per_epoch_s;
    compute_share_ = std::clamp((slowdown - 1.0) / (1.0 / r_low - 1.0), 0.05, 1.0);
  }
}

std::string TraceWorkload::description() const {
  return description_;
}

TracePoint TraceWorkload::interpolate(double power_limit_w) const {
  if (power_limit_w <= points_.front().power_limit_w) {
    return points_.front();
  }
  if (power_limit_w >= points_.back().power_limit_w) {
    return points_.back();
  }
  const auto upper = std::lower_bound(points_.begin(), points_.end(), power_limit_w,
                                      [](const TracePoint& p, double w) { return p.power_limit_w < w; });
  const auto lower = upper - 1;
  const double t = (power_limit_w - lower->power_limit_w) / (upper->power_limit_w - lower->power_limit_w);
  return {power_limit_w, lerp(lower->time_per_epoch_s, upper->time_per_epoch_s, t),
          lerp(lower->average_power_w, upper->average_power_w, t)};
}

double TraceWorkload::clock_ratio_for_power(double power_w) const {
  const double top_power = points_.back().average_power_w;
  if (top_power <= idle_power_w_) {
    return 1.0;
  }
  const double share = std::clamp((power_w - idle_power_w_) / (top_power - idle_power_w_), 1e-6, 1.0);
  return std::cbrt(share);
}

OperatingPoint Workload::at_memory_clock(double power_limit_w, std::optional<double> locked_sm_clock_mhz,
                                         double /*memory_clock_ratio*/) const {
  return at(power_limit_w, locked_sm_clock_mhz);
}

OperatingPoint TraceWorkload::at_memory_clock(double power_limit_w, std::optional<double> locked_sm_clock_mhz,
                                              double memory_clock_ratio) const {
  OperatingPoint op = at(power_limit_w, locked_sm_clock_mhz);
  const double ratio = std::clamp(memory_clock_ratio, 1e-3, 1.0);
  const double memory_share = 1.0 - compute_share_;
  op.iteration_time_s *= compute_share_ + memory_share / ratio;
  op.power_w = idle_power_w_ + (op.power_w - idle_power_w_) * (compute_share_ + memory_share * ratio);
  return op;
}

OperatingPoint TraceWorkload::at(double power_limit_w, std::optional<double> locked_sm_clock_mhz) const {
  const TracePoint point = interpolate(power_limit_w);
  const double r_limit = clock_ratio_for_power(point.average_power_w);
  OperatingPoint op{point.average_power_w, point.time_per_epoch_s / iterations_per_epoch_,
                    max_sm_clock_mhz_ * r_limit};
  if (locked_sm_clock_mhz) {
    const double r_lock = std::clamp(*locked_sm_clock_mhz / max_sm_clock_mhz_, 1e-3, 1.0);
    if (r_lock < r_limit) {
      const double top_power = points_.back().average_power_w;
      op.power_w = idle_power_w_ + (top_power - idle_power_w_) * r_lock * r_lock * r_lock;
      op.iteration_time_s *= compute_share_ * r_limit / r_lock + 1.0 - compute_share_;
      op.sm_clock_mhz = *locked_sm_clock_mhz;
    }
  }
  return op;
}

}  // namespace joule::device::sim
