// SPDX-License-Identifier: Apache-2.0
// Carbon-intensity forecasters: last value, ridge regression and Chase's SVR (libsvm).
#include "joule/optimize/chase_forecast.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

#include <fmt/format.h>
#include <svm.h>

#include "joule/core/units.hpp"

namespace joule::optimize {

namespace {

// sin and cos of the time of day of `time_unix_s` (Chase: of the half-hour slot; here from the timestamp).
std::array<double, 2> time_of_day(int64_t time_unix_s) {
  const int64_t in_day = ((time_unix_s % kDayS) + kDayS) % kDayS;
  const double angle = 2 * std::numbers::pi * static_cast<double>(in_day) / static_cast<double>(kDayS);
  return {std::sin(angle), std::cos(angle)};
}

Result<void> check_training(const std::vector<carbon::IntensityPoint>& points, std::string_view name) {
  if (points.size() < 3) {
    return fail(ErrorCode::kInvalidArgument, "forecaster {}: needs at least 3 training points, got {}", name,
                points.size());
  }
  return {};
}

void silent_print(const char* /*text*/) {}

}  // namespace

std::vector<double> CarbonForecaster::predict_steps(int64_t first_time_unix_s, int64_t period_s,
                                                    double last_g_per_kwh, int steps) const {
  std::vector<double> out;
  double lag = last_g_per_kwh;
  for (int i = 0; i < steps; ++i) {
    lag = predict(first_time_unix_s + i * period_s, lag);
    out.push_back(lag);
  }
  return out;
}

// ---- last value
// --------------------------------------------------------------------------------------------

Result<void> LastValueForecaster::fit(const std::vector<carbon::IntensityPoint>& points) {
  return check_training(points, name());
}

double LastValueForecaster::predict(int64_t /*time_unix_s*/, double previous_g_per_kwh) const {
  return previous_g_per_kwh;
}

// ---- ridge
// -------------------------------------------------------------------------------------------------

Result<void> RidgeForecaster::fit(const std::vector<carbon::IntensityPoint>& points) {
  if (auto ok = check_training(points, name()); !ok) {
    return ok;
  }
  // Normal equations (XᵀX + λI) w = Xᵀy over rows (1, sin, cos, lag), solved by Gaussian elimination.
  std::array<std::array<double, 5>, 4> system{};
  double scale = 0;
  for (size_t i = 1; i < points.size(); ++i) {
    const auto [s, c] = time_of_day(points[i].time_unix_s);
    const std::array<double, 4> x = {1, s, c, points[i - 1].intensity_g_per_kwh};
    const double y = points[i].intensity_g_per_kwh;
    scale = std::max(scale, y);
    for (size_t r = 0; r < 4; ++r) {
      for (size_t col = 0; col < 4; ++col) {
        system[r][col] += x[r] * x[col];
      }
      system[r][4] += x[r] * y;
    }
  }
  const double lambda = 1e-6 * std::max(1.0, scale);
  for (size_t r = 1; r < 4; ++r) {  // the intercept is not penalised
    system[r][r] += lambda;
  }
  for (size_t pivot = 0; pivot < 4; ++pivot) {
    size_t best = pivot;
    for (size_t r = pivot + 1; r < 4; ++r) {
      if (std::abs(system[r][pivot]) > std::abs(system[best][pivot])) {
        best = r;
      }
    }
    std::swap(system[pivot], system[best]);
    if (std::abs(system[pivot][pivot]) < 1e-12) {
      return fail(ErrorCode::kInvalidArgument, "forecaster ridge: the training data are degenerate");
    }
    for (size_t r = 0; r < 4; ++r) {
      if (r == pivot) {
        continue;
      }
      const double factor = system[r][pivot] / system[pivot][pivot];
      for (size_t col = pivot; col < 5; ++col) {
        system[r][col] -= factor * system[pivot][col];
      }
    }
  }
  for (size_t r = 0; r < 4; ++r) {
    weights_[r] = system[r][4] / system[r][r];
  }
  fitted_ = true;
  return {};
}

double RidgeForecaster::predict(int64_t time_unix_s, double previous_g_per_kwh) const {
  if (!fitted_) {
    return previous_g_per_kwh;
  }
  const auto [s, c] = time_of_day(time_unix_s);
  const double y = weights_[0] + weights_[1] * s + weights_[2] * c + weights_[3] * previous_g_per_kwh;
  return std::max(0.0, y);
}

// ---- SVR (libsvm)
// ------------------------------------------------------------------------------------------

struct SvrForecaster::Model {
  // libsvm's model points into the training nodes, so they live as long as the model.
  std::vector<std::array<svm_node, 4>> nodes;
  std::vector<svm_node*> rows;
  std::vector<double> targets;
  svm_problem problem{};
  svm_parameter parameter{};
  svm_model* model = nullptr;
  ~Model() {
    if (model != nullptr) {
      svm_free_and_destroy_model(&model);
    }
    svm_destroy_param(&parameter);
  }
};

SvrForecaster::SvrForecaster(SvrOptions options) : options_(options) {}
SvrForecaster::~SvrForecaster() = default;

namespace {
std::array<svm_node, 4> svr_features(int64_t time_unix_s, double previous_g_per_kwh) {
  const auto [s, c] = time_of_day(time_unix_s);
  return {svm_node{1, s}, svm_node{2, c}, svm_node{3, previous_g_per_kwh}, svm_node{-1, 0}};
}
}  // namespace

Result<void> SvrForecaster::fit(const std::vector<carbon::IntensityPoint>& points) {
  if (auto ok = check_training(points, name()); !ok) {
    return ok;
  }
  if (!(options_.c > 0) || !(options_.gamma > 0) || !(options_.epsilon >= 0)) {
    return fail(ErrorCode::kInvalidArgument,
                "forecaster svr: C and gamma must be positive and epsilon non-negative (got C={}, "
                "gamma={}, epsilon={})",
                options_.c, options_.gamma, options_.epsilon);
  }
  auto model = std::make_unique<Model>();
  for (size_t i = 1; i < points.size(); ++i) {
    model->nodes.push_back(svr_features(points[i].time_unix_s, points[i - 1].intensity_g_per_kwh));
    model->targets.push_back(points[i].intensity_g_per_kwh);
  }
  for (auto& row : model->nodes) {
    model->rows.push_back(row.data());
  }
  model->problem.l = static_cast<int>(model->rows.size());
  model->problem.y = model->targets.data();
  model->problem.x = model->rows.data();
  svm_parameter& p = model->parameter;
  p.svm_type = EPSILON_SVR;
  p.kernel_type = RBF;
  p.degree = 3;
  p.gamma = options_.gamma;
  p.coef0 = 0;
  p.cache_size = 100;
  p.eps = 1e-3;
  p.C = options_.c;
  p.nr_weight = 0;
  p.weight_label = nullptr;
  p.weight = nullptr;
  p.nu = 0.5;
  p.p = options_.epsilon;
  p.shrinking = 1;
  p.probability = 0;
  if (const char* problem = svm_check_parameter(&model->problem, &p); problem != nullptr) {
    return fail(ErrorCode::kInvalidArgument, "forecaster svr: libsvm rejected the parameters: {}", problem);
  }
  svm_set_print_string_function(&silent_print);
  model->model = svm_train(&model->problem, &p);
  model_ = std::move(model);
  return {};
}

double SvrForecaster::predict(int64_t time_unix_s, double previous_g_per_kwh) const {
  if (!model_) {
    return previous_g_per_kwh;
  }
  const auto x = svr_features(time_unix_s, previous_g_per_kwh);
  return std::max(0.0, svm_predict(model_->model, x.data()));
}

// ---- factory and evaluation
// --------------------------------------------------------------------------------

const std::vector<std::string>& forecaster_names() {
  static const std::vector<std::string> names = {"svr", "ridge", "last"};
  return names;
}

Result<std::unique_ptr<CarbonForecaster>> make_forecaster(std::string_view name) {
  if (name == "svr") {
    return std::unique_ptr<CarbonForecaster>(std::make_unique<SvrForecaster>());
  }
  if (name == "ridge") {
    return std::unique_ptr<CarbonForecaster>(std::make_unique<RidgeForecaster>());
  }
  if (name == "last") {
    return std::unique_ptr<CarbonForecaster>(std::make_unique<LastValueForecaster>());
  }
  return fail(ErrorCode::kInvalidArgument, "unknown forecaster '{}' (known: {})", name,
              fmt::join(forecaster_names(), ", "));
}

Result<ForecastEvaluation> evaluate_forecaster(CarbonForecaster& forecaster, const carbon::CarbonTrace& trace,
                                               const ForecastEvaluationOptions& options) {
  const auto& points = trace.points();
  if (options.horizon_steps < 1) {
    return fail(ErrorCode::kInvalidArgument, "the forecast horizon must be at least 1 step, got {}",
                options.horizon_steps);
  }
  const auto horizon = static_cast<size_t>(options.horizon_steps);
  if (options.training_samples < 3 || points.size() < options.training_samples + horizon) {
    return fail(ErrorCode::kInvalidArgument,
                "{} has {} points: too few to train on {} and forecast {} step(s) ahead (training needs "
                "at least 3)",
                trace.source(), points.size(), options.training_samples, options.horizon_steps);
  }
  const auto fit_on = [&](size_t end) {
    return forecaster.fit(std::vector<carbon::IntensityPoint>(
        points.begin() + static_cast<std::ptrdiff_t>(end - options.training_samples),
        points.begin() + static_cast<std::ptrdiff_t>(end)));
  };
  JOULE_TRY(fit_on(options.training_samples));
  ForecastEvaluation evaluation;
  evaluation.name = forecaster.name();
  double ape_sum = 0;
  size_t ape_count = 0;
  double ae_sum = 0;
  size_t since_fit = 0;
  for (size_t k = options.training_samples + horizon - 1; k < points.size(); ++k) {
    if (options.refit_every > 0 && since_fit == options.refit_every) {
      // Refit on the window that ends where this forecast starts (no look-ahead).
      JOULE_TRY(fit_on(k + 1 - horizon));
      since_fit = 0;
    }
    ++since_fit;
    const size_t origin = k - horizon;  // the last actual value the forecast may use
    const auto path = forecaster.predict_steps(points[origin + 1].time_unix_s, trace.period_s(),
                                               points[origin].intensity_g_per_kwh, options.horizon_steps);
    const double predicted = path.back();
    const double actual = points[k].intensity_g_per_kwh;
    evaluation.predicted_g_per_kwh.push_back(predicted);
    ae_sum += std::abs(predicted - actual);
    if (actual > 0) {
      ape_sum += std::abs(predicted - actual) / actual;
      ++ape_count;
    }
  }
  evaluation.predictions = evaluation.predicted_g_per_kwh.size();
  evaluation.mape_percent = ape_count > 0 ? 100 * ape_sum / static_cast<double>(ape_count) : 0;
  evaluation.mae_g_per_kwh = ae_sum / static_cast<double>(evaluation.predictions);
  return evaluation;
}

}  // namespace joule::optimize
