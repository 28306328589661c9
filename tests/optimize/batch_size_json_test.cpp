// SPDX-License-Identifier: Apache-2.0
// JSON of the batch-size optimizer: Zeus's wire objects, and the job state's format, exact round trip and
// validation of malformed state.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "joule/optimize/batch_size.hpp"

#include "optimize/batch_size_internal.hpp"
#include "test_util.hpp"

namespace joule::optimize::batch_size {
namespace {

using nlohmann::json;

constexpr int64_t kStartNs = 1'700'000'000'000'000'000;

// The body a Zeus client POSTs to /jobs: JobSpec and GpuConfig fields in one object.
json register_body() {
  return json::parse(R"({
    "job_id": null, "job_id_prefix": "mnist", "batch_sizes": [64, 8, 32, 16], "default_batch_size": 32,
    "max_power": 300.0, "number_of_gpus": 2, "gpu_model": "NVIDIA A40", "an_unknown_key": 1
  })");
}

// ---- Wire objects
// ------------------------------------------------------------------------------------------

TEST(BatchSizeWireJson, JobSpecTakesZeusDefaultsAndSortsBatchSizes) {
  const JobSpec spec = value_or_throw(JobSpec::from_json(register_body()));
  JobSpec expected;
  expected.job_id_prefix = "mnist";
  expected.batch_sizes = {8, 16, 32, 64};
  expected.default_batch_size = 32;
  EXPECT_EQ(spec, expected);
  EXPECT_EQ(value_or_throw(GpuConfig::from_json(register_body())), (GpuConfig{300.0, 2, "NVIDIA A40"}));

  // to_json writes every field with Zeus's names; unset optionals are null.
  const json out = spec.to_json();
  EXPECT_EQ(out, json::parse(R"({
    "job_id": null, "job_id_prefix": "mnist", "batch_sizes": [8, 16, 32, 64], "default_batch_size": 32,
    "eta_knob": 0.5, "beta_knob": 2.0, "target_metric": 0.5, "higher_is_better_metric": true,
    "max_epochs": 100, "num_pruning_rounds": 2, "window_size": 0, "mab_prior_mean": 0.0,
    "mab_prior_precision": 0.0, "mab_num_explorations": 2, "mab_seed": null
  })"));
  EXPECT_EQ(value_or_throw(JobSpec::from_json(out)), spec);

  JobSpec full = spec;
  full.job_id = "mnist-1";
  full.beta_knob.reset();
  full.mab_seed = 18446744073709551615ULL;
  full.higher_is_better_metric = false;
  full.eta_knob = 0.1;
  EXPECT_EQ(value_or_throw(JobSpec::from_json(full.to_json())), full);
  EXPECT_EQ(full.to_json()["beta_knob"], nullptr);
  EXPECT_EQ(value_or_throw(GpuConfig::from_json(GpuConfig{250.5, 1, "V100"}.to_json())),
            (GpuConfig{250.5, 1, "V100"}));
}

TEST(BatchSizeWireJson, JobSpecErrorsNameTheField) {
  const auto check = [](const char* key, const json& value, const std::string& message) {
    json body = register_body();
    if (value.is_discarded()) {
      body.erase(key);
    } else {
      body[key] = value;
    }
    JOULE_EXPECT_ERROR(JobSpec::from_json(body), ErrorCode::kInvalidArgument, message);
  };
  const json removed(json::value_t::discarded);
  check("job_id_prefix", removed, "job_id_prefix: field required");
  check("job_id_prefix", 5, "job_id_prefix: str type expected");
  check("batch_sizes", removed, "batch_sizes: field required");
  check("batch_sizes", "8,16", "batch_sizes: value is not a valid list");
  check("batch_sizes", json::array({8, "a"}), "batch_sizes[1]: value is not a valid integer");
  check("batch_sizes", json::array(), "batch_sizes: Batch Sizes = [] is empty");
  check("default_batch_size", removed, "default_batch_size: field required");
  check("default_batch_size", nullptr, "default_batch_size: none is not an allowed value");
  check("default_batch_size", 24, "default_batch_size: Default BS(24) not in batch_sizes([8, 16, 32, 64]).");
  check("eta_knob", "high", "eta_knob: value is not a valid float");
  check("eta_knob", 2, "eta_knob: eta_knob should be in range [0,1]");
  check("beta_knob", -1,
        "beta_knob: Invalid beta_knob(-1.0). To disable early stop, set beta_knob = None to disable "
        "or positive value.");
  check("higher_is_better_metric", "yes", "higher_is_better_metric: value could not be parsed to a boolean");
  check("max_epochs", 1.5, "max_epochs: value is not a valid integer");
  check("max_epochs", 0, "max_epochs: ensure this value is greater than 0");
  check("mab_seed", -1, "mab_seed: ensure this value is greater than or equal to 0");
  check("mab_seed", "7", "mab_seed: value is not a valid integer");
  check("job_id", "other-1", "job_id: Job_id(other-1) does not start with prefix(mnist).");
  JOULE_EXPECT_ERROR(JobSpec::from_json(json::array()), ErrorCode::kInvalidArgument,
                     "value is not a valid dict");

  json body = register_body();
  body["beta_knob"] = nullptr;
  body["mab_seed"] = 3;
  const JobSpec spec = value_or_throw(JobSpec::from_json(body));
  EXPECT_FALSE(spec.beta_knob);
  EXPECT_EQ(spec.mab_seed, 3U);

  body = register_body();
  body.erase("gpu_model");
  JOULE_EXPECT_ERROR(GpuConfig::from_json(body), ErrorCode::kInvalidArgument, "gpu_model: field required");
  body["gpu_model"] = "";
  JOULE_EXPECT_ERROR(GpuConfig::from_json(body), ErrorCode::kInvalidArgument,
                     "gpu_model: Invalid gpu_model(). Shouldn't be empty.");
  body["gpu_model"] = "A40";
  body["max_power"] = -3;
  JOULE_EXPECT_ERROR(GpuConfig::from_json(body), ErrorCode::kInvalidArgument,
                     "max_power: ensure this value is greater than 0");
}

TEST(BatchSizeWireJson, TrialIdResultAndResponseUseZeusNames) {
  const TrialId id{"mnist-ab12cd34", 32, 3};
  EXPECT_EQ(id.to_json(),
            json::parse(R"({"job_id": "mnist-ab12cd34", "batch_size": 32, "trial_number": 3})"));
  EXPECT_EQ(value_or_throw(TrialId::from_json(id.to_json())), id);

  const TrainingResult result{"mnist-ab12cd34", 32, 3, 12.5, 3000.25, 0.93, 4};
  EXPECT_EQ(result.to_json(), json::parse(R"({"job_id": "mnist-ab12cd34", "batch_size": 32, "trial_number": 3,
      "time": 12.5, "energy": 3000.25, "metric": 0.93, "current_epoch": 4})"));
  EXPECT_EQ(value_or_throw(TrainingResult::from_json(result.to_json())), result);

  const ReportResponse response{true, false, "Train failed to converge within max_epoch(10)"};
  EXPECT_EQ(response.to_json(), json::parse(R"json({"stop_train": true, "converged": false,
                                "message": "Train failed to converge within max_epoch(10)"})json"));
  EXPECT_EQ(value_or_throw(ReportResponse::from_json(response.to_json())), response);

  json bad = result.to_json();
  bad.erase("energy");
  JOULE_EXPECT_ERROR(TrainingResult::from_json(bad), ErrorCode::kInvalidArgument, "energy: field required");
  bad = id.to_json();
  bad["trial_number"] = "3";
  JOULE_EXPECT_ERROR(TrialId::from_json(bad), ErrorCode::kInvalidArgument,
                     "trial_number: value is not a valid integer");
}

// ---- Job state -------------------------------------------------------------------------------------------

JobSpec state_spec() {
  JobSpec spec;
  spec.job_id = "job-1";
  spec.job_id_prefix = "job";
  spec.batch_sizes = {8, 16, 32};
  spec.default_batch_size = 16;
  spec.num_pruning_rounds = 1;
  spec.mab_num_explorations = 0;
  spec.beta_knob.reset();  // so that every result counts, whatever its cost
  spec.mab_seed = 42;
  return spec;
}

// A job in the MAB stage with awkward doubles in its results: trials 1–3 explore 16, 8, 32 (8 fails to
// converge), trial 4 is a MAB trial still running, trial 5 a MAB trial that failed.
BatchSizeJob mab_job() {
  BatchSizeJob job = value_or_throw(BatchSizeJob::create(state_spec(), GpuConfig{300, 1, "A40"}, 1));
  const double times_s[] = {0.1 + 0.2, 1.0 / 3.0, 5e-324};
  const double energies_j[] = {1e-300, 2.0 / 3.0 * 1e6, 123456.789};
  for (int i = 0; i < 3; ++i) {
    const TrialId id = value_or_throw(job.next_trial(kStartNs + i));
    const double metric = id.batch_size == 8 ? 0.1 : 0.9;
    value_or_throw(job.report(
        TrainingResult{id.job_id, id.batch_size, id.trial_number, times_s[i], energies_j[i], metric, 100},
        kStartNs + 100 + i));
  }
  value_or_throw(job.next_trial(kStartNs + 200));
  const TrialId failed = value_or_throw(job.next_trial(kStartNs + 300));
  value_or_throw(job.end_trial(failed, kStartNs + 400));
  return job;
}

TEST(BatchSizeStateJson, FormatOutline) {
  const BatchSizeJob job = mab_job();
  ASSERT_EQ(job.stage(), Stage::kMab);
  const json state = job.to_json();
  EXPECT_EQ(state["format"], "joule.optimize.batch_size.job");
  EXPECT_EQ(state["version"], 1);
  EXPECT_EQ(state["spec"], job.spec().to_json());
  EXPECT_EQ(state["gpu"], job.gpu().to_json());
  EXPECT_EQ(state["stage"], "MAB");
  EXPECT_EQ(state["min_cost_batch_size"], job.min_cost_batch_size());
  EXPECT_EQ(state["exp_default_batch_size"], 16);
  ASSERT_EQ(state["trials"].size(), 5U);
  EXPECT_EQ(state["trials"][0], json::parse(fmt::format(
                                    R"({{"trial_number": 1, "batch_size": 16, "type": "Exploration",
                                        "status": "Succeeded", "start_timestamp_unix_ns": {},
                                        "end_timestamp_unix_ns": {}, "time": 0.30000000000000004,
                                        "energy": 1e-300, "converged": true}})",
                                    kStartNs, kStartNs + 100)));
  EXPECT_EQ(state["trials"][3]["type"], "MAB");
  EXPECT_EQ(state["trials"][3]["status"], "Dispatched");
  EXPECT_EQ(state["trials"][3]["end_timestamp_unix_ns"], nullptr);
  EXPECT_EQ(state["trials"][3]["converged"], nullptr);
  EXPECT_EQ(state["trials"][4]["status"], "Failed");
  EXPECT_EQ(state["trials"][4]["time"], nullptr);
  // One observation per arm: infinite precisions are written as "inf".
  ASSERT_EQ(state["arms"].size(), 2U);
  EXPECT_EQ(state["arms"][0]["batch_size"], 16);
  EXPECT_EQ(state["arms"][0]["param_precision"], "inf");
  EXPECT_EQ(state["arms"][0]["reward_precision"], "inf");
  EXPECT_EQ(state["arms"][0]["num_observations"], 1);
  EXPECT_EQ(state["rng"]["bit_generator"], "PCG64");
  EXPECT_TRUE(state["rng"]["state"]["state"].is_string());
  EXPECT_TRUE(state["rng"]["state"]["inc"].is_string());
  EXPECT_TRUE(state["rng"]["has_uint32"].is_number_integer());
}

