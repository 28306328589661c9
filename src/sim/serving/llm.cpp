// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/llm.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/file.hpp"
#include "joule/core/json_fields.hpp"
#include "joule/core/strings.hpp"

namespace joule::sim {

namespace {

// Every figure below is sourced in docs/inference.md ("The serving model and its sources"). Memory power
// is HBM bandwidth × 8 bit × energy per bit (HBM2/2e ≈ 3.9 pJ/bit, HBM3 ≈ 3.5 pJ/bit); SM power is what
// brings a compute-bound prefill at the top clock to the board's TDP (Splitwise's power model: prefill at
// TDP); sm_busy_share makes decode draw Splitwise's measured decode power (250 W on A100, 380 W on H100);
// compute and memory efficiencies are Splitwise's measured Llama-2-70B prefill (2,048 tokens) and batch-1
// decode times on DGX-A100/DGX-H100 turned into MFU and MBU.
std::vector<LlmGpuSpec> make_gpus() {
  LlmGpuSpec a100_80;
  a100_80.key = "a100-80gb";
  a100_80.name = "NVIDIA A100-SXM4-80GB";
  a100_80.peak_bf16_flops = 312e12;
  a100_80.hbm_bandwidth_bps = 2.039e12;
  a100_80.memory_bytes = 80e9;
  a100_80.nvlink_bandwidth_bps = 300e9;
  a100_80.min_sm_clock_mhz = 210;
  a100_80.max_sm_clock_mhz = 1410;
  a100_80.sm_clock_step_mhz = 15;
  a100_80.tdp_w = 400;
  a100_80.min_power_limit_w = 100;
  a100_80.idle_power_w = 63;
  a100_80.compute_efficiency = 0.66;
  a100_80.memory_efficiency = 0.62;
  a100_80.memory_power_w = 64;
  a100_80.sm_power_w = 334;
  a100_80.sm_busy_share = 0.30;
  a100_80.source =
      "NVIDIA A100 datasheet; NVML limits from nvidia-smi; idle, prefill and decode power and MFU/MBU fitted "
      "to "
      "Splitwise (Patel et al., ISCA 2024) DGX-A100 measurements";

  LlmGpuSpec a100_40 = a100_80;
  a100_40.key = "a100-40gb";
  a100_40.name = "NVIDIA A100-SXM4-40GB";
  a100_40.hbm_bandwidth_bps = 1.555e12;
  a100_40.memory_bytes = 40e9;
  a100_40.memory_power_w = 48.5;  // 1.555 TB/s × 8 bit × 3.9 pJ/bit

  LlmGpuSpec h100;
  h100.key = "h100";
  h100.name = "NVIDIA H100 80GB HBM3";
  h100.peak_bf16_flops = 989.4e12;
  h100.hbm_bandwidth_bps = 3.35e12;
  h100.memory_bytes = 80e9;
  h100.nvlink_bandwidth_bps = 450e9;
  h100.min_sm_clock_mhz = 345;
  h100.max_sm_clock_mhz = 1980;
  h100.sm_clock_step_mhz = 15;
  h100.tdp_w = 700;
  h100.min_power_limit_w = 200;
  h100.idle_power_w = 75;
  h100.compute_efficiency = 0.47;
  h100.memory_efficiency = 0.56;
  h100.memory_power_w = 94;
  h100.sm_power_w = 620;
  h100.sm_busy_share = 0.27;
  h100.source =
      "NVIDIA H100 datasheet; NVML limits from nvidia-smi; idle, prefill and decode power and MFU/MBU fitted "
      "to "
      "Splitwise (Patel et al., ISCA 2024) DGX-H100 measurements";
  return {a100_40, a100_80, h100};
}

std::vector<LlmModelSpec> make_models() {
  LlmModelSpec llama3_8b;
  llama3_8b.key = "llama-3-8b";
  llama3_8b.name = "Meta-Llama-3-8B";
  llama3_8b.layers = 32;
  llama3_8b.hidden_size = 4096;
  llama3_8b.attention_heads = 32;
  llama3_8b.kv_heads = 8;
  llama3_8b.intermediate_size = 14336;
  llama3_8b.vocab_size = 128256;
  llama3_8b.parameters = 8030261248;
  llama3_8b.default_tensor_parallel = 1;
  llama3_8b.source =
      "Meta's config.json (Hugging Face meta-llama/Meta-Llama-3-8B); Llama 3 Herd of Models, 2024";

  LlmModelSpec llama3_70b = llama3_8b;
  llama3_70b.key = "llama-3-70b";
  llama3_70b.name = "Meta-Llama-3-70B";
  llama3_70b.layers = 80;
  llama3_70b.hidden_size = 8192;
  llama3_70b.attention_heads = 64;
  llama3_70b.intermediate_size = 28672;
  llama3_70b.parameters = 70553706496;
  llama3_70b.default_tensor_parallel = 4;
  llama3_70b.source =
      "Meta's config.json (Hugging Face meta-llama/Meta-Llama-3-70B); Llama 3 Herd of Models, 2024";

  // The model Splitwise measured (validation in docs/inference.md).
  LlmModelSpec llama2_70b = llama3_70b;
  llama2_70b.key = "llama-2-70b";
  llama2_70b.name = "Llama-2-70b";
  llama2_70b.vocab_size = 32000;
  llama2_70b.parameters = 68976648192;
  llama2_70b.default_tensor_parallel = 2;
  llama2_70b.source = "Meta's config.json (Hugging Face meta-llama/Llama-2-70b-hf)";
  return {llama3_8b, llama3_70b, llama2_70b};
}

template <class Spec>
std::string known_keys(const std::vector<Spec>& specs) {
  std::vector<std::string> keys;
  keys.reserve(specs.size());
  for (const Spec& spec : specs) {
    keys.push_back(spec.key);
  }
  return fmt::format("{}", fmt::join(keys, ", "));
}

double ceil_div_heads(int heads, int tensor_parallel) {
  // KV heads are split over the group; with fewer heads than GPUs each GPU keeps (a copy of) one.
  return std::max(1.0, std::ceil(static_cast<double>(heads) / tensor_parallel));
}

}  // namespace

double LlmModelSpec::kv_bytes_per_token() const {
  const double head_dim = static_cast<double>(hidden_size) / attention_heads;
  return 2.0 * layers * kv_heads * head_dim * bytes_per_parameter;
}

double LlmModelSpec::matmul_parameters() const {
  // Everything but the input embedding takes part in a matrix product for every token.
  return parameters - static_cast<double>(vocab_size) * hidden_size;
}

const std::vector<LlmGpuSpec>& llm_gpus() {
  static const std::vector<LlmGpuSpec> gpus = make_gpus();
  return gpus;
}

const std::vector<LlmModelSpec>& llm_models() {
  static const std::vector<LlmModelSpec> models = make_models();
  return models;
}

Result<const LlmGpuSpec*> find_llm_gpu(std::string_view key) {
  std::string wanted = to_lower(key);
  if (wanted == "a100") {
    wanted = "a100-80gb";
  }
  if (wanted == "h100-sxm" || wanted == "h100-sxm5-80gb" || wanted == "h100-80gb") {
    wanted = "h100";
  }
  if (wanted == "a100-sxm4-80gb") {
    wanted = "a100-80gb";
  }
  if (wanted == "a100-sxm4-40gb") {
    wanted = "a100-40gb";
  }
  for (const LlmGpuSpec& gpu : llm_gpus()) {
    if (gpu.key == wanted) {
      return &gpu;
    }
  }
  return fail(ErrorCode::kNotFound,
              "unknown GPU '{}': known GPUs are {} (or a JSON file, see docs/inference.md)", key,
              known_keys(llm_gpus()));
}

Result<const LlmModelSpec*> find_llm_model(std::string_view key) {
  const std::string wanted = to_lower(key);
  for (const LlmModelSpec& model : llm_models()) {
    if (model.key == wanted) {
      return &model;
    }
  }
  return fail(ErrorCode::kNotFound,
              "unknown model '{}': known models are {} (or a JSON file, see docs/inference.md)", key,
              known_keys(llm_models()));
}

namespace {

void read_positive(const JsonFields& fields, std::string_view key, double& value) {
  if (const nlohmann::json* field = fields.optional(key)) {
    const double number = fields.to_number(*field, fields.where(key));
    if (!std::isfinite(number) || number <= 0) {
      throw_json_field_error(fields.code(), fields.where(key),
                             fmt::format("must be a positive number, got {}", number));
    }
    value = number;
  }
}

void read_share(const JsonFields& fields, std::string_view key, double& value) {
  if (const nlohmann::json* field = fields.optional(key)) {
    const double number = fields.to_number(*field, fields.where(key));
    if (!(number > 0 && number <= 1)) {
      throw_json_field_error(fields.code(), fields.where(key),
                             fmt::format("must be in (0, 1], got {}", number));
    }
    value = number;
  }
}

void read_non_negative(const JsonFields& fields, std::string_view key, double& value) {
  if (const nlohmann::json* field = fields.optional(key)) {
    const double number = fields.to_number(*field, fields.where(key));
    if (!std::isfinite(number) || number < 0) {
      throw_json_field_error(fields.code(), fields.where(key),
                             fmt::format("must be a number >= 0, got {}", number));
    }
    value = number;
  }
}

template <class Int>
void read_count(const JsonFields& fields, std::string_view key, Int& value) {
  if (const nlohmann::json* field = fields.optional(key)) {
    const int64_t number = fields.to_integer(*field, fields.where(key));
    if (number < 1 || number > 1000000) {
      throw_json_field_error(fields.code(), fields.where(key),
                             fmt::format("must be an integer in [1, 1000000], got {}", number));
    }
    value = static_cast<Int>(number);
  }
}

void read_text(const JsonFields& fields, std::string_view key, std::string& value) {
  if (const nlohmann::json* field = fields.optional(key)) {
    value = fields.to_string_value(*field, fields.where(key));
  }
}

void check_unknown(const nlohmann::json& object, std::initializer_list<std::string_view> known,
                   const std::string& source) {
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw_json_field_error(ErrorCode::kParse, fmt::format("{}: {}", source, key),
                             fmt::format("unknown field (known: {})", fmt::join(known, ", ")));
    }
  }
}

