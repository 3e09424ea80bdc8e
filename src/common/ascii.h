// ASCII case folding, for the names protocols and the configuration compare
// without case (field names, schemes, units, true and false), and the control
// characters: never the locale's, and bytes past 0x7f are left as they are.
#pragma once

#include <string>
#include <string_view>

namespace lmwarden {

// A C0 control character or DEL: what no header value, secret or name the
// configuration holds should carry (a tab is one; callers that allow it say so).
constexpr bool ascii_control(char c) noexcept {
  return static_cast<unsigned char>(c) < 0x20 || c == '\x7f';
}

constexpr char ascii_lower(char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

inline std::string ascii_lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

constexpr bool ascii_iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  return true;
}

constexpr bool ascii_istarts_with(std::string_view s, std::string_view prefix) noexcept {
  return s.size() >= prefix.size() && ascii_iequals(s.substr(0, prefix.size()), prefix);
}

}  // namespace lmwarden
