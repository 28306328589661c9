// SPDX-License-Identifier: Apache-2.0
#include "joule/client/json_forms.hpp"

namespace joule::client {

nlohmann::json to_json(const RegisteredJob& registered) {
  nlohmann::json out = registered.spec.to_json();
  out.update(registered.gpu.to_json());
  out["created"] = registered.created;
  return out;
}

}  // namespace joule::client
