// SPDX-License-Identifier: Apache-2.0
// numpy-identical randomness (spec zeus.md §B.4 "Exact randomness"). Every algorithm here is checked bit for
// bit against numpy 1.24 outputs in tests/core/rng_test.cpp (fixture made by tests/core/rng_reference.py).
//
// Floating point: the ziggurat's wedge and tail tests must round exactly as numpy's C code does, so nothing
// here may be contracted into FMAs. The project builds with -std=c++20 (no GNU extensions), for which GCC
// uses -ffp-contract=off; log1p and exp come from the same libm numpy uses.
#include "joule/core/rng.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "joule/core/error.hpp"

#include "ziggurat_tables.hpp"

namespace joule::rng {
namespace {

// SeedSequence hashing constants (numpy's, after O'Neill's seed_seq_fe).
constexpr uint32_t kInitA = 0x43b0d7e5;
constexpr uint32_t kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd;
constexpr uint32_t kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd;
constexpr uint32_t kMixMultR = 0x4973f715;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

constexpr Uint128 make_u128(uint64_t high, uint64_t low) {
  return (Uint128{high} << 64) | low;
}
constexpr uint64_t high64(Uint128 v) {
  return static_cast<uint64_t>(v >> 64);
}
constexpr uint64_t low64(Uint128 v) {
  return static_cast<uint64_t>(v);
}

constexpr Uint128 kPcgMultiplier = make_u128(0x2360ED051FC65DA4ULL, 0x4385DF649FCCF645ULL);

// Hashes one value with the running constant, which it advances (numpy's `hashmix`).
uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

// Ziggurat constants: the base strip's right edge r and 1/r, as numpy writes them.
constexpr double kZigguratR = 3.6541528853610088;
constexpr double kZigguratInvR = 0.27366123732975828;
constexpr uint64_t kMantissaMask = 0x000fffffffffffffULL;

// numpy's population/sample split between Floyd's algorithm and a partial shuffle of arange(n).
constexpr int64_t kFloydMaxPopulation = 10000;
constexpr int64_t kFloydMaxFraction = 50;

}  // namespace

std::array<uint64_t, 4> seed_sequence_words(uint64_t seed) {
  // numpy turns the int into 32-bit words, least significant first; 0 is one word, not none.
  std::array<uint32_t, 2> entropy{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const int entropy_words = (seed >> 32) != 0 ? 2 : 1;

  std::array<uint32_t, kPoolSize> pool{};
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) {
    // A pool bigger than the entropy keeps hashing zeros.
    pool[static_cast<size_t>(i)] =
        hashmix(i < entropy_words ? entropy[static_cast<size_t>(i)] : 0U, hash_const);
  }
  for (size_t src = 0; src < kPoolSize; ++src) {
    for (size_t dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) {
        pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
      }
    }
  }

  // generate_state(8 × uint32), viewed as 4 × uint64 little-endian.
  std::array<uint32_t, 2 * 4> words32{};
  hash_const = kInitB;
  for (size_t i = 0; i < words32.size(); ++i) {
    uint32_t value = pool[i % kPoolSize];
    value ^= hash_const;
    hash_const *= kMultB;
    value *= hash_const;
    value ^= value >> kXShift;
    words32[i] = value;
  }
  std::array<uint64_t, 4> words{};
  for (size_t i = 0; i < words.size(); ++i) {
    words[i] = uint64_t{words32[2 * i]} | (uint64_t{words32[2 * i + 1]} << 32);
  }
  return words;
}

Pcg64::Pcg64(uint64_t seed) {
  const std::array<uint64_t, 4> w = seed_sequence_words(seed);
  const Uint128 initial_state = make_u128(w[0], w[1]);
  const Uint128 stream = make_u128(w[2], w[3]);
  increment_ = (stream << 1) | 1U;
  state_ = 0;
  state_ = state_ * kPcgMultiplier + increment_;
  state_ += initial_state;
  state_ = state_ * kPcgMultiplier + increment_;
}

