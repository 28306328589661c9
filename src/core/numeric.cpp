// SPDX-License-Identifier: Apache-2.0
#include "joule/core/numeric.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

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

}  // namespace joule::numeric
