#include "proxy/dialect.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/json_dump.h"
#include "config/config.h"

namespace lmwarden::proxy {
namespace {

using Status = net::http::status;

std::string_view openai_type(Status status) {
  switch (status) {
    case Status::unauthorized: return "authentication_error";
    case Status::forbidden: return "permission_error";
    case Status::not_found: return "not_found_error";
    case Status::payload_too_large: return "request_too_large";
    case Status::bad_gateway:
    case Status::service_unavailable:
    case Status::gateway_timeout:
    case Status::internal_server_error: return "server_error";
    default: return "invalid_request_error";
  }
}

std::string_view anthropic_type(Status status) {
  switch (status) {
    case Status::unauthorized: return "authentication_error";
    case Status::forbidden: return "permission_error";
    case Status::not_found: return "not_found_error";
    case Status::payload_too_large: return "request_too_large";
    case Status::too_many_requests: return "rate_limit_error";
    case Status::service_unavailable: return "overloaded_error";
    case Status::bad_gateway:
    case Status::gateway_timeout:
    case Status::internal_server_error: return "api_error";
    default: return "invalid_request_error";
  }
}

}  // namespace

std::string_view path_of(std::string_view target) noexcept {
  return target.substr(0, target.find('?'));
}

Dialect dialect_of(std::string_view target) noexcept {
  const std::string_view path = path_of(target);
  return path == "/v1/messages" || path.starts_with("/v1/messages/") ? Dialect::kAnthropic
                                                                      : Dialect::kOpenAi;
}

bool is_forwarded_route(std::string_view path) noexcept {
  return std::ranges::find(config::kForwardedRoutes, path) != config::kForwardedRoutes.end();
}

std::string_view stored_response_of(std::string_view path, net::http::verb method) noexcept {
  constexpr std::string_view kPrefix = "/v1/responses/", kCancel = "/cancel";
  if (!path.starts_with(kPrefix)) return {};
  std::string_view id = path.substr(kPrefix.size());
  if (method == net::http::verb::post && id.ends_with(kCancel)) {
    id.remove_suffix(kCancel.size());
  } else if (method != net::http::verb::get) {
    return {};
  }
  return id.find('/') == std::string_view::npos ? id : std::string_view{};
}

UsageReport usage_report(std::string_view path) noexcept {
  if (path == "/v1/messages/count_tokens" || path == "/tokenize" || path == "/detokenize")
    return UsageReport::kNone;
  if (path == "/v1/embeddings") return UsageReport::kWithoutCachedCount;
  return UsageReport::kFull;
}

std::string error_body(Dialect dialect, Status status, std::string_view message,
                       std::string_view type) {
  nlohmann::json j;
  if (dialect == Dialect::kAnthropic) {
    j = {{"type", "error"},
         {"error", {{"type", type.empty() ? anthropic_type(status) : type}, {"message", message}}}};
  } else {
    j = {{"error",
          {{"message", message},
           {"type", type.empty() ? openai_type(status) : type},
           {"param", nullptr},
           {"code", static_cast<int>(status)}}}};
  }
  // A message may quote the client (a header, a model name, a field name cut
  // at 64 bytes): bytes that are not UTF-8 become U+FFFD rather than an
  // exception that would leave the client without a reply.
  return json_dump(j);
}

net::Response error_response(Dialect dialect, Status status, std::string_view message,
                             std::string_view type) {
  net::Response res{status, 11};
  res.set(net::http::field::content_type, "application/json");
  res.body() = error_body(dialect, status, message, type);
  return res;
}

std::string stream_error_event(Dialect dialect, Status status, std::string_view message,
                               std::string_view path) {
  if (path == kResponsesRoute) {
    // The Responses API's own end of a failed stream (its clients, Codex
    // among them, read events by their type and skip one they do not know).
    const nlohmann::ordered_json failed = {
        {"type", "response.failed"},
        {"response",
         {{"object", "response"},
          {"status", "failed"},
          {"error", {{"code", "server_error"}, {"message", message}}}}}};
    return "event: response.failed\ndata: " + json_dump(failed) + "\n\n";
  }
  const std::string body = error_body(dialect, status, message);
  if (dialect == Dialect::kAnthropic) return "event: error\ndata: " + body + "\n\n";
  return "data: " + body + "\n\n";
}

}  // namespace lmwarden::proxy
