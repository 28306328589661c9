// SPDX-License-Identifier: Apache-2.0
// The service's one LRU container: its caches (parsed jobs, succeeded trials, planned frontiers) each wrap
// it with a mutex and their own validity check.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <utility>

namespace joule::server::detail {

/// A map of at most `capacity` entries that drops the least recently used one beyond it (capacity 0 keeps
/// nothing). find() and put() count as uses. Not thread-safe: its users lock around it.
template <class Key, class Value>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(capacity) {}

  /// @return the value under `key` (now the most recently used), or nullptr. The pointer is valid until
  /// the entry is erased or replaced.
  Value* find(const Key& key) {
    const auto found = index_.find(key);
    if (found == index_.end()) {
      return nullptr;
    }
    order_.splice(order_.begin(), order_, found->second);
    return &found->second->second;
  }

  /// Sets `key` to `value` (now the most recently used), dropping the least recently used entry if the map
  /// is over capacity.
  void put(const Key& key, Value value) {
    if (capacity_ == 0) {
      return;
    }
    if (const auto found = index_.find(key); found != index_.end()) {
      found->second->second = std::move(value);
      order_.splice(order_.begin(), order_, found->second);
      return;
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  void erase(const Key& key) {
    if (const auto found = index_.find(key); found != index_.end()) {
      order_.erase(found->second);
      index_.erase(found);
    }
  }

  /// Erases every entry whose key satisfies `predicate`.
  template <class Predicate>
  void erase_if(Predicate predicate) {
    for (auto it = index_.begin(); it != index_.end();) {
      if (predicate(it->first)) {
        order_.erase(it->second);
        it = index_.erase(it);
      } else {
        ++it;
      }
    }
  }

  size_t size() const { return order_.size(); }

 private:
  using Order = std::list<std::pair<Key, Value>>;  // most recently used first
  size_t capacity_;
  Order order_;
  std::map<Key, typename Order::iterator> index_;
};

}  // namespace joule::server::detail
