// SPDX-License-Identifier: Apache-2.0
#include "joule/core/json.hpp"

#include <gtest/gtest.h>

namespace joule {
namespace {

TEST(ErrorBodyMessage, FindsTheMessageApisPutInErrorBodies) {
  EXPECT_EQ(error_body_message(R"({"error": {"message": "max_tokens must be positive", "type": "x"}})"),
            "max_tokens must be positive");  // OpenAI
  EXPECT_EQ(error_body_message(R"({"error": "zone not found"})"), "zone not found");
  EXPECT_EQ(error_body_message(R"({"message": "rate limited"})"), "rate limited");
  EXPECT_EQ(error_body_message(R"({"detail": "Not Found"})"), "Not Found");  // FastAPI
  // Not JSON: the body itself, on one line (CR and LF escaped), cut at 200 characters.
  EXPECT_EQ(error_body_message("<html>\nBad Gateway\r\n</html>"), "<html>\\nBad Gateway\\r\\n</html>");
  EXPECT_EQ(error_body_message(std::string(500, 'x')), std::string(200, 'x') + "…");
  EXPECT_EQ(error_body_message(""), "empty body");
  EXPECT_EQ(error_body_message(R"({"error": 3})"), R"({"error": 3})");
  EXPECT_EQ(error_body_message("abcdef", 3), "abc…");
}

TEST(ErrorBodyMessage, QuotesAHostileServerAsAShortPrintableExcerpt) {
  // An escape sequence, CR/LF (a forged second line), NUL and 100 kB more: escaped and cut, wherever the
  // text is (the message field, or the body itself).
  const std::string hostile = std::string("\x1b[2J\r\nFAKE: ok\0", 15) + std::string(100'000, 'y');
  const std::string expected = "\\x1b[2J\\r\\nFAKE: ok\\x00" + std::string(177, 'y') + "…";
  EXPECT_EQ(error_body_message(nlohmann::json({{"error", {{"message", hostile}}}}).dump()), expected);
  EXPECT_EQ(error_body_message(nlohmann::json({{"message", hostile}}).dump()), expected);
  EXPECT_EQ(error_body_message(hostile), expected);
  // Nested 100,000 deep: not recursed into (the depth-limited parser refuses it), quoted as text.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  EXPECT_EQ(error_body_message(deep, 8), "[[[[[[[[…");
  const std::string deep_error = R"({"error": )" + deep + "}";
  EXPECT_EQ(error_body_message(deep_error, 12), R"({"error": [[…)");
}

TEST(ErrorBodyMessage, ReadsABodyAlreadyParsed) {
  using nlohmann::json;
  EXPECT_EQ(parsed_error_body_message(json({{"error", "No recent data for zone \"DE\"\r\n"}})),
            "No recent data for zone \"DE\"\\r\\n");
  EXPECT_EQ(parsed_error_body_message(json({{"error", {{"message", std::string(300, 'z')}}}})),
            std::string(200, 'z') + "…");
  EXPECT_EQ(parsed_error_body_message(json({{"error", 3}})), "3");
  EXPECT_EQ(parsed_error_body_message(json({{"error", 3}, {"message", "this one"}})), "this one");
  EXPECT_EQ(parsed_error_body_message(json({{"error", json::array({1, 2})}})), "an array of 2 items");
  EXPECT_EQ(parsed_error_body_message(json({{"zone", "DE"}})), R"(an object with 1 key ("zone"))");
}

TEST(DescribeJsonError, SaysWhyABodyIsNotUsableJson) {
  const auto why = [](std::string_view text) { return describe_json_error(parse_json(text).error(), text); };
  EXPECT_EQ(why("<html>\r\n<title>502 Bad Gateway</title>"),
            R"(is not JSON: "<html>\r\n<title>502 Bad Gateway</title>")");
  EXPECT_EQ(why(std::string(100, '[')), "is JSON nested deeper than 64 levels");
  EXPECT_EQ(why(R"({"points": [1, 1e999]})"),
            "is not usable JSON: points[1]: the number 1e999 is out of range (a finite number within "
            "±1.8e308 is expected)");
  EXPECT_EQ(describe_json_error(parse_json("[[[[", 3).error(), "[[[[", 3),
            "is JSON nested deeper than 3 levels");
}

}  // namespace
}  // namespace joule
