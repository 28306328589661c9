// SPDX-License-Identifier: Apache-2.0
// joule/core/csv.hpp — an RFC 4180 CSV reader and writer. Every error names the source, line and column.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/core/file.hpp"

namespace joule::csv {

/// Parsed CSV: a header and rows of fields. Fields are unquoted/unescaped text. Cheap to move.
///
/// Accepted syntax (RFC 4180 plus common practice): comma-separated fields; LF or CRLF line ends; fields
/// in double quotes may contain commas, quotes written "" and line breaks; a UTF-8 byte-order mark is
/// skipped; blank lines are ignored. Every row must have as many fields as the header.
class Table {
 public:
  class Row;

  /// @return the source name given to parse() (a file path, or a label such as "<stdin>").
  const std::string& source() const { return source_; }
  /// @return the header's field names, in order.
  const std::vector<std::string>& header() const { return header_; }
  /// @return the number of data rows (the header not included).
  size_t row_count() const { return row_starts_.size(); }
  /// @return data row `index` (0-based). @throws joule::Exception (kOutOfRange) past the end.
  Row row(size_t index) const;

  /// @return the 0-based position of the column called `name`, or kNotFound naming the file and the
  /// columns it has.
  Result<size_t> column(std::string_view name) const;

  /// One data row. Valid while its Table lives.
  class Row {
   public:
    /// @return the text of field `column` (0-based).
    std::string_view text(size_t column) const;
    /// @return the 1-based line where this row starts in the source.
    size_t line() const { return line_; }
    /// @return the field parsed as a double ("nan" and "inf" accepted), or a kParse error such as
    /// `trace.csv:12:31: column 'power_limit': expected a number, got "abc"`.
    Result<double> number(size_t column) const;
    /// @return the field parsed as a 64-bit integer, or a kParse error naming file, line and column.
    Result<int64_t> integer(size_t column) const;
    /// @return a kParse Error for this field: "<source>:<line>:<col>: column '<name>': <what>".
    Error error_at(size_t column, std::string_view what) const;

   private:
    friend class Table;
    Row(const Table& table, size_t first_field, size_t line)
        : table_(&table), first_(first_field), line_(line) {}
    const Table* table_;
    size_t first_;
    size_t line_;
  };

 private:
  friend Result<Table> parse(std::string_view text, std::string source);
  struct Field {
    uint32_t offset;  // into text_
    uint32_t length;
    uint32_t line;    // 1-based, where the field starts
    uint32_t column;  // 1-based character column where the field starts
  };
  std::string source_;
  std::vector<std::string> header_;
  std::string text_;  // all data fields' unescaped text, back to back
  std::vector<Field> fields_;
  std::vector<size_t> row_starts_;  // index into fields_ of each row's first field
  std::vector<size_t> row_lines_;
};

/// Parses CSV text. @param source the name used in error messages (usually the file path).
/// @return the table, or a kParse error such as `power.csv:7:12: unterminated quoted field`.
Result<Table> parse(std::string_view text, std::string source);

/// Reads (through read_text_file(), bounded by `limit`) and parses a CSV file. @return read_text_file()'s
/// errors naming the path, or parse errors as parse() gives them.
Result<Table> read_file(const std::string& path, const ReadLimit& limit = read_limits::kDefault);

/// @return `field` quoted for CSV if it contains a comma, quote, CR or LF; otherwise unchanged.
std::string quote(std::string_view field);

/// Writes one CSV record (quoted as needed) followed by "\n".
void write_row(std::ostream& out, const std::vector<std::string>& fields);

/// @return `value` with 17 significant digits, so that parsing it gives back the same double.
std::string format_exact(double value);

}  // namespace joule::csv