Pcg64::Pcg64(const State& state)
    : state_(make_u128(state.state_high, state.state_low)),
      increment_(make_u128(state.increment_high, state.increment_low)),
      has_uint32_(state.has_uint32),
      uinteger_(state.uinteger) {}

uint64_t Pcg64::next64() {
  // Step, then output the new state (XSL-RR): xor the halves, rotate right by the top 6 bits.
  state_ = state_ * kPcgMultiplier + increment_;
  const uint64_t x = high64(state_) ^ low64(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  return (x >> rot) | (x << ((64U - rot) & 63U));
}

uint32_t Pcg64::next32() {
  // numpy buffers the high half; next64() neither uses nor clears that buffer.
  if (has_uint32_) {
    has_uint32_ = false;
    return uinteger_;
  }
  const uint64_t x = next64();
  has_uint32_ = true;
  uinteger_ = static_cast<uint32_t>(x >> 32);
  return static_cast<uint32_t>(x);
}

double Pcg64::next_double() {
  return static_cast<double>(next64() >> 11) * 0x1.0p-53;
}

Pcg64::State Pcg64::state() const {
  return State{high64(state_), low64(state_), high64(increment_), low64(increment_), has_uint32_, uinteger_};
}

uint64_t Generator::bounded(uint64_t max_inclusive) {
  if (max_inclusive == 0) {
    return 0;
  }
  if (max_inclusive == 0xFFFFFFFFULL) {
    return bits_.next32();
  }
  if (max_inclusive == ~uint64_t{0}) {
    return bits_.next64();
  }
  // Lemire's multiply-shift; the low word tells whether the draw fell in the biased region, and the
  // threshold (2^w − range) mod range is only computed when it might.
  if (max_inclusive < 0xFFFFFFFFULL) {
    const uint32_t range = static_cast<uint32_t>(max_inclusive) + 1U;
    uint64_t m = uint64_t{bits_.next32()} * range;
    uint32_t leftover = static_cast<uint32_t>(m);
    if (leftover < range) {
      const uint32_t threshold = (0xFFFFFFFFU - static_cast<uint32_t>(max_inclusive)) % range;
      while (leftover < threshold) {
        m = uint64_t{bits_.next32()} * range;
        leftover = static_cast<uint32_t>(m);
      }
    }
    return m >> 32;
  }
  const uint64_t range = max_inclusive + 1U;
  Uint128 m = Uint128{bits_.next64()} * range;
  uint64_t leftover = low64(m);
  if (leftover < range) {
    const uint64_t threshold = (~uint64_t{0} - max_inclusive) % range;
    while (leftover < threshold) {
      m = Uint128{bits_.next64()} * range;
      leftover = low64(m);
    }
  }
  return high64(m);
}

std::vector<int64_t> Generator::choice_without_replacement(int64_t n, int64_t k) {
  if (n < 0 || k < 0) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("choice without replacement needs a non-negative population and sample size "
                                "(got population {}, sample {})",
                                n, k));
  }
  if (k > n) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("cannot take a sample of {} from a population of {} without replacement", k, n));
  }
  const auto size = static_cast<size_t>(k);
  std::vector<int64_t> out;
  out.reserve(size);

  if (n > kFloydMaxPopulation && k > n / kFloydMaxFraction) {
    // Partial Fisher–Yates of arange(n) from the end down to max(n − k, 1); the sample is the shuffled tail.
    const int64_t first = std::max<int64_t>(n - k, 1);
    if (n / 4 <= k || n <= (int64_t{1} << 20)) {
      std::vector<int64_t> idx(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        idx[static_cast<size_t>(i)] = i;
      }
      for (int64_t i = n - 1; i >= first; --i) {
        const auto j = static_cast<int64_t>(bounded(static_cast<uint64_t>(i)));
        std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(j)]);
      }
      out.assign(idx.end() - k, idx.end());
    } else {
      // Same shuffle over a huge population, storing only the entries that moved.
      std::unordered_map<int64_t, int64_t> moved;
      moved.reserve(2 * size);
      const auto at = [&moved](int64_t i) {
        const auto it = moved.find(i);
        return it == moved.end() ? i : it->second;
      };
      for (int64_t i = n - 1; i >= first; --i) {
        const auto j = static_cast<int64_t>(bounded(static_cast<uint64_t>(i)));
        const int64_t vi = at(i);
        moved[i] = at(j);
        moved[j] = vi;
      }
      for (int64_t i = n - k; i < n; ++i) {
        out.push_back(at(i));
      }
    }
    return out;
  }

  // Floyd's algorithm: for j = n − k … n − 1 take a draw in [0, j], or j itself if the draw is taken. Which
  // set holds the taken values does not change the result; use a bitmap when it is small.
  if (n <= (int64_t{1} << 16) || n / 64 <= k) {
    std::vector<bool> taken(static_cast<size_t>(n), false);
    for (int64_t j = n - k; j < n; ++j) {
      auto value = static_cast<int64_t>(bounded(static_cast<uint64_t>(j)));
      if (taken[static_cast<size_t>(value)]) {
        value = j;
      }
      taken[static_cast<size_t>(value)] = true;
      out.push_back(value);
    }
  } else {
    std::unordered_set<int64_t> taken;
    taken.reserve(size);
    for (int64_t j = n - k; j < n; ++j) {
      auto value = static_cast<int64_t>(bounded(static_cast<uint64_t>(j)));
      if (!taken.insert(value).second) {
        value = j;
        taken.insert(value);
      }
      out.push_back(value);
    }
  }
  // Floyd's order is not uniform: Fisher–Yates over the sample, last position down to 1.
  for (size_t i = size; i-- > 1;) {
    const auto j = static_cast<size_t>(bounded(i));
    std::swap(out[i], out[j]);
  }
  return out;
}

