// SPDX-License-Identifier: Apache-2.0
// Parsing of sim specs: [COUNTx]GPU[:WORKLOAD[:BATCH_SIZE]].
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "joule/device/sim_gpu.hpp"

namespace joule::device::sim {

namespace {

constexpr int kMaxSimulatedGpus = 64;

Result<int> parse_positive(std::string_view text, std::string_view spec, std::string_view what) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value <= 0) {
    return fail(ErrorCode::kInvalidArgument, "sim spec '{}': {} '{}' is not a positive integer", spec, what,
                text);
  }
  return value;
}

}  // namespace

Result<Spec> parse_spec(std::string_view text) {
  constexpr std::string_view kForm =
      "expected [COUNTx]GPU[:WORKLOAD[:BATCH_SIZE]], e.g. v100 or 4xa40:imagenet:256";
  if (text.empty()) {
    return fail(ErrorCode::kInvalidArgument, "empty sim spec: {}", kForm);
  }
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) {
      break;
    }
    start = colon + 1;
  }
  if (parts.size() > 3) {
    return fail(ErrorCode::kInvalidArgument, "sim spec '{}' has too many ':' parts: {}", text, kForm);
  }
  Spec spec;
  std::string_view gpu = parts[0];
  const size_t x = gpu.find('x');
  if (x != std::string_view::npos && x > 0 && std::isdigit(static_cast<unsigned char>(gpu[0]))) {
    auto count = JOULE_TRY(parse_positive(gpu.substr(0, x), text, "GPU count"));
    if (count > kMaxSimulatedGpus) {
      return fail(ErrorCode::kInvalidArgument, "sim spec '{}': at most {} simulated GPUs", text,
                  kMaxSimulatedGpus);
    }
    spec.count = count;
    gpu = gpu.substr(x + 1);
  }
  if (gpu.empty()) {
    return fail(ErrorCode::kInvalidArgument, "sim spec '{}' names no GPU: {}", text, kForm);
  }
  auto model = find_gpu_model(gpu);
  if (!model) {
    return tl::make_unexpected(
        Error(ErrorCode::kInvalidArgument, fmt::format("sim spec '{}': {}", text, model.error().message())));
  }
  spec.model = *model;
  spec.workload = &default_workload();
  if (parts.size() >= 2) {
    auto workload = find_workload(parts[1]);
    if (!workload) {
      return tl::make_unexpected(Error(ErrorCode::kInvalidArgument,
                                       fmt::format("sim spec '{}': {}", text, workload.error().message())));
    }
    spec.workload = *workload;
  }
  if (parts.size() == 3) {
    auto batch_size = JOULE_TRY(parse_positive(parts[2], text, "batch size"));
    spec.batch_size = batch_size;
  }
  // Check the batch size now, so that a bad spec fails at parse time with the available sizes.
  auto workload = make_trace_workload(*spec.model, *spec.workload, spec.batch_size);
  if (!workload) {
    return tl::make_unexpected(Error(ErrorCode::kInvalidArgument,
                                     fmt::format("sim spec '{}': {}", text, workload.error().message())));
  }
  return spec;
}

}  // namespace joule::device::sim
