// SPDX-License-Identifier: Apache-2.0
// joule/optimize/chase_forecast.hpp — one-step-ahead forecasters of the grid's carbon intensity (Chase's
// lightweight model, spec chase.md §5) and their evaluation against a trace.
//
// Features of every learned model: sin and cos of the time of day of the predicted period (from its UTC
// timestamp, not from its row number), and the intensity of the period before it (lag 1). Multi-step
// forecasts feed each prediction back as the next lag.
//
//   auto model = joule::optimize::make_forecaster("svr");
//   (*model)->fit(last_day_points);                          // 48 half-hour samples, as Chase does
//   double next = (*model)->predict(next_start_unix_s, last_actual_g_per_kwh);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "joule/carbon/signal.hpp"
#include "joule/core/error.hpp"

namespace joule::optimize {

/// Predicts the intensity of a period from its start time and the previous period's intensity.
/// Not thread-safe.
class CarbonForecaster {
 public:
  virtual ~CarbonForecaster() = default;
  /// @return "svr", "ridge" or "last".
  virtual std::string name() const = 0;
  /// Trains on a regular series (oldest first, consecutive periods). @return kInvalidArgument for fewer
  /// than 3 points.
  virtual Result<void> fit(const std::vector<carbon::IntensityPoint>& points) = 0;
  /// @return the predicted intensity (g/kWh, ≥ 0) of the period starting at `time_unix_s`, given the
  /// intensity of the period before it. Before fit(), models that need training predict the lag.
  virtual double predict(int64_t time_unix_s, double previous_g_per_kwh) const = 0;

  /// @return `steps` predictions for the periods starting at first_time_unix_s, + period_s, …, each fed
  /// back as the next lag (recursive multi-step forecasting).
  std::vector<double> predict_steps(int64_t first_time_unix_s, int64_t period_s, double last_g_per_kwh,
                                    int steps) const;
};

/// Predicts the previous value (the naive "persistence" forecast).
class LastValueForecaster final : public CarbonForecaster {
 public:
  std::string name() const override { return "last"; }
  Result<void> fit(const std::vector<carbon::IntensityPoint>& points) override;
  double predict(int64_t time_unix_s, double previous_g_per_kwh) const override;
};

/// Ridge regression on (1, sin, cos, lag) with a tiny penalty (1e-6 × the trace scale): a linear model
/// that needs no library.
class RidgeForecaster final : public CarbonForecaster {
 public:
  std::string name() const override { return "ridge"; }
  Result<void> fit(const std::vector<carbon::IntensityPoint>& points) override;
  double predict(int64_t time_unix_s, double previous_g_per_kwh) const override;

 private:
  bool fitted_ = false;
  double weights_[4] = {0, 0, 0, 1};
};

/// Chase's model: epsilon-SVR, RBF kernel, C = 100, gamma = 1e-4, epsilon = 0.1, no feature scaling
/// (libsvm 3.24, what scikit-learn's SVR wraps).
struct SvrOptions {
  double c = 100;
  double gamma = 1e-4;
  double epsilon = 0.1;
};

class SvrForecaster final : public CarbonForecaster {
 public:
  explicit SvrForecaster(SvrOptions options = {});
  ~SvrForecaster() override;
  SvrForecaster(const SvrForecaster&) = delete;
  SvrForecaster& operator=(const SvrForecaster&) = delete;
  std::string name() const override { return "svr"; }
  Result<void> fit(const std::vector<carbon::IntensityPoint>& points) override;
  double predict(int64_t time_unix_s, double previous_g_per_kwh) const override;

 private:
  struct Model;
  SvrOptions options_;
  std::unique_ptr<Model> model_;
};

/// @return the forecaster called `name` ("svr", "ridge", "last"), or kInvalidArgument listing them.
Result<std::unique_ptr<CarbonForecaster>> make_forecaster(std::string_view name);
/// @return the forecaster names, the default ("svr") first.
const std::vector<std::string>& forecaster_names();

/// How a forecaster did on a trace.
struct ForecastEvaluation {
  std::string name;
  size_t predictions = 0;
  double mape_percent = 0;  ///< mean absolute percentage error over the predictions
  double mae_g_per_kwh = 0;
  std::vector<double> predicted_g_per_kwh;  ///< one per evaluated period, from position training_samples
};

struct ForecastEvaluationOptions {
  size_t training_samples = 48;  ///< fit on the first N points (Chase: 48 = 24 h of half hours)
  int horizon_steps = 1;         ///< predict H periods ahead from the actual value H periods back
  /// Refit on the last training_samples points every N predictions; 0 = fit once, as Chase does.
  size_t refit_every = 0;
};

/// Evaluates `forecaster` on `trace`: each period k ≥ training_samples + horizon − 1 is predicted from the
/// actual value of period k − horizon, recursively. @return kInvalidArgument for a trace too short for
/// the training window and horizon, or a horizon < 1.
Result<ForecastEvaluation> evaluate_forecaster(CarbonForecaster& forecaster, const carbon::CarbonTrace& trace,
                                               const ForecastEvaluationOptions& options = {});

}  // namespace joule::optimize
