#include "sim/api_response.h"

#include <nlohmann/json.hpp>

namespace lmwarden::sim {
namespace {

using Json = nlohmann::ordered_json;
using engine::FinishReason;

void append_data(std::string& out, const Json& j) {
  out += "data: ";
  out += j.dump();
  out += "\n\n";
}

void append_event(std::string& out, std::string_view event, const Json& j) {
  out += "event: ";
  out += event;
  out += "\ndata: ";
  out += j.dump();
  out += "\n\n";
}

std::string_view anthropic_stop_reason(FinishReason r) {
  return r == FinishReason::kLength ? "max_tokens" : "end_turn";
}

std::string_view error_type(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 404:
      return "NotFoundError";
    case 413:
      return "RequestEntityTooLarge";
    case 503:
      return "ServiceUnavailableError";
    default:
      return "InternalServerError";
  }
}

// Anthropic `usage` as vLLM writes it: input_tokens = prompt − cached, with
// cache_read_input_tokens = cached; without prompt tokens details the whole
// prompt is input_tokens and the cached count is left out.
Json anthropic_usage(std::int32_t prompt, std::int32_t cached, bool details, std::int32_t output) {
  Json usage{{"input_tokens", details ? prompt - cached : prompt}, {"output_tokens", output}};
  if (details) usage["cache_read_input_tokens"] = cached;
  return usage;
}

std::string_view anthropic_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 503:
      return "overloaded_error";
    default:
      return "api_error";
  }
}

}  // namespace

ResponseBuilder::ResponseBuilder(const ApiRequest& request, std::string model,
                                 std::string_view id_suffix, std::int64_t created_unix,
                                 bool prompt_tokens_details)
    : api_(request.api),
      include_usage_(request.include_usage),
      prompt_tokens_details_(prompt_tokens_details),
      model_(std::move(model)),
      created_(created_unix) {
  switch (api_) {
    case Api::kCompletions:
      id_ = "cmpl-";
      break;
    case Api::kResponses:
      id_ = "resp_";
      item_id_ = "msg_" + std::string(id_suffix);
      break;
    default:
      id_ = "chatcmpl-";
      break;  // vLLM's Anthropic route reuses chat ids
  }
  id_ += id_suffix;
}

void ResponseBuilder::on_token(const engine::TokenOutput& token, std::string_view piece,
                               std::string* sse) {
  if (token.index == 0) {
    prompt_tokens_ = token.num_prompt_tokens;
    cached_tokens_ = token.num_cached_tokens;
    if (sse) open_stream(*sse);
  }
  ++completion_tokens_;
  text_ += piece;
  if (token.finished) finish_ = token.finished;
  if (sse) {
    stream_delta(piece, *sse);
    if (finish_) close_stream(*sse);
  }
}

