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
#include <utility>
#include <vector>

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

// The items of comma-separated values ("4,8" "16" gives 4, 8, 16).
inline std::vector<std::string> list_items(const std::vector<std::string>& values) {
  std::vector<std::string> items;
  for (const auto& value : values) {
    std::size_t from = 0;
    for (;;) {
      const std::size_t comma = value.find(',', from);
      items.push_back(value.substr(from, comma - from));
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
  }
  return items;
}

// Any value.
inline CLI::Validator any_text(std::string what) {
  return CLI::Validator([](std::string&) { return std::string(); }, std::move(what));
}

// A comma-separated list each of whose items passes `item`. An empty item
// ("4,,8", "4,") is refused: CLI11's own delimiter drops it, and a list
// typed with a slip would run without a word.
inline CLI::Validator list_of(CLI::Validator item) {
  const std::string what = item.get_description();
  return CLI::Validator(
      [item = std::move(item)](std::string& text) -> std::string {
        for (std::string& one : list_items({text})) {
          if (one.empty()) return fmt::format("{} has an empty item", text);
          if (std::string why = item(one); !why.empty()) return why;
        }
        return {};
      },
      what + ",…");
}

}  // namespace lmwarden::app
