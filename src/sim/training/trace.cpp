// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/trace.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/core/numeric.hpp"
#include "joule/core/strings.hpp"
#include "joule/device/sim_gpu.hpp"

namespace joule::embedded {
std::optional<std::string_view> zeus_train_trace(std::string_view file_name);
}

namespace joule::sim {

namespace {

struct PaperWorkload {
  std::string key;
  std::string dataset;
  std::string network;
  std::string optimizer;
  double target_metric;
  int max_epochs;
  int default_batch_size;
};

const std::vector<PaperWorkload>& paper_table() {
  static const std::vector<PaperWorkload> table = {
      {"cifar100", "cifar100", "shufflenetv2", "adadelta", 0.6, 100, 1024},
      {"imagenet", "imagenet", "resnet50", "adadelta", 0.65, 100, 256},
      {"squad", "squad", "bert_base_uncased", "adamw", 84.0, 6, 32},
      {"librispeech", "librispeech", "deepspeech2", "adamw", 40.0, 16, 192},
      {"movielens-1m", "movielens-1m", "ncf", "adam", 0.41, 100, 1024},
      {"sentiment140", "sentiment140", "bert_base_uncased", "adamw", 0.84, 10, 128},
  };
  return table;
}

// Column positions of a CSV table, looked up once.
template <size_t N>
Result<std::array<size_t, N>> columns(const csv::Table& table, const std::array<const char*, N>& names) {
  std::array<size_t, N> positions{};
  for (size_t i = 0; i < N; ++i) {
    auto column = JOULE_TRY(table.column(names[i]));
    positions[i] = column;
  }
  return positions;
}

struct PowerRow {
  double power_limit_w;
  double time_per_epoch_s;
  double average_power_w;
};

// Reads a number as pandas' read_csv does (the original simulator's numbers come from there, and pandas'
// parser rounds differently from strtod), with our parser's error messages for anything that is not one.
Result<double> pandas_number(const csv::Table::Row& row, size_t column) {
  if (const auto value = numeric::pandas_parse_double(trim(row.text(column)))) {
    return *value;
  }
  return row.number(column);  // "nan", or an error naming file, line and column
}

// Reads a double that must be present and finite (the power trace has no missing values).
Result<double> finite_number(const csv::Table::Row& row, size_t column) {
  auto value = pandas_number(row, column);
  if (!value) {
    return value;
  }
  if (!std::isfinite(*value)) {
    return tl::make_unexpected(row.error_at(
        column, fmt::format("expected a finite number, got {}", quoted_excerpt(row.text(column)))));
  }
  return value;
}

// Reads a finite number that must be positive: power limits, epoch times and powers (a zero or negative one
// would make a configuration free, and the optimizers would choose it).
Result<double> positive_number(const csv::Table::Row& row, size_t column) {
  auto value = finite_number(row, column);
  if (value && !(*value > 0)) {
    return tl::make_unexpected(row.error_at(
        column, fmt::format("expected a positive number, got {}", quoted_excerpt(trim(row.text(column))))));
  }
  return value;
}

// Reads an integer in [lowest, int's largest]: batch sizes (lowest 1) and run numbers (lowest 0), which the
// trace keeps as int.
Result<int> bounded_integer(const csv::Table::Row& row, size_t column, int lowest, std::string_view what) {
  auto value = JOULE_TRY(row.integer(column));
  if (value < lowest || value > std::numeric_limits<int>::max()) {
    return tl::make_unexpected(row.error_at(
        column, fmt::format("expected {} from {} to {}, got {}", what, lowest,
                            std::numeric_limits<int>::max(), quoted_excerpt(trim(row.text(column))))));
  }
  return static_cast<int>(value);
}

}  // namespace

namespace {

// The built-in trace of GPU `key` (lower case, one of trace_gpus()).
Result<Trace> builtin_gpu_trace(const std::string& key, const std::optional<std::string>& only_dataset) {
  const auto train = joule::embedded::zeus_train_trace("summary_train.csv");
  const auto power = device::sim::builtin_power_trace(key);
  if (!train || !power) {
    return fail(ErrorCode::kInternal, "the built-in traces of {} are missing", key);
  }
  auto trace = JOULE_TRY(parse_trace(*train, "<built-in summary_train.csv>", *power,
                                     fmt::format("<built-in summary_power_{}.csv>", key), only_dataset));
  trace.gpu = key;
  return trace;
}

}  // namespace

double Trace::max_power_limit_w() const {
  double max_w = left_out_max_power_limit_w;
  for (const auto& row : rows) {
    max_w = std::max(max_w, row.power_limit_w);
  }
  return max_w;
}

Result<Trace> parse_trace(std::string_view train_csv, const std::string& train_source,
                          std::string_view power_csv, const std::string& power_source,
                          const std::optional<std::string>& only_dataset) {
  auto power = JOULE_TRY(csv::parse(power_csv, power_source));
  const auto power_columns = JOULE_TRY(columns<7>(power, {"dataset", "network", "batch_size", "optimizer",
                                                          "power_limit", "time_per_epoch", "average_power"}));
  const auto& pc = power_columns;
  // (dataset, network, batch size, optimizer) → power rows in file order.
  std::map<std::tuple<std::string, std::string, int, std::string>, std::vector<PowerRow>> by_config;
  for (size_t r = 0; r < power.row_count(); ++r) {
    const auto row = power.row(r);
    auto batch_size = JOULE_TRY(bounded_integer(row, pc[2], 1, "a batch size"));
    PowerRow values{};
    for (auto [column, target] :
         {std::pair{pc[4], &values.power_limit_w}, std::pair{pc[5], &values.time_per_epoch_s},
          std::pair{pc[6], &values.average_power_w}}) {
      auto value = JOULE_TRY(positive_number(row, column));
      *target = value;
    }
    by_config[{std::string(row.text(pc[0])), std::string(row.text(pc[1])), batch_size,
               std::string(row.text(pc[3]))}]
        .push_back(values);
  }

  auto train = JOULE_TRY(csv::parse(train_csv, train_source));
  const auto train_columns = JOULE_TRY(columns<7>(
      train, {"dataset", "network", "batch_size", "optimizer", "run", "target_metric", "target_epoch"}));
  const auto& tc = train_columns;
  Trace trace;
  for (const auto& [config, rows] : by_config) {
    int& largest = trace.largest_power_batch_size[std::get<0>(config)];
    largest = std::max(largest, std::get<2>(config));
  }
  std::tuple<std::string, std::string, int, std::string> key;
  for (size_t r = 0; r < train.row_count(); ++r) {
    const auto row = train.row(r);
    auto batch_size = bounded_integer(row, tc[2], 1, "a batch size");
    auto run = bounded_integer(row, tc[4], 0, "a run number");
    auto target_metric = finite_number(row, tc[5]);
    auto target_epoch = pandas_number(row, tc[6]);  // "nan" when the run never reached the target
    if (!batch_size || !run) {
      return tl::make_unexpected(!batch_size ? batch_size.error() : run.error());
    }
    if (!target_metric || !target_epoch) {
      return tl::make_unexpected(!target_metric ? target_metric.error() : target_epoch.error());
    }
    // Epochs count from 1; NaN (never reached) is the only non-number allowed.
    if (!std::isnan(*target_epoch) && !(std::isfinite(*target_epoch) && *target_epoch > 0)) {
      return tl::make_unexpected(row.error_at(
          tc[6], fmt::format("expected a positive number of epochs or nan (never reached), got {}",
                             quoted_excerpt(trim(row.text(tc[6]))))));
    }
    // One key, refilled per row: its strings keep their capacity (no allocation per training row).
    std::get<0>(key).assign(row.text(tc[0]));
    std::get<1>(key).assign(row.text(tc[1]));
    std::get<2>(key) = *batch_size;
    std::get<3>(key).assign(row.text(tc[3]));
    const auto found = by_config.find(key);
    if (found == by_config.end()) {
      continue;  // inner join: a configuration without power measurements is not usable
    }
    if (only_dataset && row.text(tc[0]) != *only_dataset) {
      for (const PowerRow& power_row : found->second) {
        trace.left_out_max_power_limit_w =
            std::max(trace.left_out_max_power_limit_w, power_row.power_limit_w);
      }
      continue;
    }
    for (const PowerRow& power_row : found->second) {
      TraceRow merged;
      merged.dataset = row.text(tc[0]);
      merged.network = row.text(tc[1]);
      merged.optimizer = row.text(tc[3]);
      merged.batch_size = *batch_size;
      merged.run = *run;
      merged.target_metric = *target_metric;
      merged.target_epoch = *target_epoch;
      merged.power_limit_w = power_row.power_limit_w;
      merged.time_per_epoch_s = power_row.time_per_epoch_s;
      merged.average_power_w = power_row.average_power_w;
      merged.energy_per_epoch_j = power_row.time_per_epoch_s * power_row.average_power_w;
      trace.rows.push_back(std::move(merged));
    }
  }
  if (trace.rows.empty()) {
    return fail(ErrorCode::kInvalidArgument,
                "{} and {} have no (dataset, network, batch_size, optimizer) in common", train_source,
                power_source);
  }
  return trace;
}

Result<Trace> load_trace(const std::string& train_csv_path, const std::string& power_csv_path) {
  auto train = JOULE_TRY(read_text_file(train_csv_path, read_limits::kSimulatorTrace));
  auto power = JOULE_TRY(read_text_file(power_csv_path, read_limits::kSimulatorTrace));
  return parse_trace(train, train_csv_path, power, power_csv_path);
}

const std::vector<std::string>& trace_gpus() {
  static const std::vector<std::string> gpus = {"v100", "a40", "p100", "rtx6000"};
  return gpus;
}

Result<Trace> gpu_trace(std::string_view gpu, const std::optional<std::string>& trace_dir) {
  const std::string key = to_lower(gpu);
  if (std::find(trace_gpus().begin(), trace_gpus().end(), key) == trace_gpus().end() && !trace_dir) {
    return fail(ErrorCode::kNotFound, "unknown GPU '{}' (traces exist for: {})", printable_excerpt(gpu),
                fmt::join(trace_gpus(), ", "));
  }
  if (!trace_dir) {
    return builtin_gpu_trace(key, std::nullopt);
  }
  auto trace = JOULE_TRY(
      load_trace(*trace_dir + "/summary_train.csv", fmt::format("{}/summary_power_{}.csv", *trace_dir, key)));
  trace.gpu = key;
  return trace;
}

Result<Trace> workload_trace(std::string_view gpu, std::string_view workload,
                             const std::optional<std::string>& trace_dir) {
  std::string key = to_lower(workload);
  if (key == "movielens") {
    key = "movielens-1m";
  }
  const auto& table = paper_table();
  const auto entry = std::find_if(table.begin(), table.end(), [&](const auto& e) { return e.key == key; });
  const std::string lower_gpu = to_lower(gpu);
  if (entry == table.end() || trace_dir ||
      std::find(trace_gpus().begin(), trace_gpus().end(), lower_gpu) == trace_gpus().end()) {
    return gpu_trace(gpu, trace_dir);  // the whole trace (or gpu_trace's error)
  }
  return builtin_gpu_trace(lower_gpu, entry->dataset);
}

const std::vector<std::string>& paper_workloads() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> list;
    for (const auto& workload : paper_table()) {
      list.push_back(workload.key);
    }
    return list;
  }();
  return keys;
}

Result<Job> paper_job(const Trace& trace, std::string_view workload) {
  std::string key = to_lower(workload);
  if (key == "movielens") {
    key = "movielens-1m";
  }
  for (const auto& entry : paper_table()) {
    if (entry.key != key) {
      continue;
    }
    bool has_runs = false;
    for (const auto& row : trace.rows) {
      has_runs = has_runs || (row.dataset == entry.dataset && row.network == entry.network &&
                              row.optimizer == entry.optimizer);
    }
    const auto largest_found = trace.largest_power_batch_size.find(entry.dataset);
    const int largest = largest_found == trace.largest_power_batch_size.end() ? 0 : largest_found->second;
    if (!has_runs || largest == 0) {
      return fail(ErrorCode::kNotFound, "the {} trace has no runs of {}",
                  trace.gpu.empty() ? "given" : trace.gpu, key);
    }
    return Job{entry.dataset,       entry.network,    entry.optimizer,
               entry.target_metric, entry.max_epochs, std::min(entry.default_batch_size, largest)};
  }
  return fail(ErrorCode::kNotFound, "unknown workload '{}' (known: {})", printable_excerpt(workload),
              fmt::join(paper_workloads(), ", "));
}

}  // namespace joule::sim
