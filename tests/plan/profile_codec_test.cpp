// SPDX-License-Identifier: Apache-2.0
// The profile codec: canonical CSV (round trip, equal profiles give equal text), JSON rows and their
// messages, and the forms of a profile upload.
#include "joule/plan/profile_codec.hpp"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plan/profile_rows.hpp"
#include "test_util.hpp"

namespace joule::plan {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string error_of(const json& rows, int64_t stages = 2) {
  const auto parsed = profile_from_rows(rows, stages);
  EXPECT_FALSE(parsed);
  return parsed ? std::string() : parsed.error().message();
}

TEST(ProfileCodec, CsvIsCanonicalAndReadsBack) {
  const Profile example = Profile::read(JOULE_PERSEUS_DATA_DIR "/example_s4_m8_profile.csv").value();
  const std::string text = profile_csv(example);
  EXPECT_TRUE(text.starts_with("stage,instruction,frequency_mhz,time_s,energy_j\n"));
  const Profile again = value_or_throw(Profile::parse(text, "again"));
  EXPECT_EQ(profile_csv(again), text);
  ASSERT_EQ(again.stage_count(), example.stage_count());
  EXPECT_EQ(again.frequencies_mhz(), example.frequencies_mhz());
  for (int stage = 0; stage < example.stage_count(); ++stage) {
    for (const auto instruction : {Instruction::kForward, Instruction::kBackward}) {
      const auto& expected = example.options(stage, instruction);
      const auto& got = again.options(stage, instruction);
      ASSERT_EQ(got.size(), expected.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].frequency_mhz, expected[i].frequency_mhz);
        EXPECT_EQ(got[i].time_s, expected[i].time_s);  // exact doubles
        EXPECT_EQ(got[i].energy_j, expected[i].energy_j);
      }
    }
  }
}

TEST(ProfileCodec, RowsInAnyOrderGiveTheSameCanonicalCsv) {
  const json rows = test::small_profile_rows();
  json reversed = json::array();
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    reversed.push_back(*it);
  }
  const Profile profile = value_or_throw(profile_from_rows(rows, 2));
  EXPECT_EQ(profile.stage_count(), 2);
  EXPECT_EQ(profile.frequencies_mhz(), (std::vector<uint32_t>{1400, 1000}));
  EXPECT_EQ(profile_csv(value_or_throw(profile_from_rows(reversed, 2))), profile_csv(profile));
}

TEST(ProfileCodec, BadRowsNameTheRowAndField) {
  json not_object = test::small_profile_rows();
  not_object[1] = 3;
  EXPECT_THAT(error_of(not_object), HasSubstr("rows[1]: must be an object"));
  json missing = test::small_profile_rows();
  missing[2].erase("energy_j");
  EXPECT_EQ(error_of(missing), "rows[2].energy_j: field required");
  json bad_stage = test::small_profile_rows();
  bad_stage[0]["stage"] = 7;
  EXPECT_THAT(error_of(bad_stage), HasSubstr("rows[0].stage: must be an integer in [0, 2), got "));
  json bad_instruction = test::small_profile_rows();
  bad_instruction[0]["instruction"] = 5;
  EXPECT_THAT(error_of(bad_instruction),
              HasSubstr("rows[0].instruction: must be \"forward\" or \"backward\""));
  bad_instruction[0]["instruction"] = "sideways";
  EXPECT_THAT(error_of(bad_instruction), HasSubstr("rows[0].instruction: "));
  json bad_frequency = test::small_profile_rows();
  bad_frequency[0]["frequency_mhz"] = 0;
  EXPECT_THAT(error_of(bad_frequency), HasSubstr("rows[0].frequency_mhz: must be a positive integer"));
  bad_frequency[0]["frequency_mhz"] = int64_t{1} << 33;
  EXPECT_THAT(error_of(bad_frequency), HasSubstr("rows[0].frequency_mhz: must be a positive integer"));
  json bad_time = test::small_profile_rows();
  bad_time[0]["time_s"] = "fast";
  EXPECT_THAT(error_of(bad_time), HasSubstr("rows[0].time_s: must be a number"));
  // Valid rows, invalid profile: Profile::from_options() decides.
  json missing_row = test::small_profile_rows();
  missing_row.erase(missing_row.begin());
  EXPECT_EQ(profile_from_rows(missing_row, 2).error().code(), ErrorCode::kInvalidArgument);
  json negative = test::small_profile_rows();
  negative[0]["time_s"] = -1;
  EXPECT_FALSE(profile_from_rows(negative, 2));
}

