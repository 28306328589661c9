// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the simulator's inputs (Zeus's training and power traces, the Alibaba group trace).
// The input is tried as each file next to a valid other one. Parsing never throws or crashes and an error
// always has a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "joule/sim/simulator.hpp"
#include "joule/sim/trace.hpp"

#include "fuzz_util.hpp"

namespace {

constexpr std::string_view kTrain =
    "dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch\n"
    "mnist,mlp,32,sgd,0.1,1,0.9,3\n"
    "mnist,mlp,64,sgd,0.1,1,0.9,nan\n";
constexpr std::string_view kPower =
    "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"
    "mnist,mlp,32,sgd,100,10,90\n"
    "mnist,mlp,64,sgd,200,5,160\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using joule::fuzz::require_message;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  require_message(joule::sim::parse_trace(text, "train.csv", kPower, "power.csv"));
  require_message(joule::sim::parse_trace(kTrain, "train.csv", text, "power.csv"));
  require_message(joule::sim::parse_groups(text, "groups.csv"));
  return 0;
}
