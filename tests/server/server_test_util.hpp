// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the service's unit tests and the `joule serve` integration tests: the store URLs to run
// on, a synthetic training job (what a client reports epoch by epoch), and a Zeus-like job spec.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/optimize/batch_size.hpp"
#include "joule/store/store.hpp"

namespace joule::test {

namespace bso = optimize::batch_size;

/// The store URLs the parameterised tests run on: memory: always, SQLite in `dir` when that backend is
/// built, and $JOULE_TEST_STORE_URL if set (e.g. a PostgreSQL URL).
inline std::vector<std::string> store_urls(const std::string& dir) {
  std::vector<std::string> urls = {"memory:"};
  const std::string sqlite = "sqlite:" + dir + "/joule-server-test.db";
  if (store::open_store(sqlite)) {
    urls.push_back(sqlite);
  }
  if (const char* extra = std::getenv("JOULE_TEST_STORE_URL"); extra != nullptr && *extra != '\0') {
    urls.emplace_back(extra);
  }
  return urls;
}

/// @return the first line of `path`, or nullopt if it cannot be read (e.g. the PostgreSQL fixture's URL).
inline std::optional<std::string> read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line) || line.empty()) {
    return std::nullopt;
  }
  return line;
}

/// A deterministic training job: batch size b reaches the target metric after epochs_to_converge(b)
/// epochs (never, within max_epochs, for the largest), and each trial's epochs take a little longer or
/// shorter depending on the trial number, so the bandit sees varied rewards.
struct SyntheticTraining {
  static constexpr double kTarget = 0.5;

  static int64_t epochs_to_converge(int64_t batch_size) {
    switch (batch_size) {
      case 8:
        return 3;
      case 16:
        return 4;
      case 32:
        return 5;
      case 64:
        return 7;
      default:
        return 1000;
    }
  }

  static double epoch_time_s(int64_t batch_size, int64_t trial_number) {
    const double jitter = 1.0 + 0.05 * std::sin(static_cast<double>(trial_number) * 1.7);
    return (40.0 / static_cast<double>(batch_size) + 1.0) * jitter;
  }

  /// The cumulative result after `epoch` epochs of `trial`.
  static bso::TrainingResult result(const bso::TrialId& trial, int64_t epoch) {
    bso::TrainingResult result;
    result.job_id = trial.job_id;
    result.batch_size = trial.batch_size;
    result.trial_number = trial.trial_number;
    result.current_epoch = epoch;
    result.time_s = static_cast<double>(epoch) * epoch_time_s(trial.batch_size, trial.trial_number);
    result.energy_j = result.time_s * (150.0 + static_cast<double>(trial.batch_size));
    result.metric =
        kTarget * static_cast<double>(epoch) / static_cast<double>(epochs_to_converge(trial.batch_size));
    return result;
  }
};

/// A Zeus job spec over the synthetic training's batch sizes.
inline bso::JobSpec synthetic_spec(std::optional<std::string> job_id, std::optional<uint64_t> seed = 7) {
  bso::JobSpec spec;
  spec.job_id = std::move(job_id);
  spec.job_id_prefix = "synthetic";
  spec.batch_sizes = {8, 16, 32, 64, 128};
  spec.default_batch_size = 32;
  spec.max_epochs = 10;
  spec.target_metric = SyntheticTraining::kTarget;
  spec.mab_seed = seed;
  return spec;
}

inline bso::GpuConfig synthetic_gpu() {
  return bso::GpuConfig{300.0, 1, "NVIDIA A40"};
}

/// The register body Zeus's client sends (JobSpecFromClient).
inline nlohmann::json register_body(const bso::JobSpec& spec, const bso::GpuConfig& gpu) {
  nlohmann::json body = spec.to_json();
  body.update(gpu.to_json());
  return body;
}

}  // namespace joule::test