TEST(ProfileCodec, UploadsAsCsvOrJson) {
  const json rows = test::small_profile_rows();
  const std::string canonical = profile_csv(value_or_throw(profile_from_rows(rows, 2)));
  // CSV text, by content type or by its first character.
  EXPECT_EQ(profile_csv(value_or_throw(parse_profile_upload(canonical, "text/csv", 2))), canonical);
  EXPECT_EQ(profile_csv(value_or_throw(parse_profile_upload(canonical, "", 2))), canonical);
  // JSON: {"rows"}, a bare array, {"csv"}; detected by content type (any case) or by the body.
  for (const std::string& body :
       {json({{"rows", rows}}).dump(), rows.dump(), json({{"csv", canonical}}).dump()}) {
    EXPECT_EQ(profile_csv(value_or_throw(parse_profile_upload(body, "Application/JSON; charset=utf-8", 2))),
              canonical)
        << body;
    EXPECT_EQ(profile_csv(value_or_throw(parse_profile_upload("  " + body, "", 2))), canonical) << body;
  }
}

TEST(ProfileCodec, BadUploads) {
  const auto message = [](std::string_view body, std::string_view content_type = "") {
    const auto parsed = parse_profile_upload(body, content_type, 2);
    EXPECT_FALSE(parsed) << body;
    return parsed ? std::string() : parsed.error().message();
  };
  EXPECT_THAT(message("{\"rows\": ", "application/json"), HasSubstr("profile: malformed JSON: "));
  EXPECT_EQ(message("{\"csv\": 3}"), "csv: must be a string of CSV text");
  EXPECT_EQ(message("{\"rows\": 3}"),
            "profile: expected CSV text, or JSON {\"csv\": \"…\"}, {\"rows\": [...]} or an array of rows");
  EXPECT_EQ(message("{}"),
            "profile: expected CSV text, or JSON {\"csv\": \"…\"}, {\"rows\": [...]} or an array of rows");
  EXPECT_EQ(message("[{\"stage\": 0}]"), "rows[0].instruction: field required");
  // CSV errors are Profile::parse()'s, with the source "profile".
  const auto csv = parse_profile_upload("stage,instruction\n0,forward\n", "text/csv", 2);
  ASSERT_FALSE(csv);
  EXPECT_EQ(csv.error().code(), ErrorCode::kParse);
  EXPECT_THAT(csv.error().message(), HasSubstr("profile"));
}

// Perseus's and lowtime's profile files, exactly as their tools write and read them: Merak-Zeus's
// MerakTrainer.profile() (ml-energy/merak-zeus, Merak/merak_trainer.py) writes
// rank,dp_rank,pp_rank,tp_rank,stage,instruction,frequency,time,energy with Python's csv.writer (forward
// rows, then backward, frequencies high to low, time in s and energy in J per instruction); lowtime's
// examples/perseus.py and Zeus's run_optimization.py read its stage, instruction, frequency, time and energy.
constexpr std::string_view kMerakProfile =
    "rank,dp_rank,pp_rank,tp_rank,stage,instruction,frequency,time,energy\r\n"
    "0,0,0,0,0,forward,1410,0.021324524,7.822523\r\n"
    "0,0,0,0,0,forward,1200,0.024891001,6.9041237\r\n"
    "0,0,0,0,0,backward,1410,0.04412,16.1123\r\n"
    "0,0,0,0,0,backward,1200,0.0511,14.3021\r\n"
    "1,0,1,0,1,forward,1410,0.0223,8.1\r\n"
    "1,0,1,0,1,forward,1200,0.0259,7.2\r\n"
    "1,0,1,0,1,backward,1410,0.0456,16.9\r\n"
    "1,0,1,0,1,backward,1200,0.0527,15.0\r\n";

