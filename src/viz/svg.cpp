// SPDX-License-Identifier: Apache-2.0
#include "joule/viz/svg.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "joule/core/file.hpp"

namespace joule::viz {

namespace {

constexpr int kMaxDecimals = 17;
// Pixel coordinates need no more than hundredths: anything finer is invisible and only bloats goldens.
constexpr int kCoordinateDecimals = 2;

std::string num(double value) {
  return format_number(value, kCoordinateDecimals);
}

std::string style_attributes(const Style& style) {
  std::string out = fmt::format(" fill=\"{}\"", xml_escape(style.fill));
  if (style.stroke != "none" && !style.stroke.empty()) {
    out += fmt::format(" stroke=\"{}\" stroke-width=\"{}\"", xml_escape(style.stroke),
                       num(style.stroke_width_px));
    if (!style.dash.empty()) {
      out += fmt::format(" stroke-dasharray=\"{}\"", xml_escape(style.dash));
    }
  }
  if (style.opacity != 1) {
    out += fmt::format(" opacity=\"{}\"", format_number(style.opacity, 3));
  }
  return out;
}

std::string points_attribute(const std::vector<Point>& points) {
  std::string out;
  for (const Point& point : points) {
    if (!out.empty()) {
      out += ' ';
    }
    out += num(point.x);
    out += ',';
    out += num(point.y);
  }
  return out;
}

bool is_id(std::string_view id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

}  // namespace

std::string format_number(double value, int max_decimals) {
  if (!std::isfinite(value)) {
    return fmt::format("{}", value);
  }
  max_decimals = std::clamp(max_decimals, 0, kMaxDecimals);
  // fmt's fixed formatting is locale-independent and exact, so the same double always gives the same text.
  std::string text = fmt::format("{:.{}f}", value, max_decimals);
  if (text.find('.') != std::string::npos) {
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') {
      text.pop_back();
    }
  }
  if (text == "-0") {
    text = "0";
  }
  return text;
}

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          out += "\xEF\xBF\xBD";  // U+FFFD: XML 1.0 cannot carry these at all, not even as references
        } else {
          out += c;
        }
    }
  }
  return out;
}

double estimate_text_width_px(std::string_view text, double size_px) {
  // Helvetica's average glyph is about 0.55 em; 0.6 errs on the wide side so that labels do not collide.
  constexpr double kEmPerGlyph = 0.6;
  const auto glyphs = std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // not a UTF-8 continuation byte
  });
  return static_cast<double>(glyphs) * kEmPerGlyph * size_px;
}

SvgDocument::SvgDocument(double width_px, double height_px) : width_px_(width_px), height_px_(height_px) {
  if (!(width_px > 0) || !(height_px > 0) || !std::isfinite(width_px) || !std::isfinite(height_px)) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("an SVG document needs a positive, finite size, got {} x {} px", width_px, height_px));
  }
}

void SvgDocument::element(std::string_view content) {
  body_.append(static_cast<size_t>(2 * (depth_ + 1)), ' ');
  body_ += content;
  body_ += '\n';
}

void SvgDocument::rect(double x, double y, double width_px, double height_px, const Style& style) {
  element(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"{}/>", num(x), num(y), num(width_px),
                      num(height_px), style_attributes(style)));
}

void SvgDocument::line(double x1, double y1, double x2, double y2, const Style& style) {
  element(fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"{}/>", num(x1), num(y1), num(x2), num(y2),
                      style_attributes(style)));
}

void SvgDocument::polyline(const std::vector<Point>& points, const Style& style) {
  element(fmt::format("<polyline points=\"{}\"{}/>", points_attribute(points), style_attributes(style)));
}

void SvgDocument::polygon(const std::vector<Point>& points, const Style& style) {
  element(fmt::format("<polygon points=\"{}\"{}/>", points_attribute(points), style_attributes(style)));
}

void SvgDocument::circle(double cx, double cy, double radius_px, const Style& style) {
  element(fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\"{}/>", num(cx), num(cy), num(radius_px),
                      style_attributes(style)));
}

void SvgDocument::path(std::string_view d, const Style& style) {
  element(fmt::format("<path d=\"{}\"{}/>", xml_escape(d), style_attributes(style)));
}

