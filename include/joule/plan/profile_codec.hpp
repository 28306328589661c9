// SPDX-License-Identifier: Apache-2.0
// joule/plan/profile_codec.hpp — a pipeline's profile (Profile) to and from the forms clients send and the
// service stores: canonical CSV text, JSON rows, and a profile upload that may be either.
//
// JSON rows (one per profiled (stage, instruction, frequency)):
//
//   [{"stage": 0, "instruction": "forward", "frequency_mhz": 1410, "time_s": 0.012, "energy_j": 3.1}, …]
//
// CSV profiles may also use the column names of Perseus's and lowtime's own profile files, so that their
// users need not rename a header (the same units: MHz, s, J):
//   Merak-Zeus's profiler (ml-energy/merak-zeus, Merak/merak_trainer.py, MerakTrainer.profile()) writes
//     rank,dp_rank,pp_rank,tp_rank,stage,instruction,frequency,time,energy
//   and lowtime's examples/perseus.py and Zeus's examples/pipeline_frequency_optimizer/run_optimization.py
//   read the columns stage, instruction, frequency, time and energy of such a file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::csv {
class Table;
}  // namespace joule::csv

namespace joule::plan {

/// Where a profile CSV keeps each field (0-based column positions). Other columns are ignored.
struct ProfileColumns {
  size_t stage = 0;
  size_t instruction = 0;
  size_t frequency_mhz = 0;  ///< `frequency_mhz`, or Perseus's and lowtime's `frequency`
  size_t time_s = 0;         ///< `time_s`, or `time`
  size_t energy_j = 0;       ///< `energy_j`, or `energy`
};

/// @return the columns of a profile table (Profile::parse() reads them through this), accepting joule's
/// names or Perseus's and lowtime's (above). Errors (kParse, naming the table's source):
/// - a column missing under both names: "<source>: missing column 'energy_j' (Perseus and lowtime call it
///   'energy'; the header has: …)";
/// - a field under both names: "<source>: the header has both 'time_s' and 'time' (Perseus's and
///   lowtime's name for it): keep one column";
/// - with a `rank` column (a Merak-Zeus profile of a job with data or tensor parallelism), rows of two
///   ranks for one stage: "<source>:<line>:<col>: column 'rank': stage 0 has rows of rank 1 and of rank 0
///   (line 2): …keep the rows of one rank per stage…", since a plan gives each stage one profile.
Result<ProfileColumns> profile_columns(const csv::Table& table);

/// @return the profile as canonical CSV (header `stage,instruction,frequency_mhz,time_s,energy_j`, stages in
/// order, forward before backward, frequencies descending, doubles written exactly), so that equal profiles
/// give equal text. Profile::parse() reads it back to an equal profile.
std::string profile_csv(const Profile& profile);

/// Builds a profile of a `stages`-stage pipeline from JSON rows (the format above; other keys ignored).
/// @return kInvalidArgument "rows[<i>].<field>: <problem>" for a row that is not an object, a missing field,
/// a stage outside [0, stages), an instruction other than "forward"/"backward", a frequency that is not a
/// positive 32-bit integer or a time or energy that is not a number; then Profile::from_options()'s errors
/// (kInvalidArgument).
Result<Profile> profile_from_rows(const nlohmann::json& rows, int64_t stages);

/// Parses a profile upload of a `stages`-stage pipeline: CSV text, or JSON {"csv": "…"}, {"rows": […]} or
/// […] (rows). The body is JSON if `content_type` starts with application/json (any case), or if there is
/// no content type and the body starts with '{' or '['.
/// @return Profile::parse()'s errors (kParse, source "profile") for CSV; kInvalidArgument "profile: …" for
/// malformed JSON or a JSON body of another shape, "csv: …" for a "csv" that is not a string; then
/// profile_from_rows()'s errors.
Result<Profile> parse_profile_upload(std::string_view body, std::string_view content_type, int64_t stages);

}  // namespace joule::plan
