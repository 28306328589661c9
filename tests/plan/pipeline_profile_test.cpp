// SPDX-License-Identifier: Apache-2.0
// Per-computation profiles: the example, CSV validation (every message exact) and from_options().
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "joule/plan/pipeline.hpp"

#include "test_util.hpp"

namespace joule::plan {
namespace {

// Two stages, two clocks; line numbers in the comments.
const std::vector<std::string> kRows = {
    "stage,instruction,frequency_mhz,time_s,energy_j",  // 1
    "0,forward,1410,0.02,7.8",                          // 2
    "0,forward,1200,0.03,6.5",                          // 3
    "0,backward,1410,0.04,15",                          // 4
    "0,backward,1200,0.05,13",                          // 5
    "1,forward,1410,0.02,7.8",                          // 6
    "1,forward,1200,0.03,6.5",                          // 7
    "1,backward,1410,0.04,15",                          // 8
    "1,backward,1200,0.05,13",                          // 9
};

// kRows with line `line` (1-based) replaced, or dropped if `replacement` is empty.
std::string csv_with(size_t line, const std::string& replacement) {
  std::string text;
  for (size_t i = 0; i < kRows.size(); ++i) {
    const std::string& row = i + 1 == line ? replacement : kRows[i];
    if (!row.empty()) {
      text += row + "\n";
    }
  }
  return text;
}

Result<Profile> parse_with(size_t line, const std::string& replacement) {
  return Profile::parse(csv_with(line, replacement), "p.csv");
}

TEST(Profile, ParsesAndSortsByFrequencyDescending) {
  // Columns in another order, an extra column, rows shuffled, a blank line.
  const std::string text =
      "time_s,energy_j,note,frequency_mhz,instruction,stage\n"
      "0.05,13,x,1200,backward,0\n"
      "0.02,7.8,,1410,forward,0\n"
      "\n"
      "0.04,15,,1410,backward,0\n"
      "0.03,6.5,,1200,forward,0\n";
  const Profile profile = Profile::parse(text, "p.csv").value();
  EXPECT_EQ(profile.stage_count(), 1);
  EXPECT_EQ(profile.frequencies_mhz(), (std::vector<uint32_t>{1410, 1200}));
  const auto& backward = profile.options(0, Instruction::kBackward);
  ASSERT_EQ(backward.size(), 2u);
  EXPECT_EQ(backward[0].frequency_mhz, 1410u);
  EXPECT_DOUBLE_EQ(backward[0].time_s, 0.04);
  EXPECT_DOUBLE_EQ(backward[0].energy_j, 15);
  EXPECT_EQ(backward[1].frequency_mhz, 1200u);
  EXPECT_EQ(profile.options(0, Instruction::kForward)[1].frequency_mhz, 1200u);
  JOULE_EXPECT_THROW_MESSAGE(profile.options(1, Instruction::kForward), ErrorCode::kOutOfRange,
                             "the profile has no stage 1 (it has 1 stages)");
}

TEST(Profile, ExampleLoads) {
  const Profile profile = Profile::read(JOULE_PERSEUS_DATA_DIR "/example_s4_m8_profile.csv").value();
  EXPECT_EQ(profile.stage_count(), 4);
  ASSERT_EQ(profile.frequencies_mhz().size(), 41u);
  EXPECT_EQ(profile.frequencies_mhz().front(), 1410u);
  EXPECT_EQ(profile.frequencies_mhz().back(), 810u);
  for (size_t i = 1; i < profile.frequencies_mhz().size(); ++i) {
    EXPECT_EQ(profile.frequencies_mhz()[i - 1] - profile.frequencies_mhz()[i], 15u);
  }
  for (int s = 0; s < 4; ++s) {
    for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
      const auto& options = profile.options(s, instruction);
      ASSERT_EQ(options.size(), 41u);
      for (size_t i = 0; i < options.size(); ++i) {
        EXPECT_EQ(options[i].frequency_mhz, profile.frequencies_mhz()[i]);
      }
    }
  }
  const ProfileOption first = profile.options(0, Instruction::kForward).front();
  EXPECT_DOUBLE_EQ(first.time_s, 0.021324524);
  EXPECT_DOUBLE_EQ(first.energy_j, 7.822523);
}

TEST(Profile, ReadErrorsNameThePath) {
  const auto missing = Profile::read("/nonexistent/profile.csv");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(missing.error().message(), ::testing::HasSubstr("/nonexistent/profile.csv"));
  test::TempDir dir;
  const std::string path = dir.write("bad.csv", csv_with(5, "0,backward,1200,0.05,"));
  JOULE_EXPECT_ERROR(Profile::read(path), ErrorCode::kParse,
                     path + ":5:22: column 'energy_j': expected a number, got \"\"");
}

TEST(Profile, ParseErrors) {
  JOULE_EXPECT_ERROR(
      Profile::parse("stage,instruction,frequency_mhz,time_s\n0,forward,1410,0.02\n", "p.csv"),
      ErrorCode::kParse,
      "p.csv: missing column 'energy_j' (Perseus and lowtime call it 'energy'; the header has: stage, "
      "instruction, frequency_mhz, time_s)");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,1200,fast,6.5"), ErrorCode::kParse,
                     "p.csv:3:16: column 'time_s': expected a number, got \"fast\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,1200,0,6.5"), ErrorCode::kParse,
                     "p.csv:3:16: column 'time_s': expected a positive finite number, got \"0\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,1200,-0.1,6.5"), ErrorCode::kParse,
                     "p.csv:3:16: column 'time_s': expected a positive finite number, got \"-0.1\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,1200,nan,6.5"), ErrorCode::kParse,
                     "p.csv:3:16: column 'time_s': expected a positive finite number, got \"nan\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,1200,0.03,-1"), ErrorCode::kParse,
                     "p.csv:3:21: column 'energy_j': expected a positive finite number, got \"-1\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,1200,0.03,inf"), ErrorCode::kParse,
                     "p.csv:3:21: column 'energy_j': expected a positive finite number, got \"inf\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,1200,0.03,0"), ErrorCode::kParse,
                     "p.csv:3:21: column 'energy_j': expected a positive finite number, got \"0\"");
  JOULE_EXPECT_ERROR(parse_with(3, "-1,forward,1200,0.03,6.5"), ErrorCode::kParse,
                     "p.csv:3:1: column 'stage': expected a non-negative integer, got \"-1\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0.5,forward,1200,0.03,6.5"), ErrorCode::kParse,
                     "p.csv:3:1: column 'stage': expected an integer, got \"0.5\"");
  JOULE_EXPECT_ERROR(parse_with(3, "99999999999,forward,1200,0.03,6.5"), ErrorCode::kParse,
                     "p.csv:3:1: column 'stage': stage out of range: \"99999999999\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,1200.5,0.03,6.5"), ErrorCode::kParse,
                     "p.csv:3:11: column 'frequency_mhz': expected an integer, got \"1200.5\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,-1200,0.03,6.5"), ErrorCode::kParse,
                     "p.csv:3:11: column 'frequency_mhz': expected a positive integer (MHz), got \"-1200\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,0,0.03,6.5"), ErrorCode::kParse,
                     "p.csv:3:11: column 'frequency_mhz': expected a positive integer (MHz), got \"0\"");
  JOULE_EXPECT_ERROR(
      parse_with(3, "0,forward,5000000000,0.03,6.5"), ErrorCode::kParse,
      "p.csv:3:11: column 'frequency_mhz': expected a positive integer (MHz), got \"5000000000\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,fwd,1200,0.03,6.5"), ErrorCode::kParse,
                     "p.csv:3:3: column 'instruction': expected forward or backward, got \"fwd\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,Forward,1200,0.03,6.5"), ErrorCode::kParse,
                     "p.csv:3:3: column 'instruction': expected forward or backward, got \"Forward\"");
}

