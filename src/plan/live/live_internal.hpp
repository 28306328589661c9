// SPDX-License-Identifier: Apache-2.0
// Private parts of the live scheduler shared by live.cpp (the logic) and live_records.cpp (its stored forms).
#pragma once

#include <memory>

#include "joule/plan/live.hpp"

namespace joule::plan::detail {

/// @return the DAG of a (stages, microbatches, schedule) pipeline, built once per process for the few shapes
/// in use; nullptr if build_pipeline() refuses the shape.
std::shared_ptr<const PipelineDag> shared_pipeline(int stages, int microbatches, Schedule schedule);

}  // namespace joule::plan::detail
