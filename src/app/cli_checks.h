// Checks of command-line values, with messages that say what is wanted
// ("must be a whole number from 1 to 64") rather than CLI11's ranges of
// doubles, and that refuse what a range check lets through (nan, inf).
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>

namespace lmwarden::app {

// A whole number in [lo, hi].
inline CLI::Validator whole_number(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc{} && end == text.data() + text.size() && v >= lo && v <= hi) return {};
        return fmt::format("{} is not a whole number from {} to {}", text, lo, hi);
      },
      fmt::format("{}..{}", lo, hi));
}

// A finite number in [lo, hi], or in (lo, hi] with `lo_excluded`.
inline CLI::Validator finite_number(double lo, double hi, bool lo_excluded) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        const bool ok = ec == std::errc{} && end == text.data() + text.size() && std::isfinite(v) &&
                        (lo_excluded ? v > lo : v >= lo) && v <= hi;
        if (ok) return {};
        if (std::isinf(hi)) return fmt::format("{} is not a number above {}", text, lo);
        return fmt::format("{} is not a number from {} to {}", text, lo, hi);
      },
      "NUMBER");
}

inline CLI::Validator positive_number() {
  return finite_number(0, std::numeric_limits<double>::infinity(), true);
}
inline CLI::Validator fraction() {
  return finite_number(0, 1, false);
}

}  // namespace lmwarden::app