// Issue 11: a 12 KB profile with one time_s = 1e300 at a lower clock made `joule plan` run for 55 s and
// 10 GB. No microbatch takes a day or a gigajoule: such rows are refused by the parser, row named.
TEST(Profile, ImplausibleTimesAndEnergiesAreRefused) {
  JOULE_EXPECT_ERROR(
      parse_with(5, "0,backward,1200,1e300,13"), ErrorCode::kParse,
      "p.csv:5:17: column 'time_s': expected at most 86400 s for one microbatch (a larger value "
      "is a unit mistake), got \"1e300\"");
  JOULE_EXPECT_ERROR(
      parse_with(5, "0,backward,1200,86400.5,13"), ErrorCode::kParse,
      "p.csv:5:17: column 'time_s': expected at most 86400 s for one microbatch (a larger value "
      "is a unit mistake), got \"86400.5\"");
  JOULE_EXPECT_ERROR(parse_with(5, "0,backward,1200,0.05,1e300"), ErrorCode::kParse,
                     "p.csv:5:22: column 'energy_j': expected at most 1e+09 J for one microbatch (a larger "
                     "value is a unit mistake), got \"1e300\"");
  JOULE_EXPECT_ERROR(parse_with(5, "0,backward,1200,1e400,13"), ErrorCode::kParse,
                     "p.csv:5:17: column 'time_s': number out of range: \"1e400\"");
  JOULE_EXPECT_ERROR(parse_with(5, "0,backward,1200,-inf,13"), ErrorCode::kParse,
                     "p.csv:5:17: column 'time_s': expected a positive finite number, got \"-inf\"");
  // At the bounds: accepted.
  EXPECT_TRUE(parse_with(5, "0,backward,1200,86400,1e9"));
}

