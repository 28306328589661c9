// SPDX-License-Identifier: Apache-2.0
// joule/sim/trace.hpp — the Zeus NSDI'23 traces: training convergence × per-GPU power, merged as the
// original simulator merges them, and the paper's workload defaults.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::sim {

/// One row of the merged trace: one training run of one configuration, for one target metric, at one
/// power limit.
struct TraceRow {
  std::string dataset;
  std::string network;
  std::string optimizer;
  int batch_size = 0;
  int run = 0;               ///< which repetition of the training run
  double target_metric = 0;  ///< the metric this row's target_epoch is for
  double target_epoch = 0;   ///< epochs (1-based count) to reach target_metric; NaN if never reached
  double power_limit_w = 0;
  double time_per_epoch_s = 0;
  double average_power_w = 0;
  double energy_per_epoch_j = 0;  ///< time_per_epoch_s × average_power_w, as the original computes it
};

/// The merged trace of one GPU: the inner join of the training trace and that GPU's power trace on
/// (dataset, network, batch_size, optimizer), in the original's row order (training-trace order, then
/// power-trace order).
struct Trace {
  std::string gpu;  ///< e.g. "v100"; empty for traces loaded from arbitrary files
  std::vector<TraceRow> rows;
  /// Per dataset, the largest batch size in the power trace (which caps the paper's b0 on this GPU).
  std::map<std::string, int> largest_power_batch_size;
  /// The largest power limit of the joined rows left out of `rows` (workload_trace() keeps one dataset's),
  /// W; 0 when none was left out.
  double left_out_max_power_limit_w = 0;
  /// @return the largest power limit of the whole trace, W (the original's MaxPower for the cost), rows
  /// left out included.
  double max_power_limit_w() const;
};

/// Loads and merges a training trace and a power trace (CSV files with the Zeus columns). Errors name the
/// file, line and column: a missing column, a non-numeric or empty cell (target_epoch may be "nan").
Result<Trace> load_trace(const std::string& train_csv_path, const std::string& power_csv_path);

/// The same from CSV text. @param train_source / power_source names used in error messages. @param
/// only_dataset when given, `rows` keeps that dataset's rows only (every row is still read and checked, and
/// max_power_limit_w() still covers them all).
Result<Trace> parse_trace(std::string_view train_csv, const std::string& train_source,
                          std::string_view power_csv, const std::string& power_source,
                          const std::optional<std::string>& only_dataset = std::nullopt);

/// @return the trace of a GPU from the copies built into joule ("v100", "a40", "p100", "rtx6000"), or from
/// `trace_dir` (summary_train.csv and summary_power_<gpu>.csv) if given. kNotFound lists the known GPUs.
Result<Trace> gpu_trace(std::string_view gpu, const std::optional<std::string>& trace_dir = std::nullopt);

/// @return gpu_trace() with the rows of `workload`'s dataset only (a paper workload, as paper_job() takes
/// it; any other name: the whole trace, and paper_job() says what is wrong): what one simulated run needs,
/// read ~3× faster (the merged rows of every dataset dominated a one-run process). Simulating `workload` on
/// it gives exactly what it gives on the whole trace.
Result<Trace> workload_trace(std::string_view gpu, std::string_view workload,
                             const std::optional<std::string>& trace_dir = std::nullopt);

/// @return the GPUs with a built-in power trace.
const std::vector<std::string>& trace_gpus();

/// A recurring training job: a workload trained to a target metric (Zeus's legacy `Job`).
struct Job {
  std::string dataset;
  std::string network;
  std::string optimizer;
  double target_metric = 0;
  int max_epochs = 0;
  int default_batch_size = 0;  ///< b0
};

/// The paper's defaults for a workload (spec zeus.md §C), with b0 capped at the largest batch size the
/// GPU's trace has. @param workload "cifar100", "imagenet", "squad", "librispeech", "movielens-1m"
/// ("movielens"), "sentiment140". kNotFound lists the known workloads.
Result<Job> paper_job(const Trace& trace, std::string_view workload);

/// @return the workload keys, in the paper's order.
const std::vector<std::string>& paper_workloads();

}  // namespace joule::sim
