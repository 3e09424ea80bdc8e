#include "ui/ui_assets.h"

#include <algorithm>

#include "ui/ui_asset_table.h"

namespace lmwarden::ui {
namespace {

constexpr bool is_name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// One segment between slashes: non-empty, not "." or "..", name characters only.
constexpr bool is_valid_segment(std::string_view s) noexcept {
  if (s.empty() || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), is_name_char);
}

constexpr bool is_valid_path(std::string_view path) noexcept {
  if (path.empty() || path.size() > 256) return false;
  while (true) {
    const auto slash = path.find('/');
    if (!is_valid_segment(path.substr(0, slash))) return false;
    if (slash == std::string_view::npos) return true;
    path.remove_prefix(slash + 1);
  }
}

static_assert(is_valid_path("index.html") && is_valid_path("vendor/uPlot.min.css"));
static_assert(!is_valid_path("") && !is_valid_path("/index.html") && !is_valid_path("a//b") &&
              !is_valid_path("../x") && !is_valid_path("a/./b") && !is_valid_path("a\\b") &&
              !is_valid_path("a%2e") && !is_valid_path("dir/"));

}  // namespace

std::optional<Asset> find_asset(std::string_view path) noexcept {
  if (!is_valid_path(path)) return std::nullopt;
  // The generated table is sorted by path.
  const auto* begin = std::begin(detail::kAssets);
  const auto* end = std::end(detail::kAssets);
  const auto* it = std::lower_bound(begin, end, path,
                                    [](const detail::Entry& e, std::string_view p) { return e.path < p; });
  if (it == end || it->path != path) return std::nullopt;
  return it->asset;
}

std::optional<Asset> asset_for_request_path(std::string_view path) noexcept {
  constexpr std::string_view kAssetPrefix = "/ui/";
  if (path.starts_with(kAssetPrefix)) return find_asset(path.substr(kAssetPrefix.size()));
  if (path == "/" || path == "/models" || path == "/models/" || path == "/stats" || path == "/stats/" ||
      (path.starts_with("/models/") && path.size() > 8))
    return find_asset("index.html");
  return std::nullopt;
}

bool etag_matches(std::string_view if_none_match, std::string_view etag) noexcept {
  // A comma-separated list of entity tags; weak ones ("W/…") match by value too.
  while (!if_none_match.empty()) {
    const auto comma = if_none_match.find(',');
    std::string_view tag = if_none_match.substr(0, comma);
    while (!tag.empty() && (tag.front() == ' ' || tag.front() == '\t')) tag.remove_prefix(1);
    while (!tag.empty() && (tag.back() == ' ' || tag.back() == '\t')) tag.remove_suffix(1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == "*" || (!tag.empty() && tag == etag)) return true;
    if (comma == std::string_view::npos) break;
    if_none_match.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace lmwarden::ui