nlohmann::json parse_object(std::string_view text, const std::string& source) {
  nlohmann::json object = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) {
    throw Exception(ErrorCode::kParse, fmt::format("{}: not valid JSON", source));
  }
  if (!object.is_object()) {
    throw Exception(ErrorCode::kParse, fmt::format("{}: expected a JSON object", source));
  }
  return object;
}

}  // namespace

Result<LlmGpuSpec> parse_llm_gpu_json(std::string_view text, const std::string& source) {
  return catch_json_fields<LlmGpuSpec>([&]() -> Result<LlmGpuSpec> {
    const nlohmann::json object = parse_object(text, source);
    check_unknown(object,
                  {"base",
                   "key",
                   "name",
                   "peak_bf16_flops",
                   "hbm_bandwidth_bps",
                   "memory_bytes",
                   "nvlink_bandwidth_bps",
                   "min_sm_clock_mhz",
                   "max_sm_clock_mhz",
                   "sm_clock_step_mhz",
                   "tdp_w",
                   "min_power_limit_w",
                   "idle_power_w",
                   "compute_efficiency",
                   "memory_efficiency",
                   "sm_power_w",
                   "sm_busy_share",
                   "memory_power_w",
                   "iteration_overhead_s",
                   "source"},
                  source);
    const JsonFields fields(object, source, ErrorCode::kParse);
    LlmGpuSpec gpu;
    if (const nlohmann::json* base = fields.optional("base")) {
      gpu = *value_or_throw(find_llm_gpu(fields.to_string_value(*base, fields.where("base"))));
    } else {
      for (const char* key :
           {"peak_bf16_flops", "hbm_bandwidth_bps", "memory_bytes", "max_sm_clock_mhz", "min_sm_clock_mhz",
            "tdp_w", "min_power_limit_w", "idle_power_w", "sm_power_w", "memory_power_w"}) {
        fields.require(key);
      }
    }
    read_text(fields, "key", gpu.key);
    read_text(fields, "name", gpu.name);
    read_text(fields, "source", gpu.source);
    if (gpu.key.empty()) {
      gpu.key = "custom";
    }
    if (gpu.name.empty()) {
      gpu.name = gpu.key;
    }
    read_positive(fields, "peak_bf16_flops", gpu.peak_bf16_flops);
    read_positive(fields, "hbm_bandwidth_bps", gpu.hbm_bandwidth_bps);
    read_positive(fields, "memory_bytes", gpu.memory_bytes);
    read_non_negative(fields, "nvlink_bandwidth_bps", gpu.nvlink_bandwidth_bps);
    read_count(fields, "min_sm_clock_mhz", gpu.min_sm_clock_mhz);
    read_count(fields, "max_sm_clock_mhz", gpu.max_sm_clock_mhz);
    read_count(fields, "sm_clock_step_mhz", gpu.sm_clock_step_mhz);
    read_positive(fields, "tdp_w", gpu.tdp_w);
    read_positive(fields, "min_power_limit_w", gpu.min_power_limit_w);
    read_non_negative(fields, "idle_power_w", gpu.idle_power_w);
    read_share(fields, "compute_efficiency", gpu.compute_efficiency);
    read_share(fields, "memory_efficiency", gpu.memory_efficiency);
    read_non_negative(fields, "sm_power_w", gpu.sm_power_w);
    read_share(fields, "sm_busy_share", gpu.sm_busy_share);
    read_non_negative(fields, "memory_power_w", gpu.memory_power_w);
    read_non_negative(fields, "iteration_overhead_s", gpu.iteration_overhead_s);
    if (gpu.min_sm_clock_mhz > gpu.max_sm_clock_mhz) {
      throw_json_field_error(ErrorCode::kParse, source,
                             fmt::format("min_sm_clock_mhz {} is above max_sm_clock_mhz {}",
                                         gpu.min_sm_clock_mhz, gpu.max_sm_clock_mhz));
    }
    if (gpu.min_power_limit_w > gpu.tdp_w || gpu.idle_power_w >= gpu.tdp_w) {
      throw_json_field_error(
          ErrorCode::kParse, source,
          fmt::format("need idle_power_w < tdp_w and min_power_limit_w <= tdp_w, got idle {} W, "
                      "min limit {} W, TDP {} W",
                      gpu.idle_power_w, gpu.min_power_limit_w, gpu.tdp_w));
    }
    return gpu;
  });
}

