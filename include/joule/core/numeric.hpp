// SPDX-License-Identifier: Apache-2.0
// joule/core/numeric.hpp — the exact floating-point recipes of numpy, pandas and CPython that the original
// Zeus simulator's numbers depend on. Reproducing the original to the last bit needs them; each is documented
// with the library function it stands for. (The Zeus simulator and the Zeus batch-size server optimizer both
// need them.)
#pragma once

#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace joule::numeric {

/// numpy's `np.sum` of a contiguous float64 array (also used by ndarray.mean/var and pandas' Series.mean):
/// the reduction takes the array in buffers of 8192 elements and adds each buffer's pairwise sum (blocks of
/// ≤ 128 summed with 8 interleaved accumulators, larger ones split in halves rounded to a multiple of 8).
double pairwise_sum(std::span<const double> values);

/// `np.mean(values)` = pairwise_sum / n.
double mean(std::span<const double> values);

/// The nearest-rank percentile: the ⌈share · n⌉-th smallest value (the smallest for share · n ≤ 1), as
/// latency SLOs count ("p99: 99% of requests at or below it"). Reorders `values` (std::nth_element: O(n)).
/// @return nullopt for no value.
std::optional<double> nearest_rank_percentile(std::span<double> values, double share);

/// The weighted isotonic (non-decreasing) least-squares fit of `values`: the non-decreasing sequence f that
/// minimises Σ weights[i] · (f[i] − values[i])², by pool-adjacent-violators (O(n)). Where the values already
/// rise, f is the values; where a run falls, it is pooled into its weighted mean, so a value with little
/// weight moves most. Throws joule::Exception (kInvalidArgument) when the sizes differ or a weight is not a
/// positive finite number, or a value is not finite.
std::vector<double> isotonic_non_decreasing(std::span<const double> values, std::span<const double> weights);

/// `np.var(values)` (population variance, ddof = 0): mean by pairwise sum, then the pairwise sum of squared
/// deviations, divided by n.
double variance(std::span<const double> values);

/// pandas' groupby mean: Kahan-compensated sum in order, divided by the count.
double compensated_mean(std::span<const double> values);

/// CPython's `a // b` for floats (float_floor_div: fmod-based, then rounded), which is not always
/// floor(a / b).
double python_floor_div(double a, double b);

/// pandas' default CSV float parser (`precise_xstrtod` in pandas' tokenizer, used by `read_csv`), which is
/// not correctly rounded: about 15% of the Zeus traces' values come out one unit in the last place away from
/// `strtod`. It accumulates at most 17 significant digits in a double, then scales by an exact power of ten.
/// Accepts an optional sign, digits, an optional fraction and an optional exponent (`e`/`E`).
/// @return the value, or nullopt if `text` is not such a number (including "nan" and "inf").
std::optional<double> pandas_parse_double(std::string_view text);

}  // namespace joule::numeric
