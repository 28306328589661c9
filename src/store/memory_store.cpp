// SPDX-License-Identifier: Apache-2.0
// The in-memory store: one mutex, so a transaction sees and locks everything. Changes are made on a copy
// and swapped in at commit, so a failed transaction leaves nothing behind (the copy makes every transaction
// cost the size of everything stored: this store is for tests and throwaway runs).
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "joule/store/store.hpp"

namespace joule::store {

namespace {

using ItemKey = std::tuple<std::string, std::string, int64_t>;

struct State {
  std::map<std::pair<std::string, std::string>, Document> documents;
  std::map<ItemKey, Item> items;
  std::map<std::string, std::pair<std::string, std::chrono::steady_clock::time_point>> responses;
};

class MemoryTransaction final : public Transaction {
 public:
  explicit MemoryTransaction(State state) : state_(std::move(state)) {}

  Result<std::optional<Document>> get_for_update(std::string_view kind, std::string_view key) override {
    const auto found = state_.documents.find({std::string(kind), std::string(key)});
    if (found == state_.documents.end()) {
      return std::optional<Document>();
    }
    return std::optional<Document>(found->second);
  }
  Result<bool> insert(std::string_view kind, std::string_view key, std::string_view body) override {
    return state_.documents
        .try_emplace({std::string(kind), std::string(key)},
                     Document{std::string(kind), std::string(key), std::string(body), 1})
        .second;
  }
  Result<void> update(std::string_view kind, std::string_view key, std::string_view body) override {
    const auto found = state_.documents.find({std::string(kind), std::string(key)});
    if (found == state_.documents.end()) {
      return fail(ErrorCode::kNotFound, "no {} '{}' to update", kind, key);
    }
    found->second.body = std::string(body);
    ++found->second.version;
    return {};
  }
  Result<bool> erase(std::string_view kind, std::string_view key) override {
    return state_.documents.erase({std::string(kind), std::string(key)}) > 0;
  }
  Result<std::vector<std::string>> keys(std::string_view kind, std::string_view prefix) override {
    std::vector<std::string> keys;
    for (const auto& [id, document] : state_.documents) {
      if (id.first == kind && id.second.starts_with(prefix)) {
        keys.push_back(id.second);
      }
    }
    return keys;
  }
  Result<std::optional<Item>> get_item(std::string_view kind, std::string_view key, int64_t number) override {
    const auto found = state_.items.find({std::string(kind), std::string(key), number});
    if (found == state_.items.end()) {
      return std::optional<Item>();
    }
    return std::optional<Item>(found->second);
  }
  Result<void> put_item(std::string_view kind, std::string_view key, const Item& item) override {
    state_.items[{std::string(kind), std::string(key), item.number}] = item;
    return {};
  }
  Result<std::vector<Item>> items(std::string_view kind, std::string_view key,
                                  const ItemQuery& query) override {
    std::vector<Item> items;
    const auto first = state_.items.lower_bound({std::string(kind), std::string(key), INT64_MIN});
    auto last = state_.items.lower_bound(
        {std::string(kind), std::string(key), query.before.value_or(std::numeric_limits<int64_t>::max())});
    while (last != first && (query.limit == 0 || items.size() < query.limit)) {
      --last;
      if (!query.group || last->second.group == *query.group) {
        items.push_back(last->second);
      }
    }
    return items;
  }
  Result<int64_t> erase_items(std::string_view kind, std::string_view key) override {
    const auto first = state_.items.lower_bound({std::string(kind), std::string(key), INT64_MIN});
    auto last = first;
    int64_t erased = 0;
    while (last != state_.items.end() && std::get<0>(last->first) == kind &&
           std::get<1>(last->first) == key) {
      ++last;
      ++erased;
    }
    state_.items.erase(first, last);
    return erased;
  }
  Result<std::optional<std::string>> find_response(std::string_view request_id) override {
    const auto found = state_.responses.find(std::string(request_id));
    if (found == state_.responses.end()) {
      return std::optional<std::string>();
    }
    return std::optional<std::string>(found->second.first);
  }
  Result<void> save_response(std::string_view request_id, std::string_view response) override {
    state_.responses[std::string(request_id)] = {std::string(response), std::chrono::steady_clock::now()};
    return {};
  }
  Result<int64_t> erase_responses_older_than(std::chrono::seconds age, size_t max_rows) override {
    const auto cutoff = std::chrono::steady_clock::now() - age;
    int64_t erased = 0;
    for (auto it = state_.responses.begin();
         it != state_.responses.end() && static_cast<size_t>(erased) < max_rows;) {
      if (it->second.second < cutoff) {
        it = state_.responses.erase(it);
        ++erased;
      } else {
        ++it;
      }
    }
    return erased;
  }

  State take() { return std::move(state_); }

 private:
  State state_;
};

class MemoryStore final : public Store {
 public:
  Result<void> run(const std::function<Result<void>(Transaction&)>& work) override {
    std::lock_guard lock(mutex_);
    MemoryTransaction transaction(state_);
    auto result = work(transaction);
    if (result) {
      state_ = transaction.take();
    }
    return result;
  }
  std::string description() const override { return "memory:"; }
  int schema_version() const override { return kSchemaVersion; }

 private:
  std::mutex mutex_;
  State state_;
};

}  // namespace

std::unique_ptr<Store> memory_store() {
  return std::make_unique<MemoryStore>();
}

}  // namespace joule::store