void SvgDocument::marker(Marker shape, double cx, double cy, double size_px, const Style& style) {
  // Sizes are chosen so that the shapes look about equally heavy next to each other.
  switch (shape) {
    case Marker::kNone:
      return;
    case Marker::kCircle:
      circle(cx, cy, size_px / 2, style);
      return;
    case Marker::kSquare: {
      const double side = size_px * 0.85;
      rect(cx - side / 2, cy - side / 2, side, side, style);
      return;
    }
    case Marker::kDiamond: {
      const double half = size_px * 0.6;
      polygon({{cx, cy - half}, {cx + half, cy}, {cx, cy + half}, {cx - half, cy}}, style);
      return;
    }
    case Marker::kTriangle: {
      const double radius = size_px * 0.62;
      const double half_base = radius * std::sqrt(3.0) / 2;
      polygon({{cx, cy - radius}, {cx + half_base, cy + radius / 2}, {cx - half_base, cy + radius / 2}},
              style);
      return;
    }
    case Marker::kCross: {
      const double half = size_px * 0.4;
      Style stroked;
      stroked.stroke = style.fill != "none" && !style.fill.empty() ? style.fill : style.stroke;
      stroked.stroke_width_px = std::max(style.stroke_width_px, size_px / 4);
      stroked.opacity = style.opacity;
      path(fmt::format("M{} {}L{} {}M{} {}L{} {}", num(cx - half), num(cy - half), num(cx + half),
                       num(cy + half), num(cx - half), num(cy + half), num(cx + half), num(cy - half)),
           stroked);
      return;
    }
  }
}

void SvgDocument::text(double x, double y, std::string_view text, const TextStyle& style) {
  std::string attributes =
      fmt::format("x=\"{}\" y=\"{}\" font-size=\"{}\"", num(x), num(y), num(style.size_px));
  if (style.anchor == TextAnchor::kMiddle) {
    attributes += " text-anchor=\"middle\"";
  } else if (style.anchor == TextAnchor::kEnd) {
    attributes += " text-anchor=\"end\"";
  }
  attributes += fmt::format(" fill=\"{}\"", xml_escape(style.color));
  if (style.bold) {
    attributes += " font-weight=\"bold\"";
  }
  if (!style.halo.empty()) {
    attributes +=
        fmt::format(" stroke=\"{}\" stroke-width=\"3\" stroke-linejoin=\"round\" paint-order=\"stroke\"",
                    xml_escape(style.halo));
  }
  if (style.rotation_deg != 0) {
    attributes += fmt::format(" transform=\"rotate({} {} {})\"", num(style.rotation_deg), num(x), num(y));
  }
  element(fmt::format("<text {}>{}</text>", attributes, xml_escape(text)));
}

void SvgDocument::clip_rect(std::string_view id, double x, double y, double width_px, double height_px) {
  if (!is_id(id)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("clip id '{}' must be non-empty letters, digits, '-' or '_'", id));
  }
  defs_ +=
      fmt::format("    <clipPath id=\"{}\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></clipPath>\n",
                  id, num(x), num(y), num(width_px), num(height_px));
}

void SvgDocument::begin_group(const GroupOptions& options) {
  if (!options.clip_id.empty() && !is_id(options.clip_id)) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("clip id '{}' must be non-empty letters, digits, '-' or '_'", options.clip_id));
  }
  element(options.clip_id.empty() ? std::string("<g>")
                                  : fmt::format("<g clip-path=\"url(#{})\">", options.clip_id));
  ++depth_;
  if (!options.tooltip.empty()) {
    element(fmt::format("<title>{}</title>", xml_escape(options.tooltip)));
  }
}

void SvgDocument::end_group() {
  if (depth_ == 0) {
    throw Exception(ErrorCode::kState, "end_group() without an open group");
  }
  --depth_;
  element("</g>");
}

std::string SvgDocument::str() const {
  if (depth_ != 0) {
    throw Exception(ErrorCode::kState, fmt::format("the SVG document has {} unclosed group(s)", depth_));
  }
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\">\n",
      num(width_px_), num(height_px_));
  if (!defs_.empty()) {
    out += "  <defs>\n";
    out += defs_;
    out += "  </defs>\n";
  }
  out += body_;
  out += "</svg>\n";
  return out;
}

Result<void> save_svg(const std::string& path, std::string_view svg) {
  return write_file_atomic(path, svg);
}

}  // namespace joule::viz