TEST(Profile, TooManyClocksAreRefused) {
  std::string text = kRows[0] + "\n";
  for (int mhz = 1; mhz <= 1025; ++mhz) {
    text += fmt::format("0,forward,{0},0.02,7\n0,backward,{0},0.04,15\n", mhz);
  }
  // The 1025th clock in file order, 1025 MHz, comes on line 2050.
  JOULE_EXPECT_ERROR(
      Profile::parse(text, "p.csv"), ErrorCode::kParse,
      "p.csv:2050: the profile has 1025 different clocks, more than the 1024 a planner accepts "
      "(GPUs offer a few hundred): is frequency_mhz in MHz?");
}

// Issue 11: error messages printed the raw bytes of a binary profile.
TEST(Profile, BinaryInputIsQuotedPrintably) {
  JOULE_EXPECT_ERROR(parse_with(3, std::string("0,\x1b[2J\x00,1200,0.03,6.5", 21)), ErrorCode::kParse,
                     "p.csv:3:3: column 'instruction': expected forward or backward, got \"\\x1b[2J\\x00\"");
  JOULE_EXPECT_ERROR(parse_with(3, "0,forward,1200,\xff\xfe,6.5"), ErrorCode::kParse,
                     "p.csv:3:16: column 'time_s': expected a number, got \"\\xff\\xfe\"");
  JOULE_EXPECT_ERROR(parse_instruction("\x07"), ErrorCode::kParse,
                     "unknown instruction \"\\x07\": expected forward or backward");
  JOULE_EXPECT_ERROR(parse_schedule(std::string(100, 'z')), ErrorCode::kParse,
                     "unknown schedule \"" + std::string(40, 'z') + "…\": expected 1f1b or gpipe");
}

