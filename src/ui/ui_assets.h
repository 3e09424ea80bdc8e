// The web dashboard's files (ui/web and the vendored chart library), embedded
// into the binary at build time so the warden serves its UI with no CDN and no
// files on disk. Pure: no I/O, no allocation; the warden maps a request to an
// asset and writes the bytes.
#pragma once

#include <optional>
#include <string_view>

namespace lmwarden::ui {

struct Asset {
  std::string_view content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string_view body;          // the file's bytes, static storage
  std::string_view etag;          // strong validator, quoted: "\"3f2a…\""
};

// The asset at `path`, relative to the UI root: "index.html", "app.js",
// "vendor/uPlot.iife.min.js". Rejects anything that is not a plain relative
// path of [A-Za-z0-9._-] segments: empty, absolute, "..", ".", "//",
// backslashes, percent escapes, NUL.
std::optional<Asset> find_asset(std::string_view path) noexcept;

// The asset for a request path (query already stripped) of the dashboard:
//   "/", "/models", "/models/<name…>", "/stats"  -> index.html (the pages are
//                                                   one document with history routing)
//   "/ui/<path>"                                 -> find_asset(<path>)
// nullopt for every other path, so the caller falls through to its own routes.
std::optional<Asset> asset_for_request_path(std::string_view path) noexcept;

// Headers for every dashboard response. The pages load only their own files
// and talk only to this origin; uPlot sizes its elements with inline styles.
inline constexpr std::string_view kContentSecurityPolicy =
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";
// Revalidate on every load (the names are not content-hashed); the ETag makes
// that a 304 with no body.
inline constexpr std::string_view kCacheControl = "no-cache";

// True when an If-None-Match header value names `etag` (or is "*"), so the
// caller can answer 304 Not Modified with no body.
bool etag_matches(std::string_view if_none_match, std::string_view etag) noexcept;

}  // namespace lmwarden::ui
