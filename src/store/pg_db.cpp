// SPDX-License-Identifier: Apache-2.0
#include "store/pg_db.hpp"

#include <charconv>
#include <vector>

#include <fmt/format.h>

#include "store/libpq.hpp"

namespace joule::store::pg {

namespace {

void ignore_notice(void* /*unused*/, const char* /*message*/) {
}  // e.g. "relation … already exists, skipping"

bool starts_with(const char* text, std::string_view prefix) {
  return text != nullptr && std::string_view(text).starts_with(prefix);
}

}  // namespace

std::string clean_message(std::string_view message, const Target& target) {
  // libpq's messages span lines ("…failed: Connection refused\n\tIs the server running…"): join them.
  std::string line;
  bool space = false;
  for (const char c : message) {
    if (c == '\n' || c == '\t' || c == '\r' || c == ' ') {
      space = true;
      continue;
    }
    if (space && !line.empty()) {
      line += ' ';
    }
    space = false;
    line += c;
  }
  const auto replace_all = [&line](const std::string& secret, std::string_view mask) {
    for (auto at = line.find(secret); at != std::string::npos; at = line.find(secret, at + mask.size())) {
      line.replace(at, secret.size(), mask);
    }
  };
  if (!target.password.empty()) {
    replace_all(target.url, target.description);
    // A very short password would mask random letters; it can only show in an echoed URI anyway.
    if (target.password.size() >= 4) {
      replace_all(target.password, "***");
    }
  }
  return line;
}

Rows::~Rows() {
  if (result_ != nullptr) {
    pq_->clear(result_);
  };
}

int Rows::size() const {
  return pq_->ntuples(result_);
}

std::string_view Rows::text(int row, int column) const {
  return {pq_->get_value(result_, row, column),
          static_cast<std::size_t>(pq_->get_length(result_, row, column))};
}

int64_t Rows::affected() const {
  const std::string_view count = pq_->cmd_tuples(result_);
  int64_t value = 0;
  std::from_chars(count.data(), count.data() + count.size(), value);
  return value;
}

Result<std::unique_ptr<Connection>> Connection::open(const Target& target,
                                                     std::chrono::milliseconds lock_timeout) {
  // Defaults first: what the URI says overrides them (libpq keeps the last value of a repeated keyword).
  const char* const keywords[] = {"connect_timeout", "fallback_application_name", "dbname", nullptr};
  const char* const values[] = {"10", "joule", target.url.c_str(), nullptr};
  const LibPq& pq = *JOULE_TRY(libpq());
  pg_conn* connection = pq.connectdb_params(keywords, values, 1);
  if (connection == nullptr) {
    return fail(ErrorCode::kIo, "{}: out of memory", target.description);
  }
  if (pq.status(connection) != CONNECTION_OK) {
    const std::string message = clean_message(pq.error_message(connection), target);
    pq.finish(connection);
    const bool refused = message.find("password authentication failed") != std::string::npos ||
                         message.find("no password supplied") != std::string::npos ||
                         message.find("permission denied") != std::string::npos;
    return tl::make_unexpected(Error(refused ? ErrorCode::kPermissionDenied : ErrorCode::kIo,
                                     fmt::format("{}: {}", target.description, message)));
  }
  pq.set_notice_processor(connection, &ignore_notice, nullptr);
  std::unique_ptr<Connection> result(new Connection(pq, connection, target));
  const std::string set_timeout = fmt::format("SET lock_timeout = {}", lock_timeout.count());
  JOULE_TRY(result->execute(set_timeout.c_str()));
  return result;
}

Connection::~Connection() {
  pq_->finish(connection_);
}

bool Connection::broken() const {
  return pq_->status(connection_) != CONNECTION_OK;
}

Result<Rows> Connection::execute(const char* sql, std::initializer_list<std::string_view> parameters) {
  // PQexecParams takes C strings: copy the parameters, refusing NUL bytes rather than cutting text short.
  std::vector<std::string> copies;
  copies.reserve(parameters.size());
  std::vector<const char*> pointers;
  pointers.reserve(parameters.size());
  for (const auto parameter : parameters) {
    if (parameter.find('\0') != std::string_view::npos) {
      failure_ = Failure::kOther;
      return fail(ErrorCode::kInvalidArgument, "{}: PostgreSQL text cannot contain NUL bytes",
                  target_->description);
    }
    pointers.push_back(copies.emplace_back(parameter).c_str());
  }
  return check(pq_->exec_params(connection_, sql, static_cast<int>(pointers.size()), nullptr, pointers.data(),
                                nullptr, nullptr, 0));
}

Result<void> Connection::execute_script(const char* sql) {
  JOULE_TRY(check(pq_->exec(connection_, sql)));
  return {};
}

Result<Rows> Connection::check(pg_result* result) {
  Rows rows(*pq_, result);
  const auto status = pq_->result_status(result);  // PGRES_FATAL_ERROR for a null result
  if (result != nullptr && (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK)) {
    failure_ = Failure::kNone;
    return rows;
  }
  const char* state = result != nullptr ? pq_->result_error_field(result, PG_DIAG_SQLSTATE) : nullptr;
  const char* primary =
      result != nullptr ? pq_->result_error_field(result, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  const char* detail = result != nullptr ? pq_->result_error_field(result, PG_DIAG_MESSAGE_DETAIL) : nullptr;
  std::string message = primary != nullptr ? primary : pq_->error_message(connection_);
  if (detail != nullptr) {
    message += fmt::format(" ({})", detail);
  }
  if (broken() || starts_with(state, "08") || starts_with(state, "57P0")) {
    failure_ = Failure::kConnectionLost;
  } else if (starts_with(state, "40001") || starts_with(state, "40P01") || starts_with(state, "55P03")) {
    failure_ = Failure::kConflict;
  } else {
    failure_ = Failure::kOther;
  }
  const bool refused = starts_with(state, "28") || starts_with(state, "42501");
  return tl::make_unexpected(
      Error(refused ? ErrorCode::kPermissionDenied : ErrorCode::kIo,
            fmt::format("{}: {}", target_->description, clean_message(message, *target_))));
}

}  // namespace joule::store::pg
