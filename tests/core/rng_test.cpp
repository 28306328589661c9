// SPDX-License-Identifier: Apache-2.0
// joule::rng against numpy, bit for bit. The fixture data/rng_reference.json is numpy 1.24's output, made by
// rng_reference.py (run it with a Python that has numpy to regenerate). Doubles are compared with EXPECT_EQ:
// exact equality is the point.
#include "joule/core/rng.hpp"

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"

#include "../../src/core/ziggurat_tables.hpp"
#include "test_util.hpp"

namespace joule::rng {
namespace {

using nlohmann::json;

// Tests are built from the source tree, so the data sits next to this file.
const std::filesystem::path kHere = std::filesystem::path(__FILE__).parent_path();

json load_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    return json::object();
  }
  return json::parse(in);
}

const json& fixture() {
  static const json data = load_json(kHere / "data" / "rng_reference.json");
  return data;
}

Uint128 parse_u128(const std::string& text) {
  Uint128 value = 0;
  for (const char c : text) {
    value = value * 10U + static_cast<unsigned>(c - '0');
  }
  return value;
}

Pcg64::State state_from_json(const json& j) {
  const Uint128 state = parse_u128(j.at("state").get<std::string>());
  const Uint128 inc = parse_u128(j.at("inc").get<std::string>());
  return Pcg64::State{static_cast<uint64_t>(state >> 64), static_cast<uint64_t>(state),
                      static_cast<uint64_t>(inc >> 64),   static_cast<uint64_t>(inc),
                      j.at("has_uint32").get<int>() != 0, j.at("uinteger").get<uint32_t>()};
}

void expect_state(const Pcg64& bits, const json& expected, const std::string& where) {
  EXPECT_EQ(bits.state(), state_from_json(expected)) << where;
}

std::string label(const json& seed_entry) {
  return "seed " + std::to_string(seed_entry.at("seed").get<uint64_t>());
}

// FNV-1a over the little-endian int64 bytes (as rng_reference.py hashes long samples).
uint64_t fnv1a64(const std::vector<int64_t>& values) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (const int64_t v : values) {
    const auto u = static_cast<uint64_t>(v);
    for (int byte = 0; byte < 8; ++byte) {
      h = (h ^ ((u >> (8 * byte)) & 0xFFU)) * 0x100000001B3ULL;
    }
  }
  return h;
}

// How many next64() steps took `before` to `after` (for checking what a draw consumed).
int steps_between(const Pcg64::State& before, const Pcg64::State& after) {
  Pcg64 probe(before);
  for (int steps = 0; steps < 1000; ++steps) {
    const Pcg64::State s = probe.state();
    if (s.state_high == after.state_high && s.state_low == after.state_low) {
      return steps;
    }
    probe.next64();
  }
  return -1;
}

TEST(RngFixture, IsNumpys) {
  ASSERT_TRUE(fixture().contains("seeds"));
  EXPECT_EQ(fixture().at("seeds").size(), 7U);
  EXPECT_FALSE(fixture().at("numpy_version").get<std::string>().empty());
}

TEST(SeedSequence, MatchesNumpyGenerateState) {
  for (const json& entry : fixture().at("seed_sequence")) {
    const auto seed = entry.at("seed").get<uint64_t>();
    const std::array<uint64_t, 4> words = seed_sequence_words(seed);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(words[i], entry.at("words").at(i).get<uint64_t>()) << "seed " << seed << " word " << i;
    }
  }
}

TEST(Pcg64, SeedingMatchesNumpyState) {
  for (const json& entry : fixture().at("seeds")) {
    expect_state(Pcg64(entry.at("seed").get<uint64_t>()), entry.at("initial_state"), label(entry));
  }
}

TEST(Pcg64, Next64MatchesNumpy) {
  for (const json& entry : fixture().at("seeds")) {
    Pcg64 bits(entry.at("seed").get<uint64_t>());
    for (const json& expected : entry.at("next64")) {
      EXPECT_EQ(bits.next64(), expected.get<uint64_t>()) << label(entry);
    }
    expect_state(bits, entry.at("state_after_next64"), label(entry));
  }
}