Result<LlmModelSpec> parse_llm_model_json(std::string_view text, const std::string& source) {
  return catch_json_fields<LlmModelSpec>([&]() -> Result<LlmModelSpec> {
    const nlohmann::json object = parse_object(text, source);
    check_unknown(
        object,
        {"base", "key", "name", "layers", "hidden_size", "attention_heads", "kv_heads", "intermediate_size",
         "vocab_size", "parameters", "bytes_per_parameter", "default_tensor_parallel", "source"},
        source);
    const JsonFields fields(object, source, ErrorCode::kParse);
    LlmModelSpec model;
    if (const nlohmann::json* base = fields.optional("base")) {
      model = *value_or_throw(find_llm_model(fields.to_string_value(*base, fields.where("base"))));
    } else {
      for (const char* key :
           {"layers", "hidden_size", "attention_heads", "kv_heads", "vocab_size", "parameters"}) {
        fields.require(key);
      }
    }
    read_text(fields, "key", model.key);
    read_text(fields, "name", model.name);
    read_text(fields, "source", model.source);
    if (model.key.empty()) {
      model.key = "custom";
    }
    if (model.name.empty()) {
      model.name = model.key;
    }
    read_count(fields, "layers", model.layers);
    read_count(fields, "hidden_size", model.hidden_size);
    read_count(fields, "attention_heads", model.attention_heads);
    read_count(fields, "kv_heads", model.kv_heads);
    read_count(fields, "intermediate_size", model.intermediate_size);
    read_count(fields, "vocab_size", model.vocab_size);
    read_positive(fields, "parameters", model.parameters);
    read_positive(fields, "bytes_per_parameter", model.bytes_per_parameter);
    read_count(fields, "default_tensor_parallel", model.default_tensor_parallel);
    if (model.hidden_size % model.attention_heads != 0 || model.kv_heads > model.attention_heads) {
      throw_json_field_error(
          ErrorCode::kParse, source,
          fmt::format("hidden_size {} must be a multiple of attention_heads {}, and kv_heads {} at "
                      "most attention_heads",
                      model.hidden_size, model.attention_heads, model.kv_heads));
    }
    if (model.matmul_parameters() <= 0) {
      throw_json_field_error(ErrorCode::kParse, source,
                             fmt::format("parameters {} must exceed the embedding's vocab_size × hidden_size",
                                         model.parameters));
    }
    return model;
  });
}