double Generator::standard_normal() {
  using detail::kZigguratFi;
  using detail::kZigguratKi;
  using detail::kZigguratWi;
  for (;;) {
    // One 64-bit draw: the low 8 bits pick the layer, the next bit the sign, the next 52 the magnitude.
    const uint64_t r = bits_.next64();
    const auto layer = static_cast<size_t>(r & 0xFFU);
    const bool negative = ((r >> 8) & 1U) != 0;
    const uint64_t magnitude = (r >> 9) & kMantissaMask;
    double x = static_cast<double>(magnitude) * kZigguratWi[layer];
    if (negative) {
      x = -x;
    }
    if (magnitude < kZigguratKi[layer]) {
      return x;  // inside the layer's rectangle: ~99% of draws
    }
    if (layer == 0) {
      // Beyond r: Marsaglia's tail method. 1 − U keeps log away from 0; the sign comes from bit 8 of the
      // magnitude (numpy's choice, kept for equality).
      for (;;) {
        const double xx = -kZigguratInvR * std::log1p(-bits_.next_double());
        const double yy = -std::log1p(-bits_.next_double());
        if (yy + yy > xx * xx) {
          return ((magnitude >> 8) & 1U) != 0 ? -(kZigguratR + xx) : kZigguratR + xx;
        }
      }
    }
    // The wedge between this layer's rectangle and the curve: accept under the density, else draw again.
    if ((kZigguratFi[layer - 1] - kZigguratFi[layer]) * bits_.next_double() + kZigguratFi[layer] <
        std::exp(-0.5 * x * x)) {
      return x;
    }
  }
}

}  // namespace joule::rng

namespace joule::rng {

double Generator::normal(double mean, double stddev) {
  if (stddev < 0) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("normal(): the standard deviation must not be negative (got {})", stddev));
  }
  return mean + stddev * standard_normal();
}

}  // namespace joule::rng
