// SPDX-License-Identifier: Apache-2.0
// Private: the load generator's pool of worker threads, grown on demand up to a bound; each worker keeps
// one keep-alive connection to the endpoint.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "joule/http/connection.hpp"

namespace joule::loadgen::detail {

class WorkerPool {
 public:
  using Work = std::function<void(http::Connection&, size_t)>;
  /// Starts `initial` workers now (thread start-up then costs the first requests nothing), each connected to
  /// http://`host`:`port` (lazily); `work` runs each submitted index on a worker.
  WorkerPool(std::string host, int port, size_t max_workers, size_t initial, Work work);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Queues request `index`. @return true if it must wait: every worker is busy and there are max_workers.
  bool submit(size_t index);
  /// Finishes the queued work and joins the workers.
  void close();
  /// @return how many workers were started (the peak concurrency, or the initial ones).
  size_t workers() const;

 private:
  void run();

  std::string host_;
  int port_;
  size_t max_workers_;
  Work work_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<size_t> queue_;
  size_t idle_ = 0;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace joule::loadgen::detail
