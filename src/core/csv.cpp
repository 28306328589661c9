// SPDX-License-Identifier: Apache-2.0
#include "joule/core/csv.hpp"

#include <charconv>
#include <limits>
#include <ostream>

#include <fmt/format.h>

#include "joule/core/file.hpp"
#include "joule/core/strings.hpp"

namespace joule::csv {

namespace {

// A streaming tokenizer over the whole text; emits fields and record ends with their positions.
class Tokenizer {
 public:
  Tokenizer(std::string_view text, const std::string& source) : text_(text), source_(source) {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") {
      pos_ = 3;
    }
  }

  struct Token {
    std::string value;
    uint32_t line;
    uint32_t column;
    bool ends_record;
  };

  bool at_end() const { return pos_ >= text_.size(); }

  // Skips blank lines (only at a record start).
  void skip_blank_lines() {
    while (pos_ < text_.size()) {
      if (text_[pos_] == '\n') {
        next_line(pos_ + 1);
      } else if (text_[pos_] == '\r' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n') {
        next_line(pos_ + 2);
      } else {
        return;
      }
    }
  }

  Result<Token> next() {
    Token token{{}, line_, column(), false};
    if (pos_ < text_.size() && text_[pos_] == '"') {
      return quoted(std::move(token));
    }
    // The field runs to the next comma or line end; copied once (not a character at a time: the built-in
    // power traces are parsed at the start of every simulated run).
    const size_t start = pos_;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ',') {
        token.value.assign(text_.data() + start, pos_ - start);
        ++pos_;
        return token;
      }
      if (c == '\n' || (c == '\r' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n')) {
        token.value.assign(text_.data() + start, pos_ - start);
        next_line(pos_ + (c == '\r' ? 2 : 1));
        token.ends_record = true;
        return token;
      }
      if (c == '"') {
        return fail(ErrorCode::kParse, "{}:{}:{}: a quote inside an unquoted field (quote the whole field)",
                    source_, line_, column());
      }
      ++pos_;
    }
    token.value.assign(text_.data() + start, pos_ - start);
    token.ends_record = true;
    return token;
  }

 private:
  Result<Token> quoted(Token token) {
    const uint32_t open_line = line_;
    const uint32_t open_column = column();
    ++pos_;
    while (true) {
      if (pos_ >= text_.size()) {
        return fail(ErrorCode::kParse, "{}:{}:{}: unterminated quoted field", source_, open_line,
                    open_column);
      }
      const char c = text_[pos_];
      if (c == '"') {
        if (pos_ + 1 < text_.size() && text_[pos_ + 1] == '"') {
          token.value.push_back('"');
          pos_ += 2;
          continue;
        }
        ++pos_;
        break;
      }
      if (c == '\n') {
        token.value.push_back(c);
        next_line(pos_ + 1);
        continue;
      }
      token.value.push_back(c);
      ++pos_;
    }
    if (pos_ >= text_.size()) {
      token.ends_record = true;
      return token;
    }
    const char after = text_[pos_];
    if (after == ',') {
      ++pos_;
      return token;
    }
    if (after == '\n' || (after == '\r' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n')) {
      next_line(pos_ + (after == '\r' ? 2 : 1));
      token.ends_record = true;
      return token;
    }
    return fail(ErrorCode::kParse, "{}:{}:{}: unexpected text after a closing quote", source_, line_,
                column());
  }

  uint32_t column() const { return static_cast<uint32_t>(pos_ - line_start_ + 1); }
  void next_line(size_t new_pos) {
    pos_ = new_pos;
    line_start_ = new_pos;
    ++line_;
  }

  std::string_view text_;
  const std::string& source_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
  uint32_t line_ = 1;
};

}  // namespace

