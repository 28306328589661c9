// SPDX-License-Identifier: Apache-2.0
// joule/viz/svg.hpp — a minimal SVG writer: shapes, markers, text, groups with tooltips. Output is
// deterministic (fixed-precision numbers, no locale, one element per line) so that plots can be compared
// byte for byte.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"

namespace joule::viz {

/// @return `value` rounded to at most `max_decimals` decimals, without trailing zeros, never "-0" and
/// independent of the locale, e.g. format_number(1.50, 2) == "1.5", format_number(-0.001, 2) == "0".
/// Non-finite values give "nan", "inf" or "-inf".
std::string format_number(double value, int max_decimals = 2);

/// @return `text` with &, <, >, " and ' replaced by entities, and control characters that XML 1.0 forbids
/// replaced by U+FFFD, so it can be used as element text or an attribute value. `text` should be UTF-8.
std::string xml_escape(std::string_view text);

/// A point in pixels (SVG user units): x to the right, y down.
struct Point {
  double x = 0;
  double y = 0;
};

/// How a shape is painted. Colours are any SVG/CSS colour ("#0072b2", "none", "white").
struct Style {
  std::string fill = "none";
  std::string stroke = "none";
  double stroke_width_px = 1;
  std::string dash{};  ///< stroke-dasharray, e.g. "6 3"; empty is a solid line
  double opacity = 1;
};

/// Where a text's x coordinate sits in the text.
enum class TextAnchor { kStart, kMiddle, kEnd };

/// How a text is drawn. y is the baseline.
struct TextStyle {
  double size_px = 12;
  TextAnchor anchor = TextAnchor::kStart;
  double rotation_deg = 0;  ///< clockwise about the anchor point; -90 reads bottom to top
  std::string color = "#222222";
  bool bold = false;
  std::string halo{};  ///< a colour drawn around the glyphs (e.g. "white") to keep text readable over lines
};

/// Marker shapes for points.
enum class Marker { kNone, kCircle, kSquare, kDiamond, kTriangle, kCross };

/// Options of a group (<g>).
struct GroupOptions {
  std::string tooltip{};  ///< shown on hover (a <title> child); empty for none
  std::string clip_id{};  ///< id of a clip_rect() the group's content is clipped to; empty for none
};

/// An SVG document being drawn. Coordinates are pixels from the top-left corner.
class SvgDocument {
 public:
  /// @throws joule::Exception (kInvalidArgument) unless both sizes are positive and finite.
  SvgDocument(double width_px, double height_px);

  double width_px() const { return width_px_; }
  double height_px() const { return height_px_; }

  void rect(double x, double y, double width_px, double height_px, const Style& style);
  void line(double x1, double y1, double x2, double y2, const Style& style);
  void polyline(const std::vector<Point>& points, const Style& style);
  void polygon(const std::vector<Point>& points, const Style& style);
  void circle(double cx, double cy, double radius_px, const Style& style);
  /// A path with SVG path data `d` (the caller formats its numbers).
  void path(std::string_view d, const Style& style);
  /// A marker of about `size_px` across, centred on (cx, cy). kCross is stroked with the fill colour (or the
  /// stroke colour if the fill is "none"); kNone draws nothing.
  void marker(Marker shape, double cx, double cy, double size_px, const Style& style);
  /// Text, escaped. Several lines are not supported: '\n' is drawn as a space by viewers.
  void text(double x, double y, std::string_view text, const TextStyle& style);

  /// Defines a clip rectangle that groups can refer to by `id` (letters, digits, '-' and '_').
  /// @throws joule::Exception (kInvalidArgument) for another id.
  void clip_rect(std::string_view id, double x, double y, double width_px, double height_px);
  /// Opens a group; every begin_group() needs an end_group().
  void begin_group(const GroupOptions& options = {});
  /// @throws joule::Exception (kState) if no group is open.
  void end_group();

  /// @return the whole document. @throws joule::Exception (kState) if a group is still open.
  std::string str() const;

 private:
  void element(std::string_view content);

  double width_px_;
  double height_px_;
  std::string defs_;
  std::string body_;
  int depth_ = 0;
};

/// @return the estimated width in pixels of `text` at `size_px` (no font metrics: an average glyph width per
/// UTF-8 code point), good enough to place labels and legends.
double estimate_text_width_px(std::string_view text, double size_px);

/// Writes `svg` to `path` atomically (see joule::write_file_atomic()). @return its errors.
Result<void> save_svg(const std::string& path, std::string_view svg);

}  // namespace joule::viz
