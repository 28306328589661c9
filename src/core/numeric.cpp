// SPDX-License-Identifier: Apache-2.0
#include "joule/core/numeric.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "joule/core/error.hpp"

namespace joule::numeric {

namespace {

constexpr size_t kPairwiseBlock = 128;
constexpr size_t kReductionBuffer = 8192;

double pairwise_block_sum(std::span<const double> values) {
  const size_t n = values.size();
  if (n < 8) {
    double sum = 0.0;
    for (const double value : values) {
      sum += value;
    }
    return sum;
  }
  if (n <= kPairwiseBlock) {
    double r[8];
    for (size_t j = 0; j < 8; ++j) {
      r[j] = values[j];
    }
    size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (size_t j = 0; j < 8; ++j) {
        r[j] += values[i + j];
      }
    }
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) {
      sum += values[i];
    }
    return sum;
  }
  size_t half = n / 2;
  half -= half % 8;
  return pairwise_block_sum(values.subspan(0, half)) + pairwise_block_sum(values.subspan(half));
}

}  // namespace

double pairwise_sum(std::span<const double> values) {
  if (values.size() <= kReductionBuffer) {
    return pairwise_block_sum(values);
  }
  double sum = 0.0;
  for (size_t start = 0; start < values.size(); start += kReductionBuffer) {
    sum += pairwise_block_sum(values.subspan(start, std::min(kReductionBuffer, values.size() - start)));
  }
  return sum;
}

std::optional<double> nearest_rank_percentile(std::span<double> values, double share) {
  if (values.empty()) {
    return std::nullopt;
  }
  const auto rank = static_cast<size_t>(std::ceil(share * static_cast<double>(values.size())));
  const size_t index = std::min(rank == 0 ? 0 : rank - 1, values.size() - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(index), values.end());
  return values[index];
}

std::vector<double> isotonic_non_decreasing(std::span<const double> values, std::span<const double> weights) {
  if (values.size() != weights.size()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("isotonic fit: {} values but {} weights", values.size(), weights.size()));
  }
  // Blocks of pooled values, each its weighted mean, total weight and length; a new value that falls below
  // the last block's mean merges into it, and merged blocks merge backwards while they still fall.
  struct Block {
    double mean;
    double weight;
    size_t length;
  };
  std::vector<Block> blocks;
  blocks.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i]) || !std::isfinite(weights[i]) || !(weights[i] > 0)) {
      throw Exception(ErrorCode::kInvalidArgument,
                      fmt::format("isotonic fit: value {} is {} with weight {} (finite values and positive "
                                  "finite weights only)",
                                  i, values[i], weights[i]));
    }
    blocks.push_back({values[i], weights[i], 1});
    while (blocks.size() > 1 && blocks[blocks.size() - 2].mean > blocks.back().mean) {
      const Block last = blocks.back();
      blocks.pop_back();
      Block& before = blocks.back();
      const double weight = before.weight + last.weight;
      before.mean = (before.mean * before.weight + last.mean * last.weight) / weight;
      before.weight = weight;
      before.length += last.length;
    }
  }
  std::vector<double> fitted;
  fitted.reserve(values.size());
  for (const Block& block : blocks) {
    fitted.insert(fitted.end(), block.length, block.mean);
  }
  return fitted;
}

double mean(std::span<const double> values) {
  return pairwise_sum(values) / static_cast<double>(values.size());
}

double variance(std::span<const double> values) {
  const double average = mean(values);
  double squares_stack[64];
  std::vector<double> squares_heap;
  double* squares = squares_stack;
  if (values.size() > 64) {
    squares_heap.resize(values.size());
    squares = squares_heap.data();
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const double deviation = values[i] - average;
    squares[i] = deviation * deviation;
  }
  return pairwise_sum(std::span<const double>(squares, values.size())) / static_cast<double>(values.size());
}

double compensated_mean(std::span<const double> values) {
  double sum = 0;
  double compensation = 0;
  for (const double value : values) {
    const double y = value - compensation;
    const double t = sum + y;
    compensation = t - sum - y;
    sum = t;
  }
  return sum / static_cast<double>(values.size());
}

double python_floor_div(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  }
  if (div != 0) {
    double floor_div = std::floor(div);
    if (div - floor_div > 0.5) {
      floor_div += 1.0;
    }
    return floor_div;
  }
  return std::copysign(0.0, a / b);
}

std::optional<double> pandas_parse_double(std::string_view text) {
  static const std::array<double, 309> kPowersOfTen = [] {
    std::array<double, 309> powers{};
    for (size_t k = 0; k < powers.size(); ++k) {
      powers[k] = std::strtod(fmt::format("1e{}", k).c_str(), nullptr);  // correctly rounded, as Python's
    }
    return powers;
  }();
  constexpr int kMaxDigits = 17;
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
    negative = text[i] == '-';
    ++i;
  }
  auto is_digit = [&](size_t at) { return at < text.size() && text[at] >= '0' && text[at] <= '9'; };
  double number = 0;
  int exponent = 0;
  int digits = 0;
  bool any_digit = false;
  while (is_digit(i)) {
    any_digit = true;
    if (digits < kMaxDigits) {
      number = number * 10.0 + (text[i] - '0');
      ++digits;
    } else {
      ++exponent;
    }
    ++i;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    int decimals = 0;
    while (digits < kMaxDigits && is_digit(i)) {
      any_digit = true;
      number = number * 10.0 + (text[i] - '0');
      ++digits;
      ++decimals;
      ++i;
    }
    exponent -= decimals;
    while (is_digit(i)) {
      any_digit = true;
      ++i;
    }
  }
  if (!any_digit) {
    return std::nullopt;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    int sign = 1;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
      sign = text[i] == '-' ? -1 : 1;
      ++i;
    }
    if (!is_digit(i)) {
      return std::nullopt;
    }
    int value = 0;
    while (is_digit(i)) {
      value = std::min(value * 10 + (text[i] - '0'), 100000);
      ++i;
    }
    exponent += sign * value;
  }
  if (i != text.size()) {
    return std::nullopt;
  }
  if (exponent > 308 || exponent < -308) {
    return std::nullopt;  // pandas falls back to other code here; our traces never get there
  }
  if (negative) {
    number = -number;
  }
  return exponent > 0 ? number * kPowersOfTen[static_cast<size_t>(exponent)]
                      : number / kPowersOfTen[static_cast<size_t>(-exponent)];
}

}  // namespace joule::numeric
