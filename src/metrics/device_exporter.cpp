// SPDX-License-Identifier: Apache-2.0
// The device exporter: the collectors, the carbon timer and the endpoint of `joule power --serve` and
// `joule daemon --metrics`, composed once.
#include "joule/metrics/device_exporter.hpp"

#include <chrono>

#include <fmt/format.h>

#include "joule/core/log.hpp"
#include "joule/metrics/cpu_metrics.hpp"
#include "joule/metrics/http_listener.hpp"

namespace joule::metrics {

DeviceExporter::DeviceExporter(std::vector<device::Gpu*> gpus, Clock& clock, DeviceExporterOptions options)
    : options_(std::move(options)), gpu_metrics_(std::make_shared<GpuMetrics>(std::move(gpus), clock)) {}

DeviceExporter::~DeviceExporter() {
  stop();
}

Result<std::unique_ptr<DeviceExporter>> DeviceExporter::start(std::vector<device::Gpu*> gpus,
                                                              std::vector<device::Cpu*> cpus, Clock& clock,
                                                              DeviceExporterOptions options) {
  JOULE_TRY(parse_host_port(options.address, options.flag));
  std::unique_ptr<DeviceExporter> exporter(new DeviceExporter(std::move(gpus), clock, std::move(options)));
  const DeviceExporterOptions& own = exporter->options_;
  if (own.carbon) {
    // A source that cannot give the current value at the start is a configuration error, said now.
    const auto first = own.carbon->latest();
    if (!first) {
      return fail(first.error().code(), "{}: {}", own.name, first.error().message());
    }
    JOULE_TRY(exporter->gpu_metrics_->set_carbon_intensity(*first));
  } else if (own.carbon_intensity_g_per_kwh) {
    JOULE_TRY(exporter->gpu_metrics_->set_carbon_intensity(*own.carbon_intensity_g_per_kwh));
  }
  exporter->registry_.add_collector(exporter->gpu_metrics_);
  if (!cpus.empty()) {
    exporter->registry_.add_collector(std::make_shared<CpuMetrics>(std::move(cpus)));
  }
  MetricsRegistry& registry = exporter->registry_;
  exporter->endpoint_ = JOULE_TRY(MetricsEndpoint::start(
      own.address, [&registry] { return registry.render(); }, own.flag));
  if (own.carbon && own.carbon_refresh_s > 0) {
    exporter->timer_ = std::thread([raw = exporter.get()] { raw->carbon_timer(); });
  }
  return exporter;
}

Result<void> DeviceExporter::refresh_carbon_intensity() {
  if (!options_.carbon) {
    return {};
  }
  const auto latest = options_.carbon->latest();
  if (!latest) {
    log().warn("{}: carbon intensity unavailable, keeping the last value: {}", options_.name,
               latest.error().message());
    return tl::make_unexpected(latest.error());
  }
  if (auto set = gpu_metrics_->set_carbon_intensity(*latest); !set) {
    log().warn("{}: carbon intensity from {} refused: {}", options_.name, options_.carbon->description,
               set.error().message());
    return set;
  }
  return {};
}

void DeviceExporter::carbon_timer() {
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options_.carbon_refresh_s));
  std::unique_lock lock(timer_mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    (void)refresh_carbon_intensity();  // a failure is logged and keeps the last value
    lock.lock();
  }
}

void DeviceExporter::stop() {
  {
    const std::lock_guard lock(timer_mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (timer_.joinable()) {
    timer_.join();
  }
  if (endpoint_) {
    endpoint_->stop();
  }
}

}  // namespace joule::metrics
