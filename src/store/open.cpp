// SPDX-License-Identifier: Apache-2.0
// open_store(): picks the backend from the URL's scheme; mask_password() for every URL shown to a user.
#include <array>

#include "joule/store/store.hpp"

#include "store/backends.hpp"

namespace joule::store {

namespace {

constexpr std::string_view kAcceptedForms =
    "sqlite:PATH (or a file name ending in .db or .sqlite), "
    "postgresql://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE (or postgres://…), or memory:";

bool is_bare_sqlite_path(std::string_view url) {
  constexpr std::array kSuffixes = {std::string_view(".db"), std::string_view(".sqlite"),
                                    std::string_view(".sqlite3")};
  if (url.find("://") != std::string_view::npos) {
    return false;  // a URL of some other scheme, not a file name
  }
  for (const auto suffix : kSuffixes) {
    if (url.size() > suffix.size() && url.ends_with(suffix)) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string mask_password(std::string_view url) {
  std::string masked(url);
  const auto scheme = masked.find("://");
  std::size_t rest = 0;
  if (scheme != std::string::npos) {
    // The user information ends at the first '@' before any '/', as libpq reads it.
    const auto authority = scheme + 3;
    const auto end = masked.find_first_of("@/", authority);
    if (end != std::string::npos && masked[end] == '@') {
      const auto colon = masked.find(':', authority);
      if (colon < end && colon + 1 < end) {
        masked.replace(colon + 1, end - colon - 1, "***");
      }
      rest = masked.find('@', authority) + 1;
    } else {
      rest = authority;
    }
  }
  // A password=… query parameter.
  const auto query = masked.find('?', rest);
  if (query != std::string::npos) {
    std::size_t begin = query + 1;
    while (begin < masked.size()) {
      auto end = masked.find('&', begin);
      if (end == std::string::npos) {
        end = masked.size();
      }
      constexpr std::string_view kKey = "password=";
      if (std::string_view(masked).substr(begin, end - begin).starts_with(kKey) &&
          end > begin + kKey.size()) {
        masked.replace(begin + kKey.size(), end - begin - kKey.size(), "***");
        end = masked.find('&', begin);
        if (end == std::string::npos) {
          end = masked.size();
        }
      }
      begin = end + 1;
    }
  }
  return masked;
}

Result<std::unique_ptr<Store>> open_store(const std::string& url) {
  return open_store(url, OpenOptions{});
}

Result<std::unique_ptr<Store>> open_store(const std::string& url, const OpenOptions& options) {
  const std::string_view text = url;
  if (text == "memory:") {
    return memory_store();
  }
  if (text.starts_with("sqlite:")) {
    const std::string path(text.substr(std::string_view("sqlite:").size()));
    if (path.empty()) {
      return fail(ErrorCode::kInvalidArgument, "store URL 'sqlite:' names no file: use sqlite:PATH");
    }
    return open_sqlite_store(path, options);
  }
  if (text.starts_with("postgresql://") || text.starts_with("postgres://")) {
#if JOULE_WITH_POSTGRESQL
    return open_postgres_store(url, options);
#else
    return fail(ErrorCode::kNotSupported,
                "this joule was built without PostgreSQL (JOULE_WITH_POSTGRESQL=OFF): use a sqlite: store");
#endif
  }
  if (is_bare_sqlite_path(text)) {
    return open_sqlite_store(url, options);
  }
  if (text.empty()) {
    return fail(ErrorCode::kInvalidArgument, "the store URL is empty: use {}", kAcceptedForms);
  }
  return fail(ErrorCode::kInvalidArgument, "unknown store URL '{}': use {}", mask_password(url),
              kAcceptedForms);
}

}  // namespace joule::store
