// Response bodies and SSE streams in the shapes vLLM produces, for each
// dialect. Pure code: the server feeds tokens in and writes the bytes out.
//
// Framing, as vLLM writes it: OpenAI routes send `data: {json}\n\n` per chunk
// and `data: [DONE]\n\n` last; Anthropic and Responses routes send
// `event: {type}\ndata: {json}\n\n`. Usage follows vLLM with
// --enable-prompt-tokens-details: OpenAI `prompt_tokens_details.cached_tokens`
// (null in a whole response and absent in a stream when nothing was cached; in
// a stream only in the final chunk with empty `choices`, and only when
// stream_options.include_usage); Anthropic `input_tokens` = prompt − cached
// with `cache_read_input_tokens` = cached.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/engine.h"
#include "sim/api_request.h"

namespace lmwarden::sim {

class ResponseBuilder {
 public:
  // `id_suffix` makes the response ids (hex, unique per request).
  // `prompt_tokens_details` false: usage as vLLM without
  // --enable-prompt-tokens-details, which never says how many prompt tokens
  // were cached (OpenAI: no `prompt_tokens_details`; Anthropic: the whole
  // prompt in `input_tokens`, no `cache_read_input_tokens`). The Responses
  // dialect keeps `input_tokens_details.cached_tokens` either way.
  ResponseBuilder(const ApiRequest& request, std::string model, std::string_view id_suffix,
                  std::int64_t created_unix, bool prompt_tokens_details = true);

  // Records one generated token; when `sse` is given, appends the stream
  // events it causes (the opening events come with the first token, the
  // closing ones with the last).
  void on_token(const engine::TokenOutput& token, std::string_view piece, std::string* sse);

  // The whole response body of a non-streamed request (after the last token).
  std::string body() const;

  bool finished() const noexcept { return finish_.has_value(); }
  const std::string& id() const noexcept { return id_; }      // e.g. resp_…
  const std::string& text() const noexcept { return text_; }  // the output so far
  std::int32_t prompt_tokens() const noexcept { return prompt_tokens_; }
  std::int32_t cached_tokens() const noexcept { return cached_tokens_; }
  std::int32_t completion_tokens() const noexcept { return completion_tokens_; }

 private:
  void open_stream(std::string& out);
  void stream_delta(std::string_view piece, std::string& out);
  void close_stream(std::string& out);
  // The cached count the usage reports: none without prompt tokens details.
  std::int32_t reported_cached() const noexcept {
    return prompt_tokens_details_ ? cached_tokens_ : 0;
  }

  Api api_;
  bool include_usage_;
  bool prompt_tokens_details_;
  std::string model_;
  std::string id_;
  std::string item_id_;  // Responses: the output message's id
  std::int64_t created_;
  std::int32_t prompt_tokens_ = 0;
  std::int32_t cached_tokens_ = 0;
  std::int32_t completion_tokens_ = 0;
  std::string text_;
  std::optional<engine::FinishReason> finish_;
  std::int64_t sequence_ = 0;  // Responses stream sequence_number
};

// Errors in each dialect's shape, as vLLM answers them.
std::string openai_error_body(int status, std::string_view message);
// With vLLM's err_type where it names one (it becomes `type` as is).
std::string openai_error_body(int status, std::string_view message, std::string_view type);
std::string anthropic_error_body(int status, std::string_view message);
std::string error_body(Api api, int status, std::string_view message);

// POST /v1/messages/count_tokens answer.
std::string count_tokens_body(std::int32_t input_tokens);

}  // namespace lmwarden::sim
