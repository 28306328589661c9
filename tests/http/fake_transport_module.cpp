// SPDX-License-Identifier: Apache-2.0
// A stand-in for joule's HTTP transport module (src/http/transport.hpp), for transport_test.cpp: built once
// as a module of another build (its build id is not this build's) and once without the entry point.
#include "http/transport.hpp"

#ifndef JOULE_FAKE_WITHOUT_ENTRY
namespace {
constexpr joule::http::transport::Api kOtherBuild{"joule 0.0.0 from another build", nullptr, nullptr, nullptr,
                                                  nullptr};
}  // namespace

extern "C" __attribute__((visibility("default"))) const joule::http::transport::Api*
joule_http_transport_v1() {
  return &kOtherBuild;
}
#else
extern "C" __attribute__((visibility("default"))) int joule_http_transport_elsewhere() {
  return 0;
}
#endif
