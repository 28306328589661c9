// SPDX-License-Identifier: Apache-2.0
#include "joule/core/csv.hpp"

#include <cmath>
#include <sstream>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::csv {
namespace {

Table parse_ok(std::string_view text) {
  auto table = parse(text, "t.csv");
  EXPECT_TRUE(table.has_value()) << (table ? "" : table.error().message());
  return std::move(*table);
}

std::string parse_error(std::string_view text) {
  auto table = parse(text, "t.csv");
  EXPECT_FALSE(table.has_value());
  return table ? std::string() : table.error().message();
}

TEST(Csv, ParsesHeaderAndRows) {
  const Table table = parse_ok("a,b,c\n1,2,3\n4,5,6\n");
  EXPECT_EQ(table.header(), (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(table.row_count(), 2u);
  EXPECT_EQ(table.row(1).text(2), "6");
  EXPECT_EQ(table.row(0).line(), 2u);
  EXPECT_EQ(table.row(1).line(), 3u);
}

TEST(Csv, HandlesCrlfQuotesEmbeddedNewlinesAndBom) {
  const Table table =
      parse_ok("\xEF\xBB\xBFname,note\r\n\"x,y\",\"he said \"\"hi\"\"\"\r\nz,\"two\nlines\"\r\nlast,\n");
  ASSERT_EQ(table.row_count(), 3u);
  EXPECT_EQ(table.header()[0], "name");
  EXPECT_EQ(table.row(0).text(0), "x,y");
  EXPECT_EQ(table.row(0).text(1), "he said \"hi\"");
  EXPECT_EQ(table.row(1).text(1), "two\nlines");
  EXPECT_EQ(table.row(2).line(), 5u);  // the quoted newline counts as a line
  EXPECT_EQ(table.row(2).text(1), "");
}

TEST(Csv, NoTrailingNewlineAndBlankLines) {
  const Table table = parse_ok("a,b\n\n1,2\n\n3,4");
  ASSERT_EQ(table.row_count(), 2u);
  EXPECT_EQ(table.row(1).text(1), "4");
  EXPECT_EQ(table.row(1).line(), 5u);
}

TEST(Csv, TypedFields) {
  const Table table = parse_ok("x,n\n0.1, 42 \nnan,-7\n1e400,9223372036854775808\nabc,1.5\n");
  EXPECT_DOUBLE_EQ(*table.row(0).number(0), 0.1);
  EXPECT_EQ(*table.row(0).integer(1), 42);
  EXPECT_TRUE(std::isnan(*table.row(1).number(0)));
  EXPECT_EQ(*table.row(1).integer(1), -7);
  EXPECT_EQ(table.row(2).number(0).error().message(),
            "t.csv:4:1: column 'x': number out of range: \"1e400\"");
  EXPECT_EQ(table.row(2).integer(1).error().message(),
            "t.csv:4:7: column 'n': integer out of range: \"9223372036854775808\"");
  EXPECT_EQ(table.row(3).number(0).error().message(),
            "t.csv:5:1: column 'x': expected a number, got \"abc\"");
  EXPECT_EQ(table.row(3).integer(1).error().message(),
            "t.csv:5:5: column 'n': expected an integer, got \"1.5\"");
  EXPECT_EQ(table.row(3).number(0).error().code(), ErrorCode::kParse);
}

TEST(Csv, ExactDoubleRoundTrip) {
  for (const double value : {0.1, 1.0 / 3.0, 11.276666666666666, 86.86460850784009, 1e-300, -2.5e17}) {
    const Table table = parse_ok("v\n" + format_exact(value) + "\n");
    EXPECT_EQ(*table.row(0).number(0), value);
  }
}

TEST(Csv, ColumnLookup) {
  const Table table = parse_ok("dataset,power_limit\nx,1\n");
  EXPECT_EQ(*table.column("power_limit"), 1u);
  const auto missing = table.column("time");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message(), "t.csv: missing column 'time' (the header has: dataset, power_limit)");
}

TEST(Csv, ErrorsNameLineAndColumn) {
  EXPECT_EQ(parse_error(""), "t.csv: empty file, expected a header line");
  EXPECT_EQ(parse_error("\n\n"), "t.csv: empty file, expected a header line");
  EXPECT_EQ(parse_error("a,b\n1,2,3\n"), "t.csv:2:5: too many fields: the header has 2 columns");
  EXPECT_EQ(parse_error("a,b,c\n1,2\n"),
            "t.csv:2: too few fields: found 2, the header has 3 columns (c missing)");
  EXPECT_EQ(parse_error("a,b\n1,\"open\n"), "t.csv:2:3: unterminated quoted field");
  EXPECT_EQ(parse_error("a,b\n1,\"x\"y\n"), "t.csv:2:6: unexpected text after a closing quote");
  EXPECT_EQ(parse_error("a,b\n1,x\"y\n"),
            "t.csv:2:4: a quote inside an unquoted field (quote the whole field)");
  EXPECT_EQ(parse_error("a,a\n"), "t.csv:1:3: duplicate column name 'a' in the header");
}

TEST(Csv, RowAndColumnBoundsAreChecked) {
  const Table table = parse_ok("a\n1\n");
  EXPECT_THROW(table.row(1), Exception);
  EXPECT_THROW(table.row(0).text(1), Exception);
}

TEST(Csv, LongFieldsAreShortenedInMessages) {
  const Table table = parse_ok("x\n" + std::string(100, 'z') + "\n");
  const std::string message = table.row(0).number(0).error().message();
  EXPECT_LT(message.size(), 100u);
  EXPECT_NE(message.find("…"), std::string::npos);
}

// Issue 11: messages quoted binary input raw. Fields and header names now come out escaped.
TEST(Csv, BinaryInputIsEscapedInMessages) {
  const Table table = parse_ok(std::string("x\x01,n\n\x7f\x00\xff,\x1b[2J\n", 14));
  EXPECT_EQ(table.row(0).number(0).error().message(),
            "t.csv:2:1: column 'x\\x01': expected a number, got \"\\x7f\\x00\\xff\"");
  EXPECT_EQ(table.row(0).integer(1).error().message(),
            "t.csv:2:5: column 'n': expected an integer, got \"\\x1b[2J\"");
  EXPECT_EQ(table.column("y").error().message(), "t.csv: missing column 'y' (the header has: x\\x01, n)");
  EXPECT_EQ(parse_error("a,\x02\n1\n"),
            "t.csv:2: too few fields: found 1, the header has 2 columns (\\x02 missing)");
  EXPECT_EQ(parse_error("\x03,\x03\n"), "t.csv:1:3: duplicate column name '\\x03' in the header");
}

TEST(Csv, ReadFileIsBounded) {
  test::ScopedEnv no_override(std::string(kMaxFileMibVariable), nullptr);
  JOULE_EXPECT_ERROR(
      read_file("/dev/zero", ReadLimit{"CSV file", 1000}), ErrorCode::kInvalidArgument,
      "/dev/zero: more than 1000 bytes, the most joule reads from a CSV file (real ones are far "
      "smaller: is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
}

TEST(Csv, QuoteAndWriteRoundTrip) {
  std::ostringstream out;
  const std::vector<std::string> fields = {"plain", "with,comma", "with \"quote\"", "multi\nline", ""};
  write_row(out, {"a", "b", "c", "d", "e"});
  write_row(out, fields);
  const Table table = parse_ok(out.str());
  ASSERT_EQ(table.row_count(), 1u);
  for (size_t i = 0; i < fields.size(); ++i) {
    EXPECT_EQ(table.row(0).text(i), fields[i]);
  }
  EXPECT_EQ(quote("plain"), "plain");
  EXPECT_EQ(quote("a\"b"), "\"a\"\"b\"");
}

TEST(Csv, ReadFileNamesThePath) {
  const auto missing = read_file("/nonexistent/dir/trace.csv");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message(), "cannot open /nonexistent/dir/trace.csv: No such file or directory");

  test::TempDir dir;
  const std::string path = dir.write("bad.csv", "a,b\n1\n");
  const auto bad = read_file(path);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(),
            path + ":2: too few fields: found 1, the header has 2 columns (b missing)");
}

}  // namespace
}  // namespace joule::csv
