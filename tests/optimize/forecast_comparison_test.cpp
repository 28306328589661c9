// SPDX-License-Identifier: Apache-2.0
#include "joule/optimize/forecast_comparison.hpp"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::optimize {
namespace {

carbon::CarbonTrace comparison_trace() {
  std::string csv = "timestamp,carbon_intensity_g_per_kwh\n";
  for (int hour = 0; hour < 24; ++hour) {
    csv += fmt::format("2024-06-01T{:02}:00Z,{}\n", hour, 300 + 100 * std::sin(hour / 3.0));
  }
  return value_or_throw(carbon::CarbonTrace::parse(csv, "t.csv"));
}

TEST(ForecastComparison, OneForecasterIsShownWithTheNaiveBaseline) {
  const ForecastEvaluationOptions options{12, 1, 0};
  const auto evaluations = value_or_throw(compare_forecasters("ridge", comparison_trace(), options));
  ASSERT_EQ(evaluations.size(), 2U);
  EXPECT_EQ(evaluations[0].name, "ridge");
  EXPECT_EQ(evaluations[1].name, "last");
  EXPECT_EQ(naive_mape_percent(evaluations), evaluations[1].mape_percent);
  EXPECT_EQ(value_or_throw(compare_forecasters("last", comparison_trace(), options)).size(), 1U);
  EXPECT_EQ(value_or_throw(compare_forecasters("all", comparison_trace(), options)).size(),
            forecaster_names().size());
  EXPECT_EQ(compare_forecasters("nosuch", comparison_trace(), options).error().code(),
            ErrorCode::kInvalidArgument);
}

TEST(ForecastComparison, ImprovementIsAShareOfTheNaiveError) {
  ForecastEvaluation evaluation;
  evaluation.mape_percent = 5;
  EXPECT_DOUBLE_EQ(improvement_over_naive_percent(evaluation, 10), 50);
  EXPECT_DOUBLE_EQ(improvement_over_naive_percent(evaluation, 0), 0);
  EXPECT_EQ(naive_mape_percent({evaluation}), 0);
}

}  // namespace
}  // namespace joule::optimize
