// SPDX-License-Identifier: Apache-2.0
// Workload identity labels: detected from Slurm's and the Kubernetes downward API's environment, or given
// by hand, and put on every sample of a registry.
#include "joule/metrics/identity.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "joule/core/strings.hpp"

namespace joule::metrics {

namespace identity_detail {

constexpr std::array<IdentitySource, 7> kSources = {{
    {"SLURM_JOB_ID", "slurm_job_id"},
    {"SLURM_JOB_USER", "slurm_user"},
    {"SLURM_JOB_PARTITION", "slurm_partition"},
    {"JOULE_POD_NAME", "pod"},
    {"JOULE_POD_NAMESPACE", "namespace"},
    {"JOULE_CONTAINER_NAME", "container"},
    {"JOULE_NODE_NAME", "node"},
}};

// Prometheus reads label values as UTF-8 and rejects a scrape that is not: a value from the environment or
// a flag must be valid before it reaches every sample.
bool is_valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    uint32_t code_point = 0;
    if (byte < 0x80) {
      ++i;
      continue;
    }
    if ((byte & 0xE0) == 0xC0) {
      length = 2;
      code_point = byte & 0x1F;
    } else if ((byte & 0xF0) == 0xE0) {
      length = 3;
      code_point = byte & 0x0F;
    } else if ((byte & 0xF8) == 0xF0) {
      length = 4;
      code_point = byte & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) {
      return false;
    }
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) {
        return false;
      }
      code_point = (code_point << 6) | (next & 0x3F);
    }
    // Overlong forms, surrogates and values beyond U+10FFFF are not UTF-8.
    static constexpr std::array<uint32_t, 5> kSmallest = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < kSmallest[length] || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

bool is_label_name(std::string_view name) {
  if (name.empty()) {
    return false;
  }
  const auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!letter(name.front())) {
    return false;
  }
  return std::all_of(name.begin(), name.end(),
                     [&letter](char c) { return letter(c) || (c >= '0' && c <= '9'); });
}

std::mutex default_mutex;
IdentityLabels& default_labels() {
  static IdentityLabels labels;
  return labels;
}

}  // namespace identity_detail

std::span<const IdentitySource> identity_sources() {
  return identity_detail::kSources;
}

IdentityLabels detect_identity_labels(const std::map<std::string, std::string>& environment) {
  IdentityLabels labels;
  for (const IdentitySource& source : identity_detail::kSources) {
    const auto found = environment.find(source.variable);
    if (found != environment.end() && !found->second.empty() &&
        identity_detail::is_valid_utf8(found->second)) {
      labels[source.label] = found->second;
    }
  }
  return labels;
}

IdentityLabels detect_identity_labels_from_environment() {
  std::map<std::string, std::string> environment;
  for (const IdentitySource& source : identity_detail::kSources) {
    if (const char* value = std::getenv(source.variable)) {
      environment[source.variable] = value;
    }
  }
  return detect_identity_labels(environment);
}

const std::vector<std::string>& reserved_label_names() {
  // Every label an exporter of this project puts on its own samples (docs/metrics.md), and the two
  // Prometheus attaches to every scraped sample (a target's own `job` would be renamed `exported_job`).
  static const std::vector<std::string> names = {"backend", "cpu",      "energy_source", "gpu",    "instance",
                                                 "job",     "le",       "method",        "model",  "name",
                                                 "phase",   "quantile", "reading",       "reason", "route",
                                                 "setting", "slo",      "status",        "uuid",   "window"};
  return names;
}

Result<void> check_identity_label(std::string_view name, std::string_view value) {
  if (!identity_detail::is_label_name(name)) {
    return fail(ErrorCode::kInvalidArgument,
                "label name {} is not a Prometheus label name: it must match [a-zA-Z_][a-zA-Z0-9_]*",
                quoted_excerpt(name));
  }
  if (name.starts_with("__")) {
    return fail(ErrorCode::kInvalidArgument,
                "label name '{}' starts with '__', which Prometheus reserves for its own use", name);
  }
  const auto& reserved = reserved_label_names();
  if (std::find(reserved.begin(), reserved.end(), name) != reserved.end()) {
    if (name == "job" || name == "instance") {
      return fail(ErrorCode::kInvalidArgument,
                  "label name '{}' is set by Prometheus on every scraped sample; choose another name, e.g. "
                  "'{}_name'",
                  name, name);
    }
    return fail(ErrorCode::kInvalidArgument,
                "label name '{}' is one of the exporters' own labels ({}); choose another name", name,
                fmt::join(reserved, ", "));
  }
  if (value.empty()) {
    return fail(ErrorCode::kInvalidArgument,
                "label '{}' has an empty value (Prometheus treats an empty label as absent); give a value",
                name);
  }
  if (!identity_detail::is_valid_utf8(value)) {
    return fail(ErrorCode::kInvalidArgument, "label '{}' has a value that is not valid UTF-8: {}", name,
                quoted_excerpt(value));
  }
  return {};
}

Result<std::pair<std::string, std::string>> parse_identity_label(std::string_view text) {
  const size_t equals = text.find('=');
  if (equals == std::string_view::npos) {
    return fail(ErrorCode::kInvalidArgument, "label {} is not NAME=VALUE (e.g. team=vision)",
                quoted_excerpt(text));
  }
  const std::string_view name = text.substr(0, equals);
  const std::string_view value = text.substr(equals + 1);
  JOULE_TRY(check_identity_label(name, value));
  return std::make_pair(std::string(name), std::string(value));
}

Result<IdentityLabels> merge_identity_labels(IdentityLabels detected,
                                             const std::vector<std::string>& manual) {
  for (const std::string& text : manual) {
    auto parsed = parse_identity_label(text);
    if (!parsed) {
      return tl::unexpected(parsed.error());
    }
    detected[parsed->first] = parsed->second;
  }
  return detected;
}

void apply_identity_labels(std::vector<prometheus::MetricFamily>& families, const IdentityLabels& labels) {
  if (labels.empty()) {
    return;
  }
  for (auto& family : families) {
    for (auto& metric : family.metric) {
      const size_t own = metric.label.size();
      for (const auto& [name, value] : labels) {
        const auto begin = metric.label.begin();
        const auto end = begin + static_cast<std::ptrdiff_t>(own);
        const std::string& wanted = name;  // a structured binding cannot be captured in C++20
        if (std::none_of(begin, end, [&wanted](const auto& label) { return label.name == wanted; })) {
          metric.label.push_back({name, value});
        }
      }
    }
  }
}

void set_default_identity_labels(IdentityLabels labels) {
  std::lock_guard lock(identity_detail::default_mutex);
  identity_detail::default_labels() = std::move(labels);
}

IdentityLabels default_identity_labels() {
  std::lock_guard lock(identity_detail::default_mutex);
  return identity_detail::default_labels();
}

}  // namespace joule::metrics