TEST(Pcg64, InterleavedNext32Next64AndRandomMatchNumpy) {
  for (const json& entry : fixture().at("seeds")) {
    Generator gen(entry.at("seed").get<uint64_t>());
    for (const json& step : entry.at("interleaved")) {
      const auto op = step.at(0).get<std::string>();
      if (op == "next32") {
        EXPECT_EQ(gen.bit_generator().next32(), step.at(1).get<uint32_t>()) << label(entry);
      } else if (op == "next64") {
        EXPECT_EQ(gen.bit_generator().next64(), step.at(1).get<uint64_t>()) << label(entry);
      } else {
        ASSERT_EQ(op, "random");
        EXPECT_EQ(gen.random(), step.at(1).get<double>()) << label(entry);
      }
    }
    expect_state(gen.bit_generator(), entry.at("state_after_interleaved"), label(entry));
  }
}

TEST(Pcg64, ResumesFromNumpyState) {
  for (const json& entry : fixture().at("seeds")) {
    const json& resume = entry.at("resume");
    Generator gen(state_from_json(resume.at("state")));
    EXPECT_EQ(gen.bit_generator().state(), state_from_json(resume.at("state")));
    for (const json& v : resume.at("next32")) {
      EXPECT_EQ(gen.bit_generator().next32(), v.get<uint32_t>()) << label(entry);
    }
    for (const json& v : resume.at("next64")) {
      EXPECT_EQ(gen.bit_generator().next64(), v.get<uint64_t>()) << label(entry);
    }
    EXPECT_EQ(gen.random(), resume.at("random").at(0).get<double>()) << label(entry);
  }
}

TEST(Pcg64, StateRoundTrips) {
  Pcg64 bits(42);
  bits.next32();  // leaves the high half buffered
  const Pcg64::State saved = bits.state();
  EXPECT_TRUE(saved.has_uint32);
  Pcg64 copy(saved);
  EXPECT_EQ(copy.state(), saved);
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(copy.next32(), bits.next32());
    EXPECT_EQ(copy.next64(), bits.next64());
    EXPECT_EQ(copy.next_double(), bits.next_double());
  }
  EXPECT_EQ(copy.state(), bits.state());
}

TEST(Generator, BoundedMatchesNumpyIntegers) {
  for (const json& entry : fixture().at("seeds")) {
    Generator gen(entry.at("seed").get<uint64_t>());
    for (const json& block : entry.at("bounded")) {
      const auto max = block.at("max").get<uint64_t>();
      for (const json& expected : block.at("draws")) {
        EXPECT_EQ(gen.bounded(max), expected.get<uint64_t>()) << label(entry) << " max " << max;
      }
      expect_state(gen.bit_generator(), block.at("state_after"),
                   label(entry) + " max " + std::to_string(max));
    }
  }
}

TEST(Generator, BoundedZeroConsumesNothing) {
  Generator gen(7);
  gen.bit_generator().next32();
  const Pcg64::State before = gen.bit_generator().state();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(gen.bounded(0), 0U);
  }
  EXPECT_EQ(gen.bit_generator().state(), before);
}

TEST(Generator, BoundedStaysInRange) {
  Generator gen(3);
  for (const uint64_t max : {1ULL, 6ULL, 1000ULL, (1ULL << 32) - 2, (1ULL << 32), (1ULL << 63) + 5, ~0ULL}) {
    for (int i = 0; i < 200; ++i) {
      EXPECT_LE(gen.bounded(max), max);
    }
  }
}