namespace {

bool is_json_path(std::string_view name) {
  return name.size() > 5 && name.substr(name.size() - 5) == ".json";
}

}  // namespace

Result<LlmGpuSpec> load_llm_gpu(std::string_view name_or_path) {
  if (is_json_path(name_or_path)) {
    const std::string path(name_or_path);
    return parse_llm_gpu_json(JOULE_TRY(read_text_file(path)), path);
  }
  return *JOULE_TRY(find_llm_gpu(name_or_path));
}

Result<LlmModelSpec> load_llm_model(std::string_view name_or_path) {
  if (is_json_path(name_or_path)) {
    const std::string path(name_or_path);
    return parse_llm_model_json(JOULE_TRY(read_text_file(path)), path);
  }
  return *JOULE_TRY(find_llm_model(name_or_path));
}

void IterationBatch::add_decode(int64_t context_tokens) {
  ++decode_requests;
  decode_context_tokens += context_tokens;
}

void IterationBatch::add_prefill(int64_t tokens, int64_t context_before) {
  prefill_tokens += tokens;
  // Token i (1-based) of the chunk attends to context_before + i entries (causal).
  prefill_attention_pairs += static_cast<double>(tokens) * static_cast<double>(context_before) +
                             static_cast<double>(tokens) * static_cast<double>(tokens + 1) / 2.0;
  prefill_context_tokens += context_before + tokens;
}