TEST(Profile, ReadIsBounded) {
  test::ScopedEnv no_override("JOULE_MAX_FILE_MIB", nullptr);
  JOULE_EXPECT_ERROR(
      Profile::read("/dev/zero"), ErrorCode::kInvalidArgument,
      "/dev/zero: more than 16 MiB, the most joule reads from a pipeline profile (real ones are "
      "far smaller: is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
}

TEST(Profile, DuplicateRowNamesBothLines) {
  JOULE_EXPECT_ERROR(
      parse_with(7, "1,forward,1410,0.021,7.9"), ErrorCode::kParse,
      "p.csv:7:11: column 'frequency_mhz': duplicate row for stage 1 forward at 1410 MHz (first on "
      "line 6)");
}

TEST(Profile, MissingFrequencyNamesARowThatHasIt) {
  JOULE_EXPECT_ERROR(parse_with(9, ""), ErrorCode::kParse,
                     "p.csv: stage 1 backward has no row at 1200 MHz (line 3 has one for stage 0 forward)");
  // A frequency only one row has: every other (stage, instruction) lacks it.
  JOULE_EXPECT_ERROR(Profile::parse(csv_with(0, "") + "1,backward,1005,0.06,12\n", "p.csv"),
                     ErrorCode::kParse,
                     "p.csv: stage 0 forward has no row at 1005 MHz (line 10 has one for stage 1 backward)");
  // A whole instruction missing on a stage.
  std::string no_backward = kRows[0] + "\n" + kRows[1] + "\n" + kRows[2] + "\n";
  for (size_t line = 6; line <= 9; ++line) {
    no_backward += kRows[line - 1] + "\n";
  }
  JOULE_EXPECT_ERROR(Profile::parse(no_backward, "p.csv"), ErrorCode::kParse,
                     "p.csv: stage 0 backward has no row at 1410 MHz (line 2 has one for stage 0 forward)");
}

TEST(Profile, MissingStage) {
  std::string text = kRows[0] + "\n";
  for (size_t line = 2; line <= 9; ++line) {
    std::string row = kRows[line - 1];
    if (line >= 6) {
      row[0] = '2';
    }
    text += row + "\n";
  }
  JOULE_EXPECT_ERROR(Profile::parse(text, "p.csv"), ErrorCode::kParse,
                     "p.csv: no rows for stage 1 (line 6 has stage 2)");
  // Stage 0 missing too: only stage 1 rows.
  std::string only_one = kRows[0] + "\n";
  for (size_t line = 6; line <= 9; ++line) {
    only_one += kRows[line - 1] + "\n";
  }
  JOULE_EXPECT_ERROR(Profile::parse(only_one, "p.csv"), ErrorCode::kParse,
                     "p.csv: no rows for stage 0 (line 2 has stage 1)");
}

TEST(Profile, Empty) {
  JOULE_EXPECT_ERROR(Profile::parse(kRows[0] + "\n", "p.csv"), ErrorCode::kParse,
                     "p.csv: the profile has no rows");
  const auto nothing = Profile::parse("", "p.csv");
  ASSERT_FALSE(nothing.has_value());
  EXPECT_EQ(nothing.error().code(), ErrorCode::kParse);
  EXPECT_THAT(nothing.error().message(), ::testing::StartsWith("p.csv"));
}

using StageOptions = std::array<std::vector<ProfileOption>, 2>;

StageOptions stage(std::vector<ProfileOption> forward, std::vector<ProfileOption> backward) {
  return {std::move(forward), std::move(backward)};
}

TEST(Profile, FromOptions) {
  const Profile profile = Profile::from_options({stage({{1200, 0.03, 6.5}, {1410, 0.02, 7.8}},
                                                       {{1410, 0.04, 15}, {1200, 0.05, 13}})})
                              .value();
  EXPECT_EQ(profile.stage_count(), 1);
  EXPECT_EQ(profile.frequencies_mhz(), (std::vector<uint32_t>{1410, 1200}));
  EXPECT_EQ(profile.options(0, Instruction::kForward)[0].frequency_mhz, 1410u);
  EXPECT_DOUBLE_EQ(profile.options(0, Instruction::kForward)[0].time_s, 0.02);
  EXPECT_EQ(profile.options(0, Instruction::kBackward)[1].frequency_mhz, 1200u);
}

TEST(Profile, FromOptionsErrors) {
  const ProfileOption good{1410, 0.02, 7.8};
  const ProfileOption slow_forward{1200, 0.03, 6.5};
  const ProfileOption slow_backward{1200, 0.05, 13};
  JOULE_EXPECT_ERROR(Profile::from_options({}), ErrorCode::kInvalidArgument, "the profile has no stages");
  JOULE_EXPECT_ERROR(Profile::from_options({stage({}, {}), stage({}, {})}), ErrorCode::kInvalidArgument,
                     "the profile has no options");
  JOULE_EXPECT_ERROR(Profile::from_options({stage({{0, 0.02, 7.8}}, {good})}), ErrorCode::kInvalidArgument,
                     "stage 0 forward: frequency_mhz must be positive, got 0");
  JOULE_EXPECT_ERROR(Profile::from_options({stage({good}, {{1410, 0, 7.8}})}), ErrorCode::kInvalidArgument,
                     "stage 0 backward at 1410 MHz: time_s must be positive and finite, got 0");
  JOULE_EXPECT_ERROR(
      Profile::from_options({stage({good}, {{1410, 0.02, std::numeric_limits<double>::quiet_NaN()}})}),
      ErrorCode::kInvalidArgument,
      "stage 0 backward at 1410 MHz: energy_j must be positive and finite, got nan");
  JOULE_EXPECT_ERROR(Profile::from_options({stage({good}, {good}), stage({good, good}, {good})}),
                     ErrorCode::kInvalidArgument, "stage 1 forward: two options at 1410 MHz");
  JOULE_EXPECT_ERROR(Profile::from_options({stage({good, slow_forward}, {good, slow_backward}),
                                            stage({good, slow_forward}, {good})}),
                     ErrorCode::kInvalidArgument,
                     "stage 1 backward has no option at 1200 MHz (stage 0 forward has one)");
}

TEST(Profile, FromOptionsRefusesImplausibleValues) {
  const ProfileOption good{1410, 0.02, 7.8};
  JOULE_EXPECT_ERROR(Profile::from_options({stage({good}, {{1410, 1e300, 7.8}})}),
                     ErrorCode::kInvalidArgument,
                     "stage 0 backward at 1410 MHz: time_s: expected at most 86400 s for one microbatch (a "
                     "larger value is a unit mistake), got 1e+300");
  JOULE_EXPECT_ERROR(Profile::from_options({stage({{1410, 0.02, 2e9}}, {good})}), ErrorCode::kInvalidArgument,
                     "stage 0 forward at 1410 MHz: energy_j: expected at most 1e+09 J for one microbatch (a "
                     "larger value is a unit mistake), got 2000000000");
  JOULE_EXPECT_ERROR(
      Profile::from_options({stage({good}, {{1410, std::numeric_limits<double>::infinity(), 7.8}})}),
      ErrorCode::kInvalidArgument,
      "stage 0 backward at 1410 MHz: time_s must be positive and finite, got inf");
  std::vector<ProfileOption> many;
  for (uint32_t mhz = 1; mhz <= 1025; ++mhz) {
    many.push_back({mhz, 0.02, 7.8});
  }
  JOULE_EXPECT_ERROR(
      Profile::from_options({stage(many, many)}), ErrorCode::kInvalidArgument,
      "the profile has 1025 different clocks, more than the 1024 a planner accepts (GPUs offer a "
      "few hundred)");
}

}  // namespace
}  // namespace joule::plan
