// CLI11 validators for numbers that its own conversions take too loosely: a 64-bit unsigned
// option wraps "-1" and saturates a value past 2^64, and CLI::Range lets NaN through (every comparison
// with it is false). Each refuses the value with a message naming it; CLI11 adds the flag.
#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace waste::cli {

// A decimal integer in [0, 2^64 - 1]: no sign, no wrap, no saturation (seeds).
inline CLI::Validator uint64_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || s[0] == '-' || s[0] == '+' || ec != std::errc() || end != s.data() + s.size())
          return "'" + s + "' is not an integer from 0 to 18446744073709551615";
        // Written back in plain decimal: CLI11 converts with base 0 (strtoull), which would read
        // "010" as octal 8 and refuse "08".
        s = std::to_string(v);
        return std::string();
      },
      "UINT64");
}

// 1024, 0.5 (not std::to_string's 1024.000000).
inline std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A finite number in [lo, hi] (no NaN, no inf).
inline CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < lo || v > hi)
          return "'" + s + "' is not a number from " + short_number(lo) + " to " + short_number(hi);
        return std::string();
      },
      "FINITE");
}

}  // namespace waste::cli
