// SPDX-License-Identifier: Apache-2.0
// joule/core/rng.hpp — random numbers that match numpy bit for bit: `numpy.random.default_rng(seed)`
// (SeedSequence → PCG64) and the Generator methods the Zeus optimizers use. Same seed, same stream.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace joule::rng {

__extension__ typedef unsigned __int128 Uint128;  // GCC/Clang extension; PCG64 is a 128-bit generator

/// numpy's `SeedSequence(seed).generate_state(4, numpy.uint64)`: the four 64-bit words that seed PCG64.
std::array<uint64_t, 4> seed_sequence_words(uint64_t seed);

/// numpy's PCG64 bit generator (128-bit LCG, XSL-RR output), including its buffered 32-bit draws.
class Pcg64 {
 public:
  /// The complete state, as numpy's `bit_generator.state` holds it.
  struct State {
    uint64_t state_high = 0;
    uint64_t state_low = 0;
    uint64_t increment_high = 0;
    uint64_t increment_low = 0;
    bool has_uint32 = false;  ///< a 32-bit half of the last 64-bit draw is buffered
    uint32_t uinteger = 0;    ///< that buffered half
    bool operator==(const State&) const = default;
  };

  /// Seeded as `numpy.random.PCG64(seed)` / `default_rng(seed)` seeds it.
  explicit Pcg64(uint64_t seed);
  /// Restores a saved state.
  explicit Pcg64(const State& state);

  uint64_t next64();
  /// One half of a 64-bit draw: the low half first, the high half on the next call (numpy's buffering).
  uint32_t next32();
  /// A double in [0, 1): (next64() >> 11) · 2^−53.
  double next_double();

  State state() const;

 private:
  Uint128 state_ = 0;
  Uint128 increment_ = 0;
  bool has_uint32_ = false;
  uint32_t uinteger_ = 0;
};

/// numpy's `Generator` on PCG64: `default_rng(seed)` and the methods Zeus uses, with numpy's algorithms.
class Generator {
 public:
  /// `numpy.random.default_rng(seed)`.
  explicit Generator(uint64_t seed) : bits_(seed) {}
  explicit Generator(const Pcg64::State& state) : bits_(state) {}

  /// A uniform integer in [0, max_inclusive], as numpy's bounded draws make it (Lemire's method on 32-bit
  /// draws when max_inclusive < 2^32 − 1; no draw at all when max_inclusive is 0).
  uint64_t bounded(uint64_t max_inclusive);
  /// `Generator.choice(n, size=k, replace=False)` (shuffle=True): k distinct values in [0, n), in numpy's
  /// order. @throws joule::Exception (kInvalidArgument) if k > n.
  std::vector<int64_t> choice_without_replacement(int64_t n, int64_t k);
  /// A random order of 0 … n−1 as `choice(n, n, replace=False)` draws it (how Zeus orders bandit arms). This
  /// is not numpy's `Generator.permutation(n)`, which shuffles differently.
  std::vector<int64_t> random_order(int64_t n) { return choice_without_replacement(n, n); }
  /// `Generator.random()`: a double in [0, 1).
  double random() { return bits_.next_double(); }
  /// `Generator.standard_normal()`: numpy's 256-layer ziggurat.
  double standard_normal();
  /// `Generator.normal(mean, stddev)` = mean + stddev · standard_normal() (a draw is made even if stddev =
  /// 0).
  /// @throws joule::Exception (kInvalidArgument) if stddev < 0, as numpy refuses it.
  double normal(double mean, double stddev);

  Pcg64& bit_generator() { return bits_; }
  const Pcg64& bit_generator() const { return bits_; }

 private:
  Pcg64 bits_;
};

}  // namespace joule::rng
