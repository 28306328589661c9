// SPDX-License-Identifier: Apache-2.0
// joule/client/json_forms.hpp — the JSON form of a job registration's outcome: what `joule job register
// --json` prints and joule.BatchSizeClient.register_job returns.
#pragma once

#include <nlohmann/json.hpp>

#include "joule/client/client.hpp"

namespace joule::client {

/// @return the job spec's fields (JobSpec::to_json, job_id set), then the GPU config's (GpuConfig::to_json),
/// then "created" (true: newly registered; false: it was registered identically already).
nlohmann::json to_json(const RegisteredJob& registered);

}  // namespace joule::client