TEST(BatchSizeStateJson, FreshJobRngStateIsNumpysDefaultRng) {
  // numpy 1.24: np.random.default_rng(42).bit_generator.state
  const BatchSizeJob job = value_or_throw(BatchSizeJob::create(state_spec(), GpuConfig{300, 1, "A40"}, 1));
  const json state = job.to_json();
  EXPECT_EQ(state["rng"], json::parse(R"({"bit_generator": "PCG64",
      "state": {"state": "274674114334540486603088602300644985544",
                "inc": "332724090758049132448979897138935081983"},
      "has_uint32": 0, "uinteger": 0})"));
  EXPECT_EQ(state["min_cost"], nullptr);
  EXPECT_EQ(state["stage"], "Pruning");
  EXPECT_EQ(state["arms"], json::array());
}

TEST(BatchSizeStateJson, RoundTripIsExactToTheBit) {
  const BatchSizeJob job = mab_job();
  const std::string text = job.to_json().dump();
  const BatchSizeJob restored = value_or_throw(BatchSizeJob::from_json(json::parse(text)));
  EXPECT_TRUE(restored == job);
  EXPECT_EQ(restored.to_json().dump(), text);
  ASSERT_EQ(restored.trials().size(), job.trials().size());
  for (size_t i = 0; i < job.trials().size(); ++i) {
    if (job.trials()[i].time_s) {
      EXPECT_EQ(std::memcmp(&*restored.trials()[i].time_s, &*job.trials()[i].time_s, sizeof(double)), 0);
      EXPECT_EQ(std::memcmp(&*restored.trials()[i].energy_j, &*job.trials()[i].energy_j, sizeof(double)), 0);
    }
  }
  EXPECT_EQ(restored.rng_state(), job.rng_state());

  // Both continue identically.
  BatchSizeJob a = job;
  BatchSizeJob b = restored;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(value_or_throw(a.next_trial(kStartNs + 1000)), value_or_throw(b.next_trial(kStartNs + 1000)));
  }
  EXPECT_TRUE(a == b);
}

