// Byte-level facts of JSON text (RFC 8259) that scanners of raw request and
// reply bytes share.
#pragma once

#include <string_view>

namespace lmwarden {

// JSON's four whitespace characters.
constexpr bool is_json_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// A UTF-8 byte order mark. vLLM's server reads a request body with Python's
// json.loads(bytes), which skips one before the value; the warden's readers
// of request bodies do too.
inline constexpr std::string_view kUtf8ByteOrderMark = "\xEF\xBB\xBF";

}  // namespace lmwarden
