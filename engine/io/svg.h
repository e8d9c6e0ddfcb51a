#pragma once
// What the SVG writers (heatmaps, line plots) share: escaping text, and printf into a string.
#include <cstdio>
#include <string>

namespace vkattn::io::svg {

// Text is user-given (titles): escape what XML reserves.
inline std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// One element's text: `pattern` filled in, up to 511 bytes.
inline std::string format(const char* pattern, auto... args) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, pattern, args...);
  return buffer;
}

}  // namespace vkattn::io::svg
