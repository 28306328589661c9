// SPDX-License-Identifier: Apache-2.0
#include "joule/client/json_forms.hpp"

namespace joule::client {

nlohmann::json to_json(const RegisteredJob& registered) {
  nlohmann::json json = registered.spec.to_json();
  json.update(registered.gpu.to_json());
  json["created"] = registered.created;
  return json;
}

}  // namespace joule::client
