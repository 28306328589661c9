// SPDX-License-Identifier: Apache-2.0
// joule/optimize/forecast_comparison.hpp — carbon-intensity forecasters side by side on one trace, against
// the naive "last value" baseline (`joule carbon forecast`).
#pragma once

#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/optimize/chase_forecast.hpp"

namespace joule::optimize {

/// Evaluates the forecaster `name` and the naive "last" (always shown), or every forecaster for "all", on
/// `trace`, in that order. Errors: kInvalidArgument for an unknown name (listing them), and those of
/// evaluate_forecaster().
Result<std::vector<ForecastEvaluation>> compare_forecasters(const std::string& name,
                                                            const carbon::CarbonTrace& trace,
                                                            const ForecastEvaluationOptions& options);

/// @return the naive forecaster's ("last") MAPE among `evaluations`, %; 0 if it is not there.
double naive_mape_percent(const std::vector<ForecastEvaluation>& evaluations);

/// @return how much lower `evaluation`'s MAPE is than `naive_mape_percent`, % of it (positive: better);
/// 0 when the naive MAPE is 0.
double improvement_over_naive_percent(const ForecastEvaluation& evaluation, double naive_mape_percent);

}  // namespace joule::optimize