TEST(Generator, ChoiceWithoutReplacementMatchesNumpy) {
  for (const json& entry : fixture().at("seeds")) {
    for (const json& c : entry.at("choice")) {
      const auto n = c.at("n").get<int64_t>();
      const auto k = c.at("k").get<int64_t>();
      const std::string where =
          label(entry) + " choice(" + std::to_string(n) + ", " + std::to_string(k) + ")";
      Generator gen(entry.at("seed").get<uint64_t>());
      const std::vector<int64_t> sample = gen.choice_without_replacement(n, k);
      ASSERT_EQ(sample.size(), static_cast<size_t>(k)) << where;
      if (c.contains("values")) {
        EXPECT_EQ(sample, c.at("values").get<std::vector<int64_t>>()) << where;
      } else {
        EXPECT_EQ(fnv1a64(sample), c.at("fnv1a64").get<uint64_t>()) << where;
      }
      expect_state(gen.bit_generator(), c.at("state_after"), where);
    }
  }
}

TEST(Generator, RandomOrderMatchesNumpyChoice) {
  for (const json& entry : fixture().at("seeds")) {
    for (const json& p : entry.at("permutation")) {
      const auto n = p.at("n").get<int64_t>();
      Generator gen(entry.at("seed").get<uint64_t>());
      EXPECT_EQ(gen.random_order(n), p.at("values").get<std::vector<int64_t>>())
          << label(entry) << " n " << n;
      expect_state(gen.bit_generator(), p.at("state_after"), label(entry));
    }
  }
}

TEST(Generator, ChoiceRejectsImpossibleSamples) {
  Generator gen(1);
  JOULE_EXPECT_THROW_MESSAGE(gen.choice_without_replacement(3, 4), ErrorCode::kInvalidArgument,
                             "cannot take a sample of 4 from a population of 3 without replacement");
  JOULE_EXPECT_THROW_MESSAGE(gen.choice_without_replacement(0, 1), ErrorCode::kInvalidArgument,
                             "cannot take a sample of 1 from a population of 0 without replacement");
  JOULE_EXPECT_THROW_MESSAGE(gen.choice_without_replacement(5, -1), ErrorCode::kInvalidArgument,
                             "choice without replacement needs a non-negative population and sample size "
                             "(got population 5, sample -1)");
  EXPECT_EQ(gen.bit_generator().state(), Generator(1).bit_generator().state());
}

TEST(Generator, StandardNormalMatchesNumpy) {
  for (const json& entry : fixture().at("seeds")) {
    Generator gen(entry.at("seed").get<uint64_t>());
    size_t i = 0;
    for (const json& expected : entry.at("standard_normal")) {
      EXPECT_EQ(gen.standard_normal(), expected.get<double>()) << label(entry) << " draw " << i;
      ++i;
    }
    expect_state(gen.bit_generator(), entry.at("state_after_standard_normal"), label(entry));
  }
  // The draws above must reach the ziggurat's rare paths, or they prove little.
  const json& counts = fixture().at("standard_normal_path_counts");
  EXPECT_GT(counts.value("wedge_accept", 0), 0);
  EXPECT_GT(counts.value("wedge_reject", 0), 0);
  EXPECT_GT(counts.value("tail_accept_positive", 0) + counts.value("tail_accept_negative", 0), 0);
}

TEST(Generator, StandardNormalTailAndWedgePathsMatchNumpy) {
  // States just before a draw that takes each rare path (tail accepted or retried, either sign; wedge
  // accepted or rejected), and the raw draws numpy consumed for it.
  ASSERT_EQ(fixture().at("normal_paths").size(), 6U);
  for (const json& p : fixture().at("normal_paths")) {
    const auto path = p.at("path").get<std::string>();
    Generator gen(state_from_json(p.at("state")));
    const Pcg64::State before = gen.bit_generator().state();
    EXPECT_EQ(gen.standard_normal(), p.at("values").at(0).get<double>()) << path;
    EXPECT_EQ(steps_between(before, gen.bit_generator().state()), p.at("consumed").get<int>()) << path;
    for (size_t i = 1; i < p.at("values").size(); ++i) {
      EXPECT_EQ(gen.standard_normal(), p.at("values").at(i).get<double>()) << path << " then " << i;
    }
    if (path.starts_with("tail")) {
      EXPECT_GT(std::abs(p.at("values").at(0).get<double>()), 3.6541528853610088) << path;
    }
  }
}

