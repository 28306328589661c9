// SPDX-License-Identifier: Apache-2.0
// The service's one LRU container: its caches (parsed jobs, succeeded trials, planned frontiers) each wrap
// it with a mutex and their own validity check.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <utility>

namespace joule::server::detail {

/// A map of at most `capacity` entries, and of at most `max_weight` in the sum of their weights if that is
/// set (e.g. bytes), that drops the least recently used entries beyond either (capacity 0 keeps nothing; an
/// entry heavier than max_weight alone is not kept). find() and put() count as uses. Not thread-safe: its
/// users lock around it.
template <class Key, class Value>
class LruMap {
 public:
  explicit LruMap(size_t capacity, size_t max_weight = 0) : capacity_(capacity), max_weight_(max_weight) {}

  /// @return the value under `key` (now the most recently used), or nullptr. The pointer is valid until
  /// the entry is erased or replaced.
  Value* find(const Key& key) {
    const auto found = index_.find(key);
    if (found == index_.end()) {
      return nullptr;
    }
    order_.splice(order_.begin(), order_, found->second);
    return &found->second->value;
  }

  /// Sets `key` to `value` of `weight` (now the most recently used), dropping the least recently used
  /// entries while the map is over capacity or over max_weight.
  void put(const Key& key, Value value, size_t weight = 1) {
    erase(key);
    if (capacity_ == 0 || (max_weight_ > 0 && weight > max_weight_)) {
      return;
    }
    order_.push_front(Entry{key, std::move(value), weight});
    index_.emplace(key, order_.begin());
    weight_ += weight;
    while (order_.size() > capacity_ || (max_weight_ > 0 && weight_ > max_weight_)) {
      weight_ -= order_.back().weight;
      index_.erase(order_.back().key);
      order_.pop_back();
    }
  }

  void erase(const Key& key) {
    if (const auto found = index_.find(key); found != index_.end()) {
      weight_ -= found->second->weight;
      order_.erase(found->second);
      index_.erase(found);
    }
  }

  /// Erases every entry whose key satisfies `predicate`.
  template <class Predicate>
  void erase_if(Predicate predicate) {
    for (auto it = index_.begin(); it != index_.end();) {
      if (predicate(it->first)) {
        weight_ -= it->second->weight;
        order_.erase(it->second);
        it = index_.erase(it);
      } else {
        ++it;
      }
    }
  }

  size_t size() const { return order_.size(); }
  /// @return the sum of the entries' weights.
  size_t weight() const { return weight_; }

 private:
  struct Entry {
    Key key;
    Value value;
    size_t weight = 1;
  };
  using Order = std::list<Entry>;  // most recently used first
  size_t capacity_;
  size_t max_weight_;
  size_t weight_ = 0;
  Order order_;
  std::map<Key, typename Order::iterator> index_;
};

}  // namespace joule::server::detail
