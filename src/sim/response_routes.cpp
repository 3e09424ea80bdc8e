#include "sim/response_routes.h"

#include <fmt/format.h>

#include <optional>

#include "common/percent.h"
#include "sim/api_response.h"

namespace lmwarden::sim {
namespace {

constexpr std::string_view kPrefix = "/v1/responses/";
constexpr std::string_view kCancel = "/cancel";
constexpr std::string_view kNotFound = "Response with id '{}' not found.";
// vLLM's err_type for its 404 and its refusal to cancel, which its error body carries as `type`.
constexpr std::string_view kInvalidRequestError = "invalid_request_error";
constexpr std::string_view kCannotCancel = "Cannot cancel a synchronous response.";
constexpr std::string_view kNoReplay =
    "The simulator keeps no events to replay: stream=true replays the events of a background "
    "response, and background mode is not simulated. Retrieve it without stream=true.";
constexpr std::string_view kNotBoolean =
    "Query parameter '{}' should be a valid boolean, got '{}'.";
constexpr std::string_view kNotInteger =
    "Query parameter '{}' should be a valid integer, got '{}'.";

// The value of query parameter `name`, or none. As Starlette parses a query
// (parse_qsl, blanks kept) and FastAPI reads a single-valued parameter: pairs
// split at `&`, a pair without `=` has an empty value, the last one wins.
std::optional<std::string> query_value(std::string_view query, std::string_view name) {
  std::optional<std::string> found;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    const std::size_t eq = pair.find('=');
    if (percent_decoded(pair.substr(0, eq), true) != name) continue;
    found =
        eq == std::string_view::npos ? std::string{} : percent_decoded(pair.substr(eq + 1), true);
  }
  return found;
}

// A boolean as pydantic reads one from text, in any case.
std::optional<bool> boolean_of(std::string_view v) {
  std::string lower(v);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (std::string_view t : {"1", "on", "t", "true", "y", "yes"}) {
    if (lower == t) return true;
  }
  for (std::string_view f : {"0", "off", "f", "false", "n", "no"}) {
    if (lower == f) return false;
  }
  return std::nullopt;
}

// Digits with an optional sign, spaces around them allowed; pydantic reads a
// few more spellings (`1_000`, `1.0`), which no client of a replay sends.
bool is_integer(std::string_view v) {
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  if (!v.empty() && (v.front() == '+' || v.front() == '-')) v.remove_prefix(1);
  if (v.empty()) return false;
  for (const char c : v) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

StoredResponseReply bad_request(std::string message) {
  return {400, openai_error_body(400, message)};
}

StoredResponseReply invalid_request(int status, std::string_view message) {
  return {status, openai_error_body(status, message, kInvalidRequestError)};
}

}  // namespace

std::string response_not_found_body(std::string_view id) {
  return openai_error_body(404, fmt::format(fmt::runtime(kNotFound), id), kInvalidRequestError);
}

std::optional<StoredResponseRoute> stored_response_route(std::string_view path) {
  const std::string decoded = percent_decoded(path, false);
  std::string_view rest = decoded;
  if (!rest.starts_with(kPrefix)) return std::nullopt;
  rest.remove_prefix(kPrefix.size());
  StoredResponseAction action = StoredResponseAction::kRetrieve;
  if (rest.ends_with(kCancel)) {
    rest.remove_suffix(kCancel.size());
    action = StoredResponseAction::kCancel;
  }
  if (rest.empty() || rest.find('/') != std::string_view::npos) return std::nullopt;
  return StoredResponseRoute{.action = action, .id = std::string(rest)};
}

StoredResponseReply stored_response_reply(const ResponseStore& store,
                                          const StoredResponseRoute& route,
                                          std::string_view query) {
  // The query is checked first: FastAPI validates it before vLLM's handler
  // looks the id up.
  bool stream = false;
  if (route.action == StoredResponseAction::kRetrieve) {
    if (auto v = query_value(query, "stream")) {
      const std::optional<bool> b = boolean_of(*v);
      if (!b) return bad_request(fmt::format(fmt::runtime(kNotBoolean), "stream", *v));
      stream = *b;
    }
    if (auto v = query_value(query, "starting_after"); v && !is_integer(*v)) {
      return bad_request(fmt::format(fmt::runtime(kNotInteger), "starting_after", *v));
    }
  }
  const std::shared_ptr<const StoredTurn> turn = store.find(route.id);
  if (!turn) return {404, response_not_found_body(route.id)};
  if (route.action == StoredResponseAction::kCancel) return invalid_request(400, kCannotCancel);
  if (stream) return invalid_request(400, kNoReplay);
  return {200, turn->response};
}

}  // namespace lmwarden::sim