Result<Table> parse(std::string_view text, std::string source) {
  if (text.size() >= std::numeric_limits<uint32_t>::max()) {
    return fail(ErrorCode::kParse, "{}: file too large for the CSV reader (4 GiB or more)", source);
  }
  Table table;
  table.source_ = std::move(source);
  Tokenizer tokens(text, table.source_);
  table.text_.reserve(text.size());  // the fields' text is at most the file's
  tokens.skip_blank_lines();
  if (tokens.at_end()) {
    return fail(ErrorCode::kParse, "{}: empty file, expected a header line", table.source_);
  }
  while (true) {
    auto token = JOULE_TRY(tokens.next());
    for (const auto& name : table.header_) {
      if (name == token.value) {
        return fail(ErrorCode::kParse, "{}:{}:{}: duplicate column name '{}' in the header", table.source_,
                    token.line, token.column, printable_excerpt(token.value));
      }
    }
    table.header_.push_back(std::move(token.value));
    if (token.ends_record) {
      break;
    }
  }
  const size_t width = table.header_.size();
  while (true) {
    tokens.skip_blank_lines();
    if (tokens.at_end()) {
      break;
    }
    const size_t first = table.fields_.size();
    size_t count = 0;
    uint32_t row_line = 0;
    while (true) {
      auto token = JOULE_TRY(tokens.next());
      if (count == 0) {
        row_line = token.line;
      }
      ++count;
      if (count > width) {
        return fail(ErrorCode::kParse, "{}:{}:{}: too many fields: the header has {} columns", table.source_,
                    token.line, token.column, width);
      }
      table.fields_.push_back({static_cast<uint32_t>(table.text_.size()),
                               static_cast<uint32_t>(token.value.size()), token.line, token.column});
      table.text_ += token.value;
      if (token.ends_record) {
        break;
      }
    }
    if (count < width) {
      return fail(ErrorCode::kParse,
                  "{}:{}: too few fields: found {}, the header has {} columns ({} missing)", table.source_,
                  row_line, count, width, printable_excerpt(table.header_[count]));
    }
    table.row_starts_.push_back(first);
    table.row_lines_.push_back(row_line);
  }
  return table;
}

Result<Table> read_file(const std::string& path, const ReadLimit& limit) {
  auto text = JOULE_TRY(read_text_file(path, limit));
  return parse(text, path);
}

Table::Row Table::row(size_t index) const {
  if (index >= row_starts_.size()) {
    throw Exception(ErrorCode::kOutOfRange, fmt::format("{}: row {} requested, the table has {} rows",
                                                        source_, index, row_starts_.size()));
  }
  return Row(*this, row_starts_[index], row_lines_[index]);
}

Result<size_t> Table::column(std::string_view name) const {
  for (size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) {
      return i;
    }
  }
  std::vector<std::string> shown;  // the header is input: print it safely
  shown.reserve(header_.size());
  for (const auto& field : header_) {
    shown.push_back(printable_excerpt(field));
  }
  return fail(ErrorCode::kNotFound, "{}: missing column '{}' (the header has: {})", source_,
              printable_excerpt(name), fmt::join(shown, ", "));
}

std::string_view Table::Row::text(size_t column) const {
  if (column >= table_->header_.size()) {
    throw Exception(ErrorCode::kOutOfRange, fmt::format("{}: column {} requested, the table has {} columns",
                                                        table_->source_, column, table_->header_.size()));
  }
  const Field& field = table_->fields_[first_ + column];
  return std::string_view(table_->text_).substr(field.offset, field.length);
}

Error Table::Row::error_at(size_t column, std::string_view what) const {
  const Field& field = table_->fields_[first_ + column];
  return Error(ErrorCode::kParse,
               fmt::format("{}:{}:{}: column '{}': {}", table_->source_, field.line, field.column,
                           printable_excerpt(table_->header_[column]), what));
}

// Parses a numeric field with std::from_chars (locale-independent; exact for doubles). Surrounding
// spaces are allowed; anything else around the number is an error naming the field.
template <class T>
Result<T> parse_field(const Table::Row& row, size_t column, std::string_view kind) {
  const std::string_view raw = row.text(column);
  const std::string_view field = trim(raw);
  T value{};
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (field.empty() || ec == std::errc::invalid_argument || end != field.data() + field.size()) {
    return tl::make_unexpected(
        row.error_at(column, fmt::format("expected {}, got {}", kind, quoted_excerpt(raw))));
  }
  if (ec == std::errc::result_out_of_range) {
    const std::string_view noun = kind.substr(kind.find(' ') + 1);
    return tl::make_unexpected(
        row.error_at(column, fmt::format("{} out of range: {}", noun, quoted_excerpt(field))));
  }
  return value;
}

Result<double> Table::Row::number(size_t column) const {
  return parse_field<double>(*this, column, "a number");
}

Result<int64_t> Table::Row::integer(size_t column) const {
  return parse_field<int64_t>(*this, column, "an integer");
}

std::string quote(std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) {
    return std::string(field);
  }
  std::string quoted = "\"";
  for (const char c : field) {
    if (c == '"') {
      quoted += "\"\"";
    } else {
      quoted.push_back(c);
    }
  }
  quoted.push_back('"');
  return quoted;
}

void write_row(std::ostream& out, const std::vector<std::string>& fields) {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) {
      out << ',';
    }
    out << quote(fields[i]);
  }
  out << '\n';
}

std::string format_exact(double value) {
  return fmt::format("{:.17g}", value);
}

}  // namespace joule::csv