LlmCostModel::LlmCostModel(LlmGpuSpec gpu, LlmModelSpec model, int tensor_parallel)
    : gpu_(std::move(gpu)), model_(std::move(model)), tensor_parallel_(tensor_parallel) {
  if (tensor_parallel_ < 1 || tensor_parallel_ > 64) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("tensor parallel degree must be in [1, 64], got {}", tensor_parallel_));
  }
  if (tensor_parallel_ > model_.attention_heads) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("tensor parallel degree {} exceeds {}'s {} attention heads", tensor_parallel_,
                                model_.key, model_.attention_heads));
  }
  const double tp = tensor_parallel_;
  matmul_flops_per_token_ = 2.0 * model_.matmul_parameters() / tp;
  weight_bytes_ = model_.matmul_parameters() * model_.bytes_per_parameter / tp;
  const double head_dim = static_cast<double>(model_.hidden_size) / model_.attention_heads;
  kv_bytes_per_token_ = 2.0 * model_.layers * ceil_div_heads(model_.kv_heads, tensor_parallel_) * head_dim *
                        model_.bytes_per_parameter;
  attention_flops_per_pair_ = 4.0 * model_.layers * model_.hidden_size / tp;
  // Two all-reduces per layer of hidden_size values per token; a ring sends 2(t − 1)/t of the data.
  comm_bytes_per_token_ = tensor_parallel_ == 1 ? 0.0
                                                : 2.0 * model_.layers * (2.0 * (tp - 1) / tp) *
                                                      model_.hidden_size * model_.bytes_per_parameter;
  const double usable_bytes = gpu_.memory_bytes * 0.9;
  if (model_.parameters * model_.bytes_per_parameter / tp > usable_bytes) {
    const double total_gb = model_.parameters * model_.bytes_per_parameter / 1e9;
    const int needed = static_cast<int>(std::ceil(total_gb * 1e9 / usable_bytes));
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("{}'s weights ({:.1f} GB) do not fit {} × {} ({:.0f} GB usable each): use a tensor "
                    "parallel degree of at least {}",
                    model_.key, total_gb, tensor_parallel_, gpu_.key, usable_bytes / 1e9, needed));
  }
}

