// The two API dialects the warden speaks to clients, and errors in each.
// OpenAI-shaped routes get {"error":{"message","type","param","code"}};
// Anthropic routes (/v1/messages…) get {"type":"error","error":{"type","message"}}.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "net/http_server.h"

namespace lmwarden::proxy {

enum class Dialect { kOpenAi, kAnthropic };

Dialect dialect_of(std::string_view target) noexcept;

// Path without the query string.
std::string_view path_of(std::string_view target) noexcept;

// Routes that carry inference work and are forwarded to a replica.
bool is_forwarded_route(std::string_view path) noexcept;
// A stored Responses response's own routes, forwarded to the replica that
// stored it: GET /v1/responses/{id} (retrieve it) and POST
// /v1/responses/{id}/cancel. The id (a view into `path`), or "" when `path`
// and `method` are neither.
std::string_view stored_response_of(std::string_view path, net::http::verb method) noexcept;
// The route a stored response's routes belong to, for unranked_routes.
inline constexpr std::string_view kResponsesRoute = "/v1/responses";
// What a forwarded route's replies (the caller has checked the route) say of
// token usage: nothing (count_tokens, tokenize and detokenize only count), the
// prompt's size without how much of it was cached (vLLM's /v1/embeddings and
// other pooling replies carry prompt_tokens alone), or both. kRepeated: the
// usage of work counted before (a stored response retrieved again), not
// booked.
enum class UsageReport : std::uint8_t { kNone, kWithoutCachedCount, kFull, kRepeated };
UsageReport usage_report(std::string_view path) noexcept;

// `type`: the error's type where the status's own would differ from what the
// server itself would say (vLLM's invalid_request_error for a stored response
// it does not hold); "" for the status's.
std::string error_body(Dialect dialect, net::http::status status, std::string_view message,
                       std::string_view type = {});
net::Response error_response(Dialect dialect, net::http::status status, std::string_view message,
                             std::string_view type = {});

// A final SSE event telling a streaming client that the upstream failed after
// the stream had started, in its dialect (so SDKs raise instead of hanging);
// `status` is the one a reply not yet begun would have had (502, or 504 for a
// timeout), given as the error's code. On /v1/responses (`path`, without its
// query), a `response.failed` event, as that API ends a failed stream.
std::string stream_error_event(Dialect dialect, net::http::status status, std::string_view message,
                               std::string_view path = {});

}  // namespace lmwarden::proxy
