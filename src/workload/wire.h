// HTTP requests for a conversation's next turn, in the dialects agents speak.
// Pure: builds bytes, sends nothing.
//
//  - OpenAI chat (Codex-like): POST /v1/chat/completions with a `session-id`
//    header and the same id as `prompt_cache_key`; streamed, with
//    stream_options.include_usage so the last chunk carries usage.
//  - Anthropic messages shaped like Claude Code 2.x: POST /v1/messages?beta=true
//    with `X-Claude-Code-Session-Id`, `metadata.user_id` as a JSON *string*
//    {"device_id","account_uuid","session_id"}, system and content as text
//    blocks, `stream: true`.
//  - OpenAI Responses shaped like Codex 0.171 (its current wire API):
//    POST /v1/responses with `session-id` and `thread-id` headers, the system
//    prompt as a `developer` message in `input`, `store: false`,
//    `prompt_cache_key`, `stream: true`; `max_output_tokens` bounds the reply
//    (Codex leaves it to the server).
//
// All carry the session id where the warden looks for it (DESIGN §4), and all
// reduce to the same chat-template prompt on the simulator.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "workload/session.h"

namespace lmwarden::workload {

enum class Dialect { kOpenAi, kAnthropic, kResponses };

std::string_view to_string(Dialect d) noexcept;
std::optional<Dialect> parse_dialect(std::string_view name) noexcept;

struct WireRequest {
  std::string target;  // path and query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // JSON
};

// The next turn of `conversation` (which must not be done()). Without
// `session_ids` the request carries none of the ids above (headers,
// prompt_cache_key, metadata.user_id): as clients that send only their
// messages, for the warden's `opening` source.
WireRequest build_request(Dialect dialect, const Conversation& conversation, std::string_view model,
                          bool session_ids = true);

// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

}  // namespace lmwarden::workload