IterationCost LlmCostModel::at_clock(const IterationBatch& batch, double clock_mhz) const {
  IterationCost cost;
  const double clock = std::clamp(clock_mhz, static_cast<double>(gpu_.min_sm_clock_mhz),
                                  static_cast<double>(gpu_.max_sm_clock_mhz));
  const double ratio = clock / gpu_.max_sm_clock_mhz;
  cost.clock_mhz = clock;
  if (batch.empty()) {
    cost.power_w = gpu_.idle_power_w;
    return cost;
  }
  const auto tokens = static_cast<double>(batch.tokens());
  const double flops = matmul_flops_per_token_ * tokens +
                       attention_flops_per_pair_ *
                           (static_cast<double>(batch.decode_context_tokens) + batch.prefill_attention_pairs);
  const double bytes =
      weight_bytes_ + kv_bytes_per_token_ * (static_cast<double>(batch.decode_context_tokens) +
                                             static_cast<double>(batch.prefill_context_tokens) + tokens);
  cost.compute_s = flops / (gpu_.peak_bf16_flops * ratio * gpu_.compute_efficiency);
  cost.memory_s = bytes / (gpu_.hbm_bandwidth_bps * gpu_.memory_efficiency);
  cost.comm_s = comm_bytes_per_token_ > 0 && gpu_.nvlink_bandwidth_bps > 0
                    ? comm_bytes_per_token_ * tokens / gpu_.nvlink_bandwidth_bps
                    : 0.0;
  cost.time_s = std::max(cost.compute_s, cost.memory_s) + cost.comm_s + gpu_.iteration_overhead_s;
  const double compute_share = cost.compute_s / cost.time_s;
  const double memory_share = cost.memory_s / cost.time_s;
  cost.power_w = gpu_.idle_power_w +
                 gpu_.sm_power_w * (gpu_.sm_busy_share + (1 - gpu_.sm_busy_share) * compute_share) * ratio *
                     ratio * ratio +
                 gpu_.memory_power_w * memory_share;
  return cost;
}

IterationCost LlmCostModel::at_power_limit(const IterationBatch& batch, double power_limit_w,
                                           std::optional<double> max_clock_mhz) const {
  const double top =
      std::min(max_clock_mhz.value_or(gpu_.max_sm_clock_mhz), static_cast<double>(gpu_.max_sm_clock_mhz));
  IterationCost best = at_clock(batch, top);
  if (best.power_w <= power_limit_w) {
    return best;
  }
  // Power grows with the clock: bisect on supported clock steps for the highest one within the limit.
  const auto step = static_cast<double>(std::max<uint32_t>(gpu_.sm_clock_step_mhz, 1));
  auto low_steps = static_cast<int64_t>(0);
  auto high_steps = static_cast<int64_t>(std::floor((top - gpu_.min_sm_clock_mhz) / step));
  const auto clock_at = [&](int64_t steps) {
    return gpu_.min_sm_clock_mhz + static_cast<double>(steps) * step;
  };
  if (at_clock(batch, clock_at(0)).power_w > power_limit_w) {
    return at_clock(batch, clock_at(0));
  }
  while (high_steps - low_steps > 1) {
    const int64_t middle = (low_steps + high_steps) / 2;
    if (at_clock(batch, clock_at(middle)).power_w <= power_limit_w) {
      low_steps = middle;
    } else {
      high_steps = middle;
    }
  }
  return at_clock(batch, clock_at(low_steps));
}

std::vector<uint32_t> LlmCostModel::supported_clocks_mhz() const {
  std::vector<uint32_t> clocks;
  for (uint32_t mhz = gpu_.max_sm_clock_mhz; mhz > gpu_.min_sm_clock_mhz; mhz -= gpu_.sm_clock_step_mhz) {
    clocks.push_back(mhz);
    if (mhz < gpu_.sm_clock_step_mhz) {
      break;
    }
  }
  clocks.push_back(gpu_.min_sm_clock_mhz);
  return clocks;
}

int64_t LlmCostModel::kv_cache_tokens(double kv_memory_share) const {
  const double free_bytes =
      gpu_.memory_bytes * kv_memory_share - model_.parameters * model_.bytes_per_parameter / tensor_parallel_;
  return free_bytes <= 0 ? 0 : static_cast<int64_t>(free_bytes / kv_bytes_per_token_);
}

