// SPDX-License-Identifier: Apache-2.0
#include "joule/core/strings.hpp"

#include <vector>

#include <gtest/gtest.h>

namespace joule {
namespace {

TEST(Strings, Trim) {
  EXPECT_EQ(trim("  a b \t\r\n"), "a b");
  EXPECT_EQ(trim(" \n\t"), "");
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim("x"), "x");
}

TEST(Strings, LowerAndPrefix) {
  EXPECT_EQ(to_lower("V100-PCIe"), "v100-pcie");
  EXPECT_TRUE(starts_with_ignoring_case("GPU-abc", "gpu-"));
  EXPECT_TRUE(starts_with_ignoring_case("mig-1", "MIG-"));
  EXPECT_FALSE(starts_with_ignoring_case("GP", "GPU-"));
  EXPECT_TRUE(starts_with_ignoring_case("anything", ""));
}

// Issue 11: parsers quoted raw bytes of bad fields, so a binary file printed garbage to the terminal.
TEST(Strings, ExcerptsEscapeWhatATerminalWouldNotShow) {
  EXPECT_EQ(quoted_excerpt("abc"), "\"abc\"");
  EXPECT_EQ(quoted_excerpt(std::string_view("a\0b\x01\x7f\x1b[31m", 10)), "\"a\\x00b\\x01\\x7f\\x1b[31m\"");
  EXPECT_EQ(quoted_excerpt("tab\tcr\rlf\n"), "\"tab\\tcr\\rlf\\n\"");
  EXPECT_EQ(quoted_excerpt("say \"hi\" \\o/"), "\"say \\\"hi\\\" \\\\o/\"");
  EXPECT_EQ(printable_excerpt("say \"hi\""), "say \"hi\"");
  // Well-formed UTF-8 stays readable; invalid, overlong, surrogate, C1 and layout-changing sequences do not.
  EXPECT_EQ(printable_excerpt("données €"), "données €");
  EXPECT_EQ(printable_excerpt("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable_excerpt("\xc3"), "\\xc3");                    // truncated sequence
  EXPECT_EQ(printable_excerpt("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(printable_excerpt("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(printable_excerpt("\xc2\x85"), "\\xc2\\x85");           // NEL, a C1 control
  EXPECT_EQ(printable_excerpt("a\xe2\x80\xae"
                              "b"),
            "a\\xe2\\x80\\xaeb");  // right-to-left override
}

TEST(Strings, ExcerptsAreShort) {
  const std::string long_text(1000, 'x');
  // Built by appending: g++ 12 at -O3 warns falsely (-Wrestrict) on `"\"" + std::string(n, 'x')`.
  std::string expected = "\"";
  expected.append(kExcerptChars, 'x');
  expected += "…\"";
  EXPECT_EQ(quoted_excerpt(long_text), expected);
  EXPECT_EQ(printable_excerpt(std::string(kExcerptChars, 'y')), std::string(kExcerptChars, 'y'));
  // Escapes count by what they print: 10 zero bytes are 40 characters.
  std::string ten_zeros;
  for (int i = 0; i < 10; ++i) {
    ten_zeros += "\\x00";
  }
  EXPECT_EQ(printable_excerpt(std::string(11, '\0'), 40), ten_zeros + "…");
  EXPECT_EQ(printable_excerpt("ééé", 2), "éé…");
  EXPECT_EQ(printable_excerpt("", 5), "");
}

TEST(Strings, EditDistanceCountsTyposIncludingSwaps) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("devices", "devices"), 0u);
  EXPECT_EQ(edit_distance("devcies", "devices"), 1u);  // a swap of adjacent letters is one edit
  EXPECT_EQ(edit_distance("mesure", "measure"), 1u);
  EXPECT_EQ(edit_distance("measures", "measure"), 1u);
  EXPECT_EQ(edit_distance("plam", "plan"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("ca", "abc"), 3u);  // optimal string alignment: no edit of a swapped pair
  EXPECT_EQ(edit_distance("serve", "devices"), edit_distance("devices", "serve"));
}

TEST(Strings, ClosestMatchSuggestsTyposNotUnrelatedWords) {
  const std::vector<std::string> commands = {"devices", "measure", "power", "demo", "simulate",
                                             "plan",    "daemon",  "serve", "job",  "carbon"};
  EXPECT_EQ(closest_match("devcies", commands), "devices");
  EXPECT_EQ(closest_match("mesure", commands), "measure");
  EXPECT_EQ(closest_match("sim", commands), "simulate");  // a prefix of 3 letters or more
  EXPECT_EQ(closest_match("deamon", commands), "daemon");
  EXPECT_EQ(closest_match("pwr", commands), std::nullopt);
  EXPECT_EQ(closest_match("frobnicate", commands), std::nullopt);
  EXPECT_EQ(closest_match("x", commands), std::nullopt);
  EXPECT_EQ(closest_match("--formt", {"--format", "--gpus", "--output"}), "--format");
  EXPECT_EQ(closest_match("anything", {}), std::nullopt);
}

}  // namespace
}  // namespace joule
