// SPDX-License-Identifier: Apache-2.0
// A small pool of database connections shared by the threads of one store. Connections are made on demand
// up to a limit; a thread that finds none free waits for one. A connection found broken is discarded (not
// given back), which frees its slot for a new one.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::store {

template <class Connection>
class Pool {
 public:
  using Factory = std::function<Result<std::unique_ptr<Connection>>()>;

  /// A connection lent to one thread; given back to the pool when the lease ends.
  class Lease {
   public:
    Lease(Pool* pool, std::unique_ptr<Connection> connection)
        : pool_(pool), connection_(std::move(connection)) {}
    Lease(Lease&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)), connection_(std::move(other.connection_)) {}
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      if (pool_ != nullptr) {
        pool_->give_back(std::move(connection_));
      }
    }

    Connection& operator*() const { return *connection_; }
    Connection* operator->() const { return connection_.get(); }

    /// Closes the connection instead of giving it back (it is broken or in an unknown state).
    void discard() {
      connection_.reset();
      if (pool_ != nullptr) {
        std::exchange(pool_, nullptr)->give_back(nullptr);
      }
    }

   private:
    Pool* pool_;
    std::unique_ptr<Connection> connection_;
  };

  Pool(std::size_t max_size, Factory factory)
      : max_size_(max_size == 0 ? 1 : max_size), factory_(std::move(factory)) {}
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  /// @return an idle connection, a new one if there is none and the limit allows, else waits for one.
  Result<Lease> acquire() {
    std::unique_lock lock(mutex_);
    freed_.wait(lock, [&] { return !idle_.empty() || open_ < max_size_; });
    if (!idle_.empty()) {
      auto connection = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(connection));
    }
    ++open_;  // reserve the slot, then connect without holding the lock (connecting can take long)
    lock.unlock();
    auto made = factory_();
    if (!made) {
      give_back(nullptr);
      return tl::make_unexpected(made.error());
    }
    return Lease(this, std::move(*made));
  }

  /// Closes every idle connection, e.g. after one was found broken (the server restarted: the others are
  /// most likely broken too).
  void clear_idle() {
    std::vector<std::unique_ptr<Connection>> closing;
    {
      std::lock_guard lock(mutex_);
      closing.swap(idle_);
      open_ -= closing.size();
    }
    freed_.notify_all();
  }

 private:
  void give_back(std::unique_ptr<Connection> connection) {
    if constexpr (requires(const Connection& c) { c.broken(); }) {
      if (connection && connection->broken()) {
        connection.reset();  // e.g. the server closed it: never lend it again
      }
    }
    {
      std::lock_guard lock(mutex_);
      if (connection) {
        idle_.push_back(std::move(connection));
      } else {
        --open_;
      }
    }
    freed_.notify_one();
  }

  const std::size_t max_size_;
  const Factory factory_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::size_t open_ = 0;  ///< connections made and not closed: lent out or idle
};

}  // namespace joule::store