// The same measurements under joule's own header.
constexpr std::string_view kJouleProfile =
    "stage,instruction,frequency_mhz,time_s,energy_j\n"
    "0,forward,1410,0.021324524,7.822523\n"
    "0,forward,1200,0.024891001,6.9041237\n"
    "0,backward,1410,0.04412,16.1123\n"
    "0,backward,1200,0.0511,14.3021\n"
    "1,forward,1410,0.0223,8.1\n"
    "1,forward,1200,0.0259,7.2\n"
    "1,backward,1410,0.0456,16.9\n"
    "1,backward,1200,0.0527,15.0\n";

TEST(ProfileCodec, ReadsPerseusAndLowtimeProfilesAsTheyAre) {
  const std::string expected = profile_csv(value_or_throw(Profile::parse(kJouleProfile, "joule.csv")));
  const Profile merak = value_or_throw(Profile::parse(kMerakProfile, "merak+gpt3+dp1+pp2+tp1+mbs4.csv"));
  EXPECT_EQ(profile_csv(merak), expected);
  EXPECT_EQ(merak.frequencies_mhz(), (std::vector<uint32_t>{1410, 1200}));
  // lowtime's columns alone, in another order (pandas reads columns by name).
  const Profile lowtime = value_or_throw(
      Profile::parse("instruction,stage,time,energy,frequency\n"
                     "forward,0,0.021324524,7.822523,1410\nforward,0,0.024891001,6.9041237,1200\n"
                     "backward,0,0.04412,16.1123,1410\nbackward,0,0.0511,14.3021,1200\n"
                     "forward,1,0.0223,8.1,1410\nforward,1,0.0259,7.2,1200\n"
                     "backward,1,0.0456,16.9,1410\nbackward,1,0.0527,15.0,1200\n",
                     "lowtime.csv"));
  EXPECT_EQ(profile_csv(lowtime), expected);
  // The names may be mixed: each field under one of its two names.
  const std::string rows(kJouleProfile.substr(kJouleProfile.find('\n')));
  const std::string mixed = "stage,instruction,frequency,time_s,energy" + rows;
  EXPECT_EQ(profile_csv(value_or_throw(Profile::parse(mixed, "mixed.csv"))), expected);
}

TEST(ProfileCodec, RefusesAHeaderWithBothNamesOfAField) {
  JOULE_EXPECT_ERROR(
      Profile::parse(
          "stage,instruction,frequency_mhz,frequency,time_s,energy_j\n0,forward,1410,1410,0.02,7\n", "p.csv"),
      ErrorCode::kParse,
      "p.csv: the header has both 'frequency_mhz' and 'frequency' (Perseus's and lowtime's name for it): "
      "keep "
      "one column");
  JOULE_EXPECT_ERROR(
      Profile::parse("stage,instruction,frequency,time,time_s,energy\n0,forward,1410,0.02,0.02,7\n", "p.csv"),
      ErrorCode::kParse,
      "p.csv: the header has both 'time_s' and 'time' (Perseus's and lowtime's name for it): keep one "
      "column");
  JOULE_EXPECT_ERROR(
      Profile::parse("stage,instruction,frequency,time,energy,energy_j\n0,forward,1410,0.02,7,7\n", "p.csv"),
      ErrorCode::kParse,
      "p.csv: the header has both 'energy_j' and 'energy' (Perseus's and lowtime's name for it): keep one "
      "column");
  JOULE_EXPECT_ERROR(
      Profile::parse("stage,instruction,freq,time,energy\n0,forward,1410,0.02,7\n", "p.csv"),
      ErrorCode::kParse,
      "p.csv: missing column 'frequency_mhz' (Perseus and lowtime call it 'frequency'; the header "
      "has: stage, instruction, freq, time, energy)");
}

TEST(ProfileCodec, RefusesAMerakProfileWithSeveralRanksPerStage) {
  // dp=2: ranks 0 and 1 both ran stage 0, each with its own measurements.
  const std::string two_ranks = std::string(kMerakProfile) + "2,1,0,0,0,forward,1410,0.0214,7.9\r\n";
  JOULE_EXPECT_ERROR(
      Profile::parse(two_ranks, "merak.csv"), ErrorCode::kParse,
      "merak.csv:10:1: column 'rank': stage 0 has rows of rank 2 and of rank 0 (line 2): a plan "
      "gives each stage one profile, so keep the rows of one rank per stage (e.g. those with "
      "dp_rank 0 and tp_rank 0)");
}

}  // namespace
}  // namespace joule::plan