TEST(BatchSizeStateJson, BufferedGeneratorHalfSurvives) {
  json state = mab_job().to_json();
  state["rng"]["has_uint32"] = 1;
  state["rng"]["uinteger"] = 4000000000U;
  const BatchSizeJob job = value_or_throw(BatchSizeJob::from_json(state));
  EXPECT_TRUE(job.rng_state().has_uint32);
  EXPECT_EQ(job.rng_state().uinteger, 4000000000U);
  EXPECT_EQ(job.to_json()["rng"], state["rng"]);
}

TEST(BatchSizeStateJson, MalformedStateIsRejectedWithItsPath) {
  const json good = mab_job().to_json();
  ASSERT_TRUE(BatchSizeJob::from_json(good));
  const auto check = [&](auto mutate, const std::string& message) {
    json state = good;
    mutate(state);
    JOULE_EXPECT_ERROR(BatchSizeJob::from_json(state), ErrorCode::kParse, message);
  };
  JOULE_EXPECT_ERROR(BatchSizeJob::from_json(json::array()), ErrorCode::kParse, "value is not a valid dict");
  check([](json& s) { s["format"] = "zeus"; },
        "format: expected \"joule.optimize.batch_size.job\", got \"zeus\"");
  check([](json& s) { s["version"] = 2; },
        "version: state version 2 is not supported (this build reads version 1)");
  check([](json& s) { s.erase("rng"); }, "rng: field required");
  check([](json& s) { s["rng"]["bit_generator"] = "MT19937"; },
        "rng.bit_generator: expected \"PCG64\", got \"MT19937\"");
  check([](json& s) { s["rng"]["state"]["inc"] = "12"; }, "rng.state.inc: PCG64's increment must be odd");
  check([](json& s) { s["rng"]["state"]["state"] = "12a"; },
        "rng.state.state: \"12a\" is not a 128-bit unsigned decimal integer");
  check([](json& s) { s["rng"]["state"]["state"] = "340282366920938463463374607431768211456"; },
        "rng.state.state: \"340282366920938463463374607431768211456\" is not a 128-bit unsigned decimal "
        "integer");
  check([](json& s) { s["rng"]["state"]["state"] = 5; }, "rng.state.state: str type expected");
  check([](json& s) { s["rng"]["has_uint32"] = 2; }, "rng.has_uint32: expected 0 or 1, got 2");
  check([](json& s) { s["rng"]["uinteger"] = -1; }, "rng.uinteger: -1 is not a 32-bit unsigned integer");
  check([](json& s) { s["spec"]["eta_knob"] = 3; }, "spec: eta_knob: eta_knob should be in range [0,1]");
  check([](json& s) { s["spec"]["job_id"] = nullptr; }, "spec.job_id: a stored job must have a job id");
  check([](json& s) { s["spec"].erase("batch_sizes"); }, "spec.batch_sizes: field required");
  check([](json& s) { s["gpu"]["number_of_gpus"] = 0; },
        "gpu: number_of_gpus: ensure this value is greater than 0");
  check([](json& s) { s["stage"] = "Done"; }, "stage: expected one of Pruning, MAB, got \"Done\"");
  check([](json& s) { s["min_cost_batch_size"] = 24; },
        "min_cost_batch_size: batch size 24 is not one of the job's batch sizes [8, 16, 32]");
  check([](json& s) { s["trials"] = json::object(); }, "trials: value is not a valid list");
  check([](json& s) { s["trials"][1]["trial_number"] = 5; },
        "trials[1].trial_number: expected 2 (trials are stored in order, numbered from 1), got 5");
  check([](json& s) { s["trials"][2]["status"] = "Done"; },
        "trials[2].status: expected one of Dispatched, Succeeded, Failed, got \"Done\"");
  check([](json& s) { s["trials"][2]["type"] = "Random"; },
        "trials[2].type: expected one of Exploration, Concurrent, MAB, got \"Random\"");
  check([](json& s) { s["trials"][0]["batch_size"] = 24; },
        "trials[0].batch_size: batch size 24 is not one of the job's batch sizes [8, 16, 32]");
  check([](json& s) { s["trials"][0]["time"] = nullptr; },
        "trials[0]: a Succeeded trial needs time, energy, converged and end_timestamp_unix_ns");
  check([](json& s) { s["trials"][0]["energy"] = -1; }, "trials[0].energy: must be a finite number >= 0");
  check([](json& s) { s["trials"][3]["time"] = 1.0; },
        "trials[3]: a Dispatched trial has no time, energy or converged");
  check([](json& s) { s["trials"][3]["end_timestamp_unix_ns"] = kStartNs + 500; },
        "trials[3]: end_timestamp_unix_ns must be set exactly when the trial is not Dispatched");
  check([](json& s) { s["trials"][4]["end_timestamp_unix_ns"] = 0; },
        fmt::format("trials[4].end_timestamp_unix_ns: 0 is before the start {}", kStartNs + 300));
  check([](json& s) { s["stage"] = "Pruning"; },
        "trials[3]: a MAB trial in a job still in the Pruning stage");
  check([](json& s) { s["arms"] = json::array(); }, "arms: must not be empty in the MAB stage");
  check([](json& s) { s["arms"][0]["param_precision"] = -1; },
        "arms[0].param_precision: must be > 0 (or \"inf\")");
  check([](json& s) { s["arms"][0]["param_mean"] = "big"; },
        "arms[0].param_mean: expected a number or \"inf\", \"-inf\", \"nan\", got \"big\"");
  check([](json& s) { s["arms"][0]["num_observations"] = 0; },
        "arms[0].num_observations: must be >= 1 (arms are fitted on at least one result)");
  check([](json& s) { s["arms"][1]["batch_size"] = 16; },
        "arms[1].batch_size: arms must be sorted by batch size, each batch size once");
  check([](json& s) { s["arms"].erase(0); },
        "trials[3].batch_size: MAB trial with batch size 16, which is not an arm");
  const double min_cost = good["min_cost"].get<double>();
  check([](json& s) { s["min_cost"] = 1.0; },
        fmt::format("min_cost: 1.0 is not the lowest cost of the Succeeded trials ({})",
                    detail::python_float_repr(min_cost)));
  check([](json& s) { s["min_cost"] = nullptr; },
        fmt::format("min_cost: null is not the lowest cost of the Succeeded trials ({})",
                    detail::python_float_repr(min_cost)));
  check([](json& s) { s["min_cost"] = "inf"; }, "min_cost: value is not a valid float");
}

TEST(BatchSizeStateJson, MinCostBatchSizeMustMatchATrial) {
  json state = mab_job().to_json();
  const int64_t actual = state["min_cost_batch_size"].get<int64_t>();
  const int64_t other = actual == 8 ? 32 : 8;
  state["min_cost_batch_size"] = other;
  const auto restored = BatchSizeJob::from_json(state);
  ASSERT_FALSE(restored);
  EXPECT_EQ(restored.error().code(), ErrorCode::kParse);
  EXPECT_THAT(
      restored.error().message(),
      ::testing::StartsWith(fmt::format("min_cost_batch_size: no Succeeded trial with batch size {} has the "
                                        "min_cost",
                                        other)));
}

}  // namespace
}  // namespace joule::optimize::batch_size
