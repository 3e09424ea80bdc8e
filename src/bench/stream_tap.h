// Reads a streamed reply (Server-Sent Events) as the benchmark's client sees
// it: the reply text to send back next turn, the moment the first content
// token arrives (time to first byte, DESIGN §9), and the output token count.
// Pure: fed bytes as they come off the socket, in pieces of any size.
//
// OpenAI chat: `data: {chunk}` events; content is choices[0].delta.content
// (the opening chunk carries only the role and an empty content, so it is not
// the first token); the last chunk may carry usage.completion_tokens; then
// `data: [DONE]`. Anthropic messages: `content_block_delta` events with
// delta.text; `message_delta` carries usage.output_tokens; `message_stop`
// ends; an `error` event is a failure. Responses: `response.output_text.delta`
// events with `delta`; `response.completed` (or `.incomplete`, cut at the
// token limit) ends and carries response.usage.output_tokens;
// `response.failed` and `error` are failures.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "workload/wire.h"

namespace lmwarden::bench {

// An error object's `message` (OpenAI, Anthropic and Responses errors all
// carry one), or the error itself when it is a string; nullopt otherwise.
std::optional<std::string> error_message(const nlohmann::json& error);

class StreamTap {
 public:
  explicit StreamTap(workload::Dialect dialect) : dialect_(dialect) {}

  // Feeds body bytes. Returns true when this call delivered the first
  // non-empty content of the reply.
  bool feed(std::string_view bytes);

  bool first_token_seen() const noexcept { return content_pieces_ > 0; }
  bool done() const noexcept { return done_; }
  const std::optional<std::string>& error() const noexcept { return error_; }
  const std::string& text() const noexcept { return text_; }
  // Output tokens: the server's usage count when it sent one, else the number
  // of content pieces (vLLM streams one token per chunk).
  std::int64_t output_tokens() const noexcept { return usage_output_.value_or(content_pieces_); }

 private:
  void on_event(std::string_view event, std::string_view data);
  void on_responses_event(std::string_view type, const nlohmann::json& j);
  // Appends holder[field] to the text when it is a non-empty string.
  void add_piece(const nlohmann::json& holder, const char* field);

  workload::Dialect dialect_;
  std::string pending_;  // bytes of an event not yet terminated
  std::string text_;
  std::int64_t content_pieces_ = 0;
  std::optional<std::int64_t> usage_output_;
  bool done_ = false;
  std::optional<std::string> error_;
};

}  // namespace lmwarden::bench