void ResponseBuilder::open_stream(std::string& out) {
  switch (api_) {
    case Api::kChatCompletions:
      append_data(out, Json{{"id", id_},
                            {"object", "chat.completion.chunk"},
                            {"created", created_},
                            {"model", model_},
                            {"choices",
                             Json::array({Json{{"index", 0},
                                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                                               {"logprobs", nullptr},
                                               {"finish_reason", nullptr}}})}});
      break;
    case Api::kMessages:
      append_event(out, "message_start",
                   Json{{"type", "message_start"},
                        {"message",
                         {{"id", id_},
                          {"type", "message"},
                          {"role", "assistant"},
                          {"content", Json::array()},
                          {"model", model_},
                          {"stop_reason", nullptr},
                          {"stop_sequence", nullptr},
                          {"usage", anthropic_usage(prompt_tokens_, cached_tokens_,
                                                    prompt_tokens_details_, 0)}}}});
      append_event(out, "content_block_start",
                   Json{{"type", "content_block_start"},
                        {"index", 0},
                        {"content_block", {{"type", "text"}, {"text", ""}}}});
      break;
    case Api::kResponses: {
      Json response{{"id", id_},
                    {"object", "response"},
                    {"created_at", created_},
                    {"status", "in_progress"},
                    {"model", model_},
                    {"output", Json::array()},
                    {"usage", nullptr}};
      append_event(out, "response.created",
                   Json{{"type", "response.created"},
                        {"sequence_number", sequence_++},
                        {"response", response}});
      append_event(out, "response.in_progress",
                   Json{{"type", "response.in_progress"},
                        {"sequence_number", sequence_++},
                        {"response", response}});
      append_event(out, "response.output_item.added",
                   Json{{"type", "response.output_item.added"},
                        {"sequence_number", sequence_++},
                        {"output_index", 0},
                        {"item",
                         {{"id", item_id_},
                          {"type", "message"},
                          {"status", "in_progress"},
                          {"role", "assistant"},
                          {"content", Json::array()}}}});
      append_event(
          out, "response.content_part.added",
          Json{{"type", "response.content_part.added"},
               {"sequence_number", sequence_++},
               {"item_id", item_id_},
               {"output_index", 0},
               {"content_index", 0},
               {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
      break;
    }
    case Api::kCompletions:
    case Api::kCountTokens:
      break;
  }
}

void ResponseBuilder::stream_delta(std::string_view piece, std::string& out) {
  const Json finish = finish_ ? Json(engine::to_string(*finish_)) : Json(nullptr);
  switch (api_) {
    case Api::kChatCompletions: {
      Json choice{{"index", 0},
                  {"delta", {{"content", piece}}},
                  {"logprobs", nullptr},
                  {"finish_reason", finish}};
      if (finish_) choice["stop_reason"] = nullptr;
      append_data(out, Json{{"id", id_},
                            {"object", "chat.completion.chunk"},
                            {"created", created_},
                            {"model", model_},
                            {"choices", Json::array({choice})}});
      break;
    }
    case Api::kCompletions:
      append_data(out, Json{{"id", id_},
                            {"object", "text_completion"},
                            {"created", created_},
                            {"model", model_},
                            {"choices", Json::array({Json{{"index", 0},
                                                          {"text", piece},
                                                          {"logprobs", nullptr},
                                                          {"finish_reason", finish},
                                                          {"stop_reason", nullptr}}})}});
      break;
    case Api::kMessages:
      append_event(out, "content_block_delta",
                   Json{{"type", "content_block_delta"},
                        {"index", 0},
                        {"delta", {{"type", "text_delta"}, {"text", piece}}}});
      break;
    case Api::kResponses:
      append_event(out, "response.output_text.delta",
                   Json{{"type", "response.output_text.delta"},
                        {"sequence_number", sequence_++},
                        {"item_id", item_id_},
                        {"output_index", 0},
                        {"content_index", 0},
                        {"delta", piece},
                        {"logprobs", Json::array()}});
      break;
    case Api::kCountTokens:
      break;
  }
}

void ResponseBuilder::close_stream(std::string& out) {
  Json usage{{"prompt_tokens", prompt_tokens_},
             {"total_tokens", prompt_tokens_ + completion_tokens_},
             {"completion_tokens", completion_tokens_}};
  if (reported_cached() > 0) usage["prompt_tokens_details"] = {{"cached_tokens", cached_tokens_}};
  switch (api_) {
    case Api::kChatCompletions:
    case Api::kCompletions:
      if (include_usage_) {
        append_data(out, Json{{"id", id_},
                              {"object", api_ == Api::kCompletions ? "text_completion"
                                                                   : "chat.completion.chunk"},
                              {"created", created_},
                              {"model", model_},
                              {"choices", Json::array()},
                              {"usage", usage}});
      }
      out += "data: [DONE]\n\n";
      break;
    case Api::kMessages:
      append_event(out, "content_block_stop", Json{{"type", "content_block_stop"}, {"index", 0}});
      append_event(
          out, "message_delta",
          Json{{"type", "message_delta"},
               {"delta",
                {{"stop_reason", anthropic_stop_reason(*finish_)}, {"stop_sequence", nullptr}}},
               {"usage", anthropic_usage(prompt_tokens_, cached_tokens_, prompt_tokens_details_,
                                         completion_tokens_)}});
      append_event(out, "message_stop", Json{{"type", "message_stop"}});
      break;
    case Api::kResponses: {
      const Json part{{"type", "output_text"}, {"text", text_}, {"annotations", Json::array()}};
      append_event(out, "response.output_text.done",
                   Json{{"type", "response.output_text.done"},
                        {"sequence_number", sequence_++},
                        {"item_id", item_id_},
                        {"output_index", 0},
                        {"content_index", 0},
                        {"text", text_},
                        {"logprobs", Json::array()}});
      append_event(out, "response.content_part.done",
                   Json{{"type", "response.content_part.done"},
                        {"sequence_number", sequence_++},
                        {"item_id", item_id_},
                        {"output_index", 0},
                        {"content_index", 0},
                        {"part", part}});
      append_event(out, "response.output_item.done",
                   Json{{"type", "response.output_item.done"},
                        {"sequence_number", sequence_++},
                        {"output_index", 0},
                        {"item",
                         {{"id", item_id_},
                          {"type", "message"},
                          {"status", "completed"},
                          {"role", "assistant"},
                          {"content", Json::array({part})}}}});
      // A response cut short by max_output_tokens ends "incomplete".
      const std::string_view last =
          finish_ == FinishReason::kLength ? "response.incomplete" : "response.completed";
      append_event(
          out, last,
          Json{
              {"type", last}, {"sequence_number", sequence_++}, {"response", Json::parse(body())}});
      break;
    }
    case Api::kCountTokens:
      break;
  }
}

std::string ResponseBuilder::body() const {
  const std::string_view finish = finish_ ? engine::to_string(*finish_) : "abort";
  const Json details =
      reported_cached() > 0 ? Json{{"cached_tokens", cached_tokens_}} : Json(nullptr);
  const Json usage{{"prompt_tokens", prompt_tokens_},
                   {"total_tokens", prompt_tokens_ + completion_tokens_},
                   {"completion_tokens", completion_tokens_},
                   {"prompt_tokens_details", details}};
  switch (api_) {
    case Api::kChatCompletions:
      return Json{{"id", id_},
                  {"object", "chat.completion"},
                  {"created", created_},
                  {"model", model_},
                  {"choices", Json::array({Json{{"index", 0},
                                                {"message",
                                                 {{"role", "assistant"},
                                                  {"content", text_},
                                                  {"refusal", nullptr},
                                                  {"annotations", nullptr},
                                                  {"audio", nullptr},
                                                  {"function_call", nullptr},
                                                  {"tool_calls", Json::array()},
                                                  {"reasoning_content", nullptr}}},
                                                {"logprobs", nullptr},
                                                {"finish_reason", finish},
                                                {"stop_reason", nullptr}}})},
                  {"service_tier", nullptr},
                  {"system_fingerprint", nullptr},
                  {"usage", usage},
                  {"prompt_logprobs", nullptr},
                  {"kv_transfer_params", nullptr}}
          .dump();
    case Api::kCompletions:
      return Json{{"id", id_},
                  {"object", "text_completion"},
                  {"created", created_},
                  {"model", model_},
                  {"choices", Json::array({Json{{"index", 0},
                                                {"text", text_},
                                                {"logprobs", nullptr},
                                                {"finish_reason", finish},
                                                {"stop_reason", nullptr},
                                                {"prompt_logprobs", nullptr}}})},
                  {"service_tier", nullptr},
                  {"system_fingerprint", nullptr},
                  {"usage", usage},
                  {"kv_transfer_params", nullptr}}
          .dump();
    case Api::kMessages:
      return Json{{"id", id_},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"content", Json::array({Json{{"type", "text"}, {"text", text_}}})},
                  {"model", model_},
                  {"stop_reason", anthropic_stop_reason(finish_.value_or(FinishReason::kStop))},
                  {"stop_sequence", nullptr},
                  {"usage", anthropic_usage(prompt_tokens_, cached_tokens_, prompt_tokens_details_,
                                            completion_tokens_)}}
          .dump();
    case Api::kResponses: {
      const bool truncated = finish_ == FinishReason::kLength;
      return Json{
          {"id", id_},
          {"object", "response"},
          {"created_at", created_},
          {"status", truncated ? "incomplete" : "completed"},
          {"incomplete_details", truncated ? Json{{"reason", "max_output_tokens"}} : Json(nullptr)},
          {"model", model_},
          {"output",
           Json::array({Json{{"id", item_id_},
                             {"type", "message"},
                             {"status", "completed"},
                             {"role", "assistant"},
                             {"content", Json::array({Json{{"type", "output_text"},
                                                           {"text", text_},
                                                           {"annotations", Json::array()}}})}}})},
          {"usage",
           {{"input_tokens", prompt_tokens_},
            {"input_tokens_details", {{"cached_tokens", cached_tokens_}}},
            {"output_tokens", completion_tokens_},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", prompt_tokens_ + completion_tokens_}}}}
          .dump();
    }
    case Api::kCountTokens:
      break;
  }
  return "{}";
}

std::string openai_error_body(int status, std::string_view message) {
  return openai_error_body(status, message, error_type(status));
}

std::string openai_error_body(int status, std::string_view message, std::string_view type) {
  return Json{
      {"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}}}}
      .dump();
}

std::string anthropic_error_body(int status, std::string_view message) {
  return Json{{"type", "error"},
              {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}}
      .dump();
}

std::string error_body(Api api, int status, std::string_view message) {
  return is_anthropic(api) ? anthropic_error_body(status, message)
                           : openai_error_body(status, message);
}

std::string count_tokens_body(std::int32_t input_tokens) {
  return Json{{"input_tokens", input_tokens}}.dump();
}

}  // namespace lmwarden::sim
