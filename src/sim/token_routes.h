// vLLM's POST /tokenize and POST /detokenize, on the simulator's tokenizer:
// pure functions from a request body to the reply's status and body.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lmwarden::sim {

struct TokenReply {
  int status = 200;
  std::string body;
};

// {"prompt": "..."} or {"messages": [...]} (rendered with the chat template,
// as for /v1/chat/completions) -> {"count", "max_model_len", "tokens",
// "token_strs": null}.
TokenReply tokenize_reply(std::string_view body, std::int32_t max_model_len);

// {"tokens": [...]} -> {"prompt": "..."}. The simulator's ids are hashes of
// text pieces, so only ids of generated output map back to their text;
// any other id comes back as "<|id|>".
TokenReply detokenize_reply(std::string_view body);

}  // namespace lmwarden::sim
