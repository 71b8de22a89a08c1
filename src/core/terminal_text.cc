// TerminalSafe (terminal_text.h).
#include "core/terminal_text.h"

#include <cstdint>

namespace kvtier::internal {
namespace {

// Length of the well-formed UTF-8 sequence at `s` (2 to 4) and its code point; 0 when malformed.
size_t Utf8Sequence(std::string_view s, uint32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  size_t n = 0;
  uint32_t min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, *cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, *cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, *cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (b & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return n;
}

bool Displayable(uint32_t cp) {
  if (cp < 0xA0) return false;                       // C1 controls
  if (cp >= 0x2028 && cp <= 0x202E) return false;    // separators, bidi embeddings and overrides
  if (cp >= 0x2066 && cp <= 0x2069) return false;    // bidi isolates
  return true;
}

void Hex(unsigned char b, std::string* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  *out += "\\x";
  *out += kDigits[b >> 4];
  *out += kDigits[b & 0xF];
}

}  // namespace

std::string TerminalSafe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b == '\\') {
      out += "\\\\";
      ++i;
    } else if (b >= 0x20 && b < 0x7F) {
      out += static_cast<char>(b);
      ++i;
    } else {
      uint32_t cp = 0;
      const size_t n = b >= 0x80 ? Utf8Sequence(text.substr(i), &cp) : 0;
      if (n > 0 && Displayable(cp)) {
        out.append(text.substr(i, n));
        i += n;
      } else {
        Hex(b, &out);
        ++i;
      }
    }
  }
  return out;
}

}  // namespace kvtier::internal
