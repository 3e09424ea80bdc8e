// The generation requests the simulator accepts, reduced to what the engine
// needs. Every dialect's body is parsed here (simdjson) and its messages are
// rendered through the model's chat template, so the same conversation gives
// the same tokens whichever route carries it. Pure code: no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "engine/types.h"

namespace lmwarden::sim {

enum class Api : std::uint8_t {
  kChatCompletions,  // POST /v1/chat/completions
  kCompletions,      // POST /v1/completions
  kMessages,         // POST /v1/messages (Anthropic)
  kCountTokens,      // POST /v1/messages/count_tokens (Anthropic)
  kResponses,        // POST /v1/responses (OpenAI Responses)
};

// The Anthropic routes answer errors in Anthropic's shape.
constexpr bool is_anthropic(Api api) noexcept {
  return api == Api::kMessages || api == Api::kCountTokens;
}

struct ApiRequest {
  Api api = Api::kChatCompletions;
  std::string model;
  bool stream = false;
  // OpenAI stream_options.include_usage: a last chunk with usage, empty choices.
  bool include_usage = false;
  // 0 when the body sets no limit (then: up to the context length).
  std::int32_t max_tokens = 0;
  // The prompt after the chat template, or the raw completions prompt.
  std::string prompt_text;
  // A completions prompt given as token ids, used as is.
  std::optional<std::vector<engine::TokenId>> prompt_tokens;

  // Responses only. `previous_response_id`: absent or null when the request
  // starts a conversation; any string, even empty, names a stored response.
  std::optional<std::string> previous_response_id;
  // `store`: absent is true; null is false, as vLLM's Optional[bool] = True
  // reads it (None is falsy).
  bool store = true;
  // The request's own messages and tools before the chat template, its
  // instructions (if any) first: kept so that a stored conversation can be
  // put between them and the input (render_with_history).
  engine::ChatPrompt chat;
  std::size_t instruction_messages = 0;  // how many of chat.messages are instructions
};

struct ParseResult {
  std::optional<ApiRequest> request;
  std::string error;  // why the body was refused, when request is empty
};

// Parses a request body for `api` in place when `body_capacity` bytes are
// readable from its start and that leaves simdjson's padding after it;
// otherwise from a padded copy.
ParseResult parse_api_request(Api api, std::string_view body, std::size_t body_capacity = 0);

// Renders a Responses request's prompt_text again with `history` (a stored
// conversation) between its instructions and its input, where vLLM puts the
// previous response's messages. request.chat stays the request's own.
void render_with_history(ApiRequest& request, const std::vector<engine::ChatMessage>& history);

// The prompt's tokens: prompt_tokens if given, else the tokenized text.
std::vector<engine::TokenId> prompt_token_ids(const ApiRequest& request);

}  // namespace lmwarden::sim
