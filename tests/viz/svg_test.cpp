// SPDX-License-Identifier: Apache-2.0
#include "joule/viz/svg.hpp"

#include <limits>
#include <locale>

#include <gtest/gtest.h>

#include "joule/core/file.hpp"
#include "joule/viz/axis.hpp"

#include "test_util.hpp"
#include "xml_check.hpp"

namespace joule::viz {
namespace {

size_t count(const std::string& text, const std::string& part) {
  size_t found = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) {
    ++found;
  }
  return found;
}

TEST(SvgFormat, Numbers) {
  EXPECT_EQ(format_number(1.5), "1.5");
  EXPECT_EQ(format_number(1.50), "1.5");
  EXPECT_EQ(format_number(2.0), "2");
  EXPECT_EQ(format_number(100), "100");
  EXPECT_EQ(format_number(0.125, 2), "0.12");  // 0.125 is exact: round half to even
  EXPECT_EQ(format_number(0.126, 2), "0.13");
  EXPECT_EQ(format_number(-3.25, 1), "-3.2");
  EXPECT_EQ(format_number(123.456, 0), "123");
  EXPECT_EQ(format_number(1e6), "1000000");
  EXPECT_EQ(format_number(1.23456789, 5), "1.23457");
  EXPECT_EQ(format_number(7, -3), "7");  // clamped to 0 decimals
}

TEST(SvgFormat, NoNegativeZero) {
  EXPECT_EQ(format_number(-0.0), "0");
  EXPECT_EQ(format_number(-0.001), "0");
  EXPECT_EQ(format_number(-0.004, 2), "0");
  EXPECT_EQ(format_number(-0.4, 0), "0");
  EXPECT_EQ(format_number(-0.006, 2), "-0.01");
}

TEST(SvgFormat, NonFinite) {
  EXPECT_EQ(format_number(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(format_number(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_number(-std::numeric_limits<double>::infinity()), "-inf");
}

// A global C++ locale with a decimal comma and digit grouping, as a German user might have.
struct CommaDecimals : std::numpunct<char> {
  char do_decimal_point() const override { return ','; }
  char do_thousands_sep() const override { return '.'; }
  std::string do_grouping() const override { return "\3"; }
};

TEST(SvgFormat, IgnoresTheLocale) {
  const std::locale old = std::locale::global(std::locale(std::locale::classic(), new CommaDecimals));
  EXPECT_EQ(format_number(1234.5), "1234.5");
  EXPECT_EQ(format_tick(2500, 500), "2500");
  EXPECT_EQ(format_tick(0.5, 0.1), "0.5");
  std::locale::global(old);
}

TEST(SvgEscape, EscapesMarkup) {
  EXPECT_EQ(xml_escape("a < b && c > \"d\" 'e'"), "a &lt; b &amp;&amp; c &gt; &quot;d&quot; &apos;e&apos;");
  EXPECT_EQ(xml_escape("plain 175 W"), "plain 175 W");
  EXPECT_EQ(xml_escape(""), "");
  EXPECT_EQ(xml_escape("&amp;"), "&amp;amp;");
}

TEST(SvgEscape, KeepsUtf8AndReplacesForbiddenControls) {
  EXPECT_EQ(xml_escape("Okabe–Ito · 10 µs"), "Okabe–Ito · 10 µs");
  EXPECT_EQ(xml_escape("tab\tnew\nline"), "tab\tnew\nline");
  EXPECT_EQ(xml_escape(std::string("a\x01"
                                   "b\x1f",
                                   4)),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

TEST(SvgEscape, TextWidthCountsCodePoints) {
  EXPECT_DOUBLE_EQ(estimate_text_width_px("abcd", 10), 24);
  EXPECT_DOUBLE_EQ(estimate_text_width_px("µs", 10), 12);  // 'µ' is two bytes
  EXPECT_DOUBLE_EQ(estimate_text_width_px("", 10), 0);
}

TEST(SvgDocument, SmallDocumentExactly) {
  SvgDocument doc(100, 50.5);
  Style style;
  style.fill = "#ff0000";
  doc.rect(1, 2, 3.333, 4, style);
  style.fill = "none";
  style.stroke = "blue";
  style.stroke_width_px = 2;
  style.dash = "4 2";
  doc.line(0, 0, 10, -0.001, style);
  doc.clip_rect("area", 0, 0, 10, 10);
  doc.begin_group({.tooltip = "a <b>", .clip_id = "area"});
  TextStyle text;
  text.anchor = TextAnchor::kMiddle;
  text.rotation_deg = -90;
  text.bold = true;
  doc.text(5, 6, "x & y", text);
  doc.end_group();
  EXPECT_EQ(
      doc.str(),
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100\" height=\"50.5\" viewBox=\"0 0 100 50.5\" "
      "font-family=\"Helvetica, Arial, sans-serif\">\n"
      "  <defs>\n"
      "    <clipPath id=\"area\"><rect x=\"0\" y=\"0\" width=\"10\" height=\"10\"/></clipPath>\n"
      "  </defs>\n"
      "  <rect x=\"1\" y=\"2\" width=\"3.33\" height=\"4\" fill=\"#ff0000\"/>\n"
      "  <line x1=\"0\" y1=\"0\" x2=\"10\" y2=\"0\" fill=\"none\" stroke=\"blue\" stroke-width=\"2\" "
      "stroke-dasharray=\"4 2\"/>\n"
      "  <g clip-path=\"url(#area)\">\n"
      "    <title>a &lt;b&gt;</title>\n"
      "    <text x=\"5\" y=\"6\" font-size=\"12\" text-anchor=\"middle\" fill=\"#222222\" "
      "font-weight=\"bold\" "
      "transform=\"rotate(-90 5 6)\">x &amp; y</text>\n"
      "  </g>\n"
      "</svg>\n");
}

TEST(SvgDocument, ShapesAndMarkers) {
  SvgDocument doc(200, 200);
  Style style;
  style.fill = "#0072b2";
  style.stroke = "#ffffff";
  style.opacity = 0.5;
  doc.polyline({{0, 0}, {10.5, 20.25}}, style);
  doc.polygon({{0, 0}, {1, 1}, {2, 0}}, style);
  doc.circle(5, 5, 2, style);
  doc.path("M0 0L1 1", style);
  for (const Marker marker : {Marker::kNone, Marker::kCircle, Marker::kSquare, Marker::kDiamond,
                              Marker::kTriangle, Marker::kCross}) {
    doc.marker(marker, 50, 50, 10, style);
  }
  const std::string svg = doc.str();
  EXPECT_NE(svg.find("<polyline points=\"0,0 10.5,20.25\""), std::string::npos);
  EXPECT_NE(svg.find("opacity=\"0.5\""), std::string::npos);
  EXPECT_EQ(count(svg, "<circle "), 2u);   // circle() and the circle marker
  EXPECT_EQ(count(svg, "<rect "), 1u);     // the square
  EXPECT_EQ(count(svg, "<polygon "), 3u);  // polygon(), diamond, triangle
  EXPECT_EQ(count(svg, "<path "), 2u);     // path() and the cross
  // The cross is stroked with the fill colour.
  EXPECT_NE(svg.find("<path d=\"M46 46L54 54M46 54L54 46\" fill=\"none\" stroke=\"#0072b2\""),
            std::string::npos);
  EXPECT_EQ(test::xml_problem(svg), "");
}

TEST(SvgDocument, TextHalo) {
  SvgDocument doc(10, 10);
  TextStyle style;
  style.halo = "white";
  doc.text(1, 2, "t", style);
  EXPECT_NE(
      doc.str().find("stroke=\"white\" stroke-width=\"3\" stroke-linejoin=\"round\" paint-order=\"stroke\""),
      std::string::npos);
}

TEST(SvgDocument, EscapesAttributes) {
  SvgDocument doc(10, 10);
  Style style;
  style.fill = "\"><script>";
  doc.rect(0, 0, 1, 1, style);
  const std::string svg = doc.str();
  EXPECT_EQ(svg.find("<script>"), std::string::npos);
  EXPECT_EQ(test::xml_problem(svg), "");
}

TEST(SvgDocument, Errors) {
  JOULE_EXPECT_THROW_MESSAGE(SvgDocument(0, 10), ErrorCode::kInvalidArgument,
                             "an SVG document needs a positive, finite size, got 0 x 10 px");
  JOULE_EXPECT_THROW_MESSAGE(SvgDocument(10, std::numeric_limits<double>::infinity()),
                             ErrorCode::kInvalidArgument,
                             "an SVG document needs a positive, finite size, got 10 x inf px");
  SvgDocument doc(10, 10);
  JOULE_EXPECT_THROW_MESSAGE(doc.end_group(), ErrorCode::kState, "end_group() without an open group");
  JOULE_EXPECT_THROW_MESSAGE(doc.clip_rect("a b", 0, 0, 1, 1), ErrorCode::kInvalidArgument,
                             "clip id 'a b' must be non-empty letters, digits, '-' or '_'");
  JOULE_EXPECT_THROW_MESSAGE(doc.begin_group({.clip_id = "x)"}), ErrorCode::kInvalidArgument,
                             "clip id 'x)' must be non-empty letters, digits, '-' or '_'");
  doc.begin_group();
  doc.begin_group();
  JOULE_EXPECT_THROW_MESSAGE(doc.str(), ErrorCode::kState, "the SVG document has 2 unclosed group(s)");
  doc.end_group();
  doc.end_group();
  EXPECT_EQ(test::xml_problem(doc.str()), "");
}

TEST(SvgDocument, SaveWritesTheFile) {
  joule::test::TempDir dir;
  const std::string path = dir.path() + "/plot.svg";
  const std::string svg = SvgDocument(10, 10).str();
  ASSERT_TRUE(save_svg(path, svg));
  EXPECT_EQ(*read_text_file(path), svg);
  const auto failed = save_svg(dir.path() + "/missing/plot.svg", svg);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), ErrorCode::kNotFound);
}

TEST(SvgXmlCheck, FindsProblems) {
  EXPECT_EQ(
      test::xml_problem("<?xml version=\"1.0\"?>\n<a x=\"1\"><b/><!-- c --><c>&amp;&#65;&#x41;</c></a>\n"),
      "");
  EXPECT_EQ(test::xml_problem("<a><b></a>"), "</a> at 6 closes <b>");
  EXPECT_EQ(test::xml_problem("<a>"), "<a> is never closed");
  EXPECT_EQ(test::xml_problem("<a x=1/>"), "attribute x in <a> at 3 needs =\"value\"");
  EXPECT_EQ(test::xml_problem("<a x=\"1\" x=\"2\"/>"), "attribute x repeated in <a> at 9");
  EXPECT_EQ(test::xml_problem("<a>&nbsp;</a>"), "unknown entity '&nbsp;' at 3");
  EXPECT_EQ(test::xml_problem("<a/><b/>"), "a second root element <b> at 4");
  EXPECT_EQ(test::xml_problem("x<a/>"), "text outside the root element at 0");
  EXPECT_EQ(test::xml_problem(""), "no root element");
}

}  // namespace
}  // namespace joule::viz