TEST(Generator, MillionStandardNormalsMatchNumpyChecksum) {
  // About 260 tail and 15000 wedge draws per seed; a single differing bit changes the checksum.
  for (const json& entry : fixture().at("long_standard_normal")) {
    Generator gen(entry.at("seed").get<uint64_t>());
    const auto count = entry.at("count").get<uint64_t>();
    uint64_t checksum = 0;
    for (uint64_t i = 0; i < count; ++i) {
      checksum += std::bit_cast<uint64_t>(gen.standard_normal()) * (2 * i + 1);
    }
    EXPECT_EQ(checksum, entry.at("checksum").get<uint64_t>()) << label(entry);
    expect_state(gen.bit_generator(), entry.at("state_after"), label(entry));
  }
}

TEST(Generator, NormalMatchesNumpy) {
  for (const json& entry : fixture().at("seeds")) {
    Generator gen(entry.at("seed").get<uint64_t>());
    for (const json& params : entry.at("normal")) {
      const auto mean = params.at("mean").get<double>();
      const auto stddev = params.at("stddev").get<double>();
      for (const json& expected : params.at("values")) {
        EXPECT_EQ(gen.normal(mean, stddev), expected.get<double>())
            << label(entry) << " normal(" << mean << ", " << stddev << ")";
      }
    }
    expect_state(gen.bit_generator(), entry.at("state_after_normal"), label(entry));
  }
}

TEST(RngZigguratTables, EqualTheShippedNumpyTables) {
  const json tables = load_json(kHere / ".." / ".." / "data" / "numpy" / "numpy_ziggurat_tables.json");
  ASSERT_EQ(tables.at("ki_double").size(), 256U);
  ASSERT_EQ(tables.at("wi_double").size(), 256U);
  ASSERT_EQ(tables.at("fi_double").size(), 256U);
  for (size_t i = 0; i < 256; ++i) {
    EXPECT_EQ(detail::kZigguratKi[i], tables.at("ki_double").at(i).get<uint64_t>()) << "ki " << i;
    // Hex floats parse exactly.
    EXPECT_EQ(detail::kZigguratWi[i],
              std::strtod(tables.at("wi_double").at(i).get<std::string>().c_str(), nullptr))
        << "wi " << i;
    EXPECT_EQ(detail::kZigguratFi[i],
              std::strtod(tables.at("fi_double").at(i).get<std::string>().c_str(), nullptr))
        << "fi " << i;
  }
}

// Not a correctness test: prints ns per draw so regressions are visible in the log.
TEST(RngSpeed, Next64AndStandardNormal) {
  constexpr int kDraws = 2'000'000;
  Generator gen(5);
  double sink = 0;
  auto start = std::chrono::steady_clock::now();
  uint64_t acc = 0;
  for (int i = 0; i < kDraws; ++i) {
    acc ^= gen.bit_generator().next64();
  }
  const auto next64_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < kDraws; ++i) {
    sink += gen.standard_normal();
  }
  const auto normal_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::cout << "next64: " << next64_ns / kDraws << " ns, standard_normal: " << normal_ns / kDraws << " ns"
            << " (checksum " << (acc & 1U) + (sink > 0 ? 1 : 0) << ")\n";
  EXPECT_TRUE(std::isfinite(sink));
}

}  // namespace
}  // namespace joule::rng

namespace joule::rng {
namespace {
TEST(Generator, NormalRefusesANegativeDeviation) {
  Generator gen(1);
  const auto before = gen.bit_generator().state();
  JOULE_EXPECT_THROW_MESSAGE(gen.normal(0, -1), ErrorCode::kInvalidArgument,
                             "normal(): the standard deviation must not be negative (got -1)");
  EXPECT_EQ(gen.bit_generator().state(), before);
}
}  // namespace
}  // namespace joule::rng
