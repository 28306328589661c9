// SPDX-License-Identifier: Apache-2.0
#include "loadgen/worker_pool.hpp"

#include <algorithm>
#include <utility>

namespace joule::loadgen::detail {

WorkerPool::WorkerPool(std::string host, int port, size_t max_workers, size_t initial, Work work)
    : host_(std::move(host)), port_(port), max_workers_(max_workers), work_(std::move(work)) {
  std::lock_guard lock(mutex_);
  while (threads_.size() < std::min(initial, max_workers_)) {
    threads_.emplace_back([this] { run(); });
  }
}

WorkerPool::~WorkerPool() {
  close();
}

bool WorkerPool::submit(size_t index) {
  std::lock_guard lock(mutex_);
  queue_.push_back(index);
  if (queue_.size() <= idle_) {
    wake_.notify_one();
    return false;
  }
  if (threads_.size() < max_workers_) {
    threads_.emplace_back([this] { run(); });
    return false;
  }
  return true;
}

void WorkerPool::close() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) {
      thread.join();
    }
  }
}

size_t WorkerPool::workers() const {
  std::lock_guard lock(mutex_);
  return threads_.size();
}

void WorkerPool::run() {
  http::Connection connection(host_, port_);
  std::unique_lock lock(mutex_);
  while (true) {
    ++idle_;
    wake_.wait(lock, [this] { return closing_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) {
      return;  // closing
    }
    const size_t index = queue_.front();
    queue_.pop_front();
    lock.unlock();
    work_(connection, index);
    lock.lock();
  }
}

}  // namespace joule::loadgen::detail
