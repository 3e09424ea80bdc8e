#include "sim/token_routes.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "engine/output_text.h"
#include "engine/tokenizer.h"
#include "sim/api_request.h"
#include "sim/api_response.h"

namespace lmwarden::sim {

namespace {

using Json = nlohmann::json;

TokenReply bad_request(std::string_view message) {
  return {400, openai_error_body(400, message)};
}

}  // namespace

TokenReply tokenize_reply(std::string_view body, std::int32_t max_model_len) {
  const Json j = Json::parse(body, nullptr, false);
  if (!j.is_object()) return bad_request("the request body must be a JSON object");
  std::vector<engine::TokenId> ids;
  if (j.contains("messages")) {
    // Parsed as a chat request, so the prompt is the one a chat completion would see.
    const ParseResult parsed = parse_api_request(Api::kChatCompletions, body);
    if (!parsed.request) return bad_request(parsed.error);
    ids = prompt_token_ids(*parsed.request);
  } else if (j.contains("prompt") && j["prompt"].is_string()) {
    ids = engine::tokenize(j["prompt"].get<std::string>());
  } else {
    return bad_request("either 'prompt' (a string) or 'messages' is required");
  }
  return {200, Json{{"count", ids.size()},
                    {"max_model_len", max_model_len},
                    {"tokens", ids},
                    {"token_strs", nullptr}}
                   .dump()};
}

TokenReply detokenize_reply(std::string_view body) {
  const Json j = Json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
    return bad_request("'tokens' (a list of token ids) is required");
  std::string text;
  for (const Json& t : j["tokens"]) {
    if (!t.is_number_unsigned() || t.get<std::uint64_t>() >= engine::kVocabSize)
      return bad_request("'tokens' must be integers below the vocabulary size");
    const auto id = static_cast<engine::TokenId>(t.get<std::uint64_t>());
    if (auto piece = engine::output_piece_of(id)) {
      text += *piece;
    } else {
      text += fmt::format("<|{}|>", id);
    }
  }
  return {200, Json{{"prompt", text}}.dump()};
}

}  // namespace lmwarden::sim
