// Percent-encoding (RFC 3986 §2.1) read back, as Python's urllib.parse reads
// it (which is what vLLM's server, under FastAPI, hands its routes).
#pragma once

#include <string>
#include <string_view>

namespace lmwarden {

// `%XX` escapes decoded; a `%` that two hex digits do not follow stays as it
// is (urllib.parse.unquote). With `plus_is_space`, as a query's parts are
// read (form encoding, unquote_plus), `+` is a space too.
std::string percent_decoded(std::string_view s, bool plus_is_space = false);

}  // namespace lmwarden
