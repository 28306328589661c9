// SPDX-License-Identifier: Apache-2.0
#include "joule/optimize/forecast_comparison.hpp"

namespace joule::optimize {

Result<std::vector<ForecastEvaluation>> compare_forecasters(const std::string& name,
                                                            const carbon::CarbonTrace& trace,
                                                            const ForecastEvaluationOptions& options) {
  std::vector<std::string> names;
  if (name == "all") {
    names = forecaster_names();
  } else {
    JOULE_TRY(make_forecaster(name));
    names = {name};
    if (name != "last") {
      names.emplace_back("last");  // the naive baseline is always shown
    }
  }
  std::vector<ForecastEvaluation> evaluations;
  for (const auto& each : names) {
    auto forecaster = JOULE_TRY(make_forecaster(each));
    evaluations.push_back(JOULE_TRY(evaluate_forecaster(*forecaster, trace, options)));
  }
  return evaluations;
}

double naive_mape_percent(const std::vector<ForecastEvaluation>& evaluations) {
  double naive_mape = 0;
  for (const auto& e : evaluations) {
    if (e.name == "last") {
      naive_mape = e.mape_percent;
    }
  }
  return naive_mape;
}

double improvement_over_naive_percent(const ForecastEvaluation& evaluation, double naive_mape_percent) {
  return naive_mape_percent > 0 ? 100 * (naive_mape_percent - evaluation.mape_percent) / naive_mape_percent
                                : 0.0;
}

}  // namespace joule::optimize