device::sim::GpuModel llm_gpu_model(const LlmGpuSpec& gpu) {
  device::sim::GpuModel model;
  model.key = gpu.key;
  model.name = gpu.name;
  model.trace = "llm";
  model.min_power_limit_mw = static_cast<uint32_t>(std::lround(gpu.min_power_limit_w * 1e3));
  model.max_power_limit_mw = static_cast<uint32_t>(std::lround(gpu.tdp_w * 1e3));
  model.default_power_limit_mw = model.max_power_limit_mw;
  model.min_sm_clock_mhz = gpu.min_sm_clock_mhz;
  model.max_sm_clock_mhz = gpu.max_sm_clock_mhz;
  model.sm_clock_step_mhz = gpu.sm_clock_step_mhz;
  model.idle_power_w = gpu.idle_power_w;
  model.description = fmt::format("{} serving an LLM (joule's serving model)", gpu.name);
  return model;
}

namespace {

// One iteration's batch as a device::sim::Workload: what the simulated GPU draws and how long it takes
// under its current power limit and clock lock.
class IterationWorkload final : public device::sim::Workload {
 public:
  IterationWorkload(const LlmCostModel& cost, IterationBatch batch) : cost_(cost), batch_(batch) {}
  std::string description() const override {
    return fmt::format("LLM iteration: {} decode requests, {} prefill tokens", batch_.decode_requests,
                       batch_.prefill_tokens);
  }
  device::sim::OperatingPoint at(double power_limit_w,
                                 std::optional<double> locked_sm_clock_mhz) const override {
    const IterationCost cost = cost_.at_power_limit(batch_, power_limit_w, locked_sm_clock_mhz);
    return {cost.power_w, cost.time_s, cost.clock_mhz};
  }

 private:
  const LlmCostModel& cost_;
  IterationBatch batch_;
};

}  // namespace

LlmDevice::LlmDevice(const LlmGpuSpec& gpu, const LlmModelSpec& model, int tensor_parallel, int index_base)
    : cost_(gpu, model, tensor_parallel),
      model_(std::make_unique<device::sim::GpuModel>(llm_gpu_model(gpu))),
      clock_(std::make_shared<VirtualClock>()) {
  const auto idle = std::make_shared<IterationWorkload>(cost_, IterationBatch{});
  for (int i = 0; i < tensor_parallel; ++i) {
    gpus_.push_back(std::make_unique<device::sim::SimulatedGpu>(*model_, idle, clock_, index_base + i));
    gpus_.back()->set_busy(false);
  }
}

LlmDevice::~LlmDevice() = default;

std::vector<device::sim::SimulatedGpu*> LlmDevice::gpus() {
  std::vector<device::sim::SimulatedGpu*> gpus;
  gpus.reserve(gpus_.size());
  for (const auto& gpu : gpus_) {
    gpus.push_back(gpu.get());
  }
  return gpus;
}

double LlmDevice::now_s() const {
  return std::max(now_s_, to_seconds(clock_->now()));
}

namespace {

void move_clock_to(VirtualClock& clock, double time_s) {
  const Nanos target = from_seconds(time_s);
  const Nanos now = clock.now();
  if (target > now) {
    clock.advance(target - now);
  }
}

}  // namespace

void LlmDevice::catch_up() {
  // Someone advanced the shared clock (e.g. a monitor on a virtual clock): time passed idle.
  now_s_ = std::max(now_s_, to_seconds(clock_->now()));
}

IterationCost LlmDevice::run_iteration(const IterationBatch& batch) {
  catch_up();
  if (batch.empty()) {
    return IterationCost{};
  }
  const auto workload = std::make_shared<IterationWorkload>(cost_, batch);
  for (const auto& gpu : gpus_) {
    gpu->set_workload(workload);
    gpu->set_busy(true);
  }
  const device::sim::OperatingPoint point = gpus_.front()->operating_point();
  IterationCost cost = cost_.at_clock(batch, point.sm_clock_mhz);
  now_s_ += point.iteration_time_s;
  move_clock_to(*clock_, now_s_);
  for (const auto& gpu : gpus_) {
    gpu->set_busy(false);
  }
  return cost;
}

void LlmDevice::idle_until(double time_s) {
  catch_up();
  if (!(time_s > now_s_)) {
    return;
  }
  now_s_ = time_s;
  move_clock_to(*clock_, now_s_);
}

}  // namespace joule::sim
