// Range checks for the numeric flags of the `kvtier` subcommands. CLI11's own conversion accepts
// "-1" for an unsigned option (it wraps to 2^64 - 1), saturates overflowing text and reads "010" as
// octal, "nan" and "inf" as numbers; these validators run on the text first and accept only plain
// decimal numbers inside the flag's range, so every value reaching a command is in range.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

namespace kvtier::tools {

// A plain decimal whole number ("0", "42"; no sign, spaces, exponent, base prefix or leading zero,
// which CLI11 would read as octal) in [min, max], computed without overflow; nullopt otherwise.
inline std::optional<uint64_t> ParseWholeNumber(const std::string& text, uint64_t min, uint64_t max) {
  if (text.empty() || text.size() > 20 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9' || __builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v)) {
      return std::nullopt;
    }
  }
  if (v < min || v > max) return std::nullopt;
  return v;
}

// For an integer flag: a whole number in [min, max].
inline CLI::Validator WholeNumber(uint64_t min, uint64_t max) {
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        if (ParseWholeNumber(text, min, max)) return "";
        return "'" + text + "' is not a whole number in " + range;
      },
      "WHOLE NUMBER in " + range);
}

// For a floating-point flag: a finite decimal number in [min, max] (no "nan" or "inf").
inline CLI::Validator FiniteNumber(double min, double max) {
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = text.empty() ? NAN : std::strtod(text.c_str(), &end);
        const bool plain = text.find_first_not_of("0123456789.eE+-") == std::string::npos;
        if (plain && end == text.c_str() + text.size() && std::isfinite(v) && v >= min && v <= max) {
          return "";
        }
        return "'" + text + "' is not a number in " + range;
      },
      "NUMBER in " + range);
}

}  // namespace kvtier::tools
