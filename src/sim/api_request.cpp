#include "sim/api_request.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <string>

#include "engine/chat_template.h"
#include "engine/tokenizer.h"

namespace lmwarden::sim {
namespace {

using engine::ChatMessage;
using engine::ChatPrompt;
using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

// What an image or other media part becomes in the prompt: Qwen-VL's markers.
constexpr std::string_view kMediaPlaceholder = "<|vision_start|><|image_pad|><|vision_end|>";

std::string_view str_or(element e, std::string_view key, std::string_view fallback = {}) {
  std::string_view v;
  if (e[key].get(v) == simdjson::SUCCESS) return v;
  return fallback;
}

std::string json_text(element e) {
  return simdjson::minify(e);
}

// e[key], or a JSON null when e has no such field.
element field_or_null(element e, std::string_view key) {
  element v;
  if (e[key].get(v) == simdjson::SUCCESS) return v;
  static simdjson::dom::parser null_parser;
  static const element null_value = null_parser.parse(std::string_view("null")).value();
  return null_value;
}

// {"name": ..., "arguments": ...} as Qwen renders a call; `arguments` is a
// JSON text already (OpenAI sends it as a string) or a JSON value.
std::string tool_call_text(std::string_view name, element arguments) {
  std::string args;
  std::string_view as_string;
  if (arguments.get(as_string) == simdjson::SUCCESS)
    args = as_string;
  else
    args = json_text(arguments);
  if (args.empty()) args = "{}";
  std::string out = "{\"name\": \"";
  out += name;
  out += "\", \"arguments\": ";
  out += args;
  out += '}';
  return out;
}

// OpenAI-style function tool from its parts.
std::string function_tool_text(element name, element description, element parameters) {
  std::string out = "{\"type\": \"function\", \"function\": {\"name\": ";
  out += json_text(name);
  if (description.type() != simdjson::dom::element_type::NULL_VALUE) {
    out += ", \"description\": ";
    out += json_text(description);
  }
  out += ", \"parameters\": ";
  out += json_text(parameters);
  out += "}}";
  return out;
}

// Text of a content value: a string, or an array of parts of which the text
// ones are joined and media become placeholders. Tool blocks are handled by
// the callers that understand them.
std::string content_text(element content) {
  std::string_view s;
  if (content.get(s) == simdjson::SUCCESS) return std::string(s);
  array parts;
  if (content.get(parts) != simdjson::SUCCESS) return {};
  std::string out;
  for (element part : parts) {
    if (part.get(s) == simdjson::SUCCESS) {
      out += s;
      continue;
    }
    const std::string_view type = str_or(part, "type");
    if (type == "text" || type == "input_text" || type == "output_text") {
      out += str_or(part, "text");
    } else if (type == "refusal") {
      out += str_or(part, "refusal");
    } else if (type == "image_url" || type == "image" || type == "input_image" ||
               type == "input_audio" || type == "document" || type == "input_file") {
      out += kMediaPlaceholder;
    }
    // thinking / redacted_thinking: Qwen3's template drops past reasoning.
  }
  return out;
}

std::string_view normalise_role(std::string_view role) {
  // The Responses API's developer role is the system role of chat models.
  return role == "developer" ? "system" : role;
}

// OpenAI chat: messages with string or part contents, tool_calls, tool role.
bool parse_chat_messages(element doc, ChatPrompt& prompt, std::string& error) {
  array messages;
  if (doc["messages"].get(messages) != simdjson::SUCCESS) {
    error = "'messages' must be an array";
    return false;
  }
  for (element m : messages) {
    ChatMessage msg;
    msg.role = normalise_role(str_or(m, "role", "user"));
    element content;
    if (m["content"].get(content) == simdjson::SUCCESS) msg.content = content_text(content);
    array calls;
    if (m["tool_calls"].get(calls) == simdjson::SUCCESS) {
      for (element call : calls) {
        element fn;
        if (call["function"].get(fn) != simdjson::SUCCESS) continue;
        msg.tool_calls.push_back(
            tool_call_text(str_or(fn, "name"), field_or_null(fn, "arguments")));
      }
    }
    prompt.messages.push_back(std::move(msg));
  }
  array tools;
  if (doc["tools"].get(tools) == simdjson::SUCCESS) {
    for (element t : tools) prompt.tools.push_back(json_text(t));
  }
  return true;
}

// Anthropic: top-level system (string or text blocks), messages whose blocks
// may be tool_use (assistant) or tool_result (user), tools with input_schema.
// Converted as vLLM converts them to a chat request.
bool parse_anthropic(element doc, ChatPrompt& prompt, std::string& error) {
  element system;
  if (doc["system"].get(system) == simdjson::SUCCESS) {
    std::string text = content_text(system);
    if (!text.empty()) prompt.messages.push_back({.role = "system", .content = std::move(text)});
  }
  array messages;
  if (doc["messages"].get(messages) != simdjson::SUCCESS) {
    error = "messages: Field required";
    return false;
  }
  for (element m : messages) {
    const std::string role(str_or(m, "role", "user"));
    array blocks;
    if (m["content"].get(blocks) != simdjson::SUCCESS) {
      prompt.messages.push_back(
          {.role = role, .content = content_text(field_or_null(m, "content"))});
      continue;
    }
    ChatMessage msg{.role = role};
    for (element block : blocks) {
      const std::string_view type = str_or(block, "type");
      if (type == "tool_use") {
        msg.tool_calls.push_back(
            tool_call_text(str_or(block, "name"), field_or_null(block, "input")));
      } else if (type == "tool_result") {
        element result;
        std::string text;
        if (block["content"].get(result) == simdjson::SUCCESS) text = content_text(result);
        prompt.messages.push_back({.role = "tool", .content = std::move(text)});
      } else {
        std::string_view text;
        if (type == "text" && block["text"].get(text) == simdjson::SUCCESS)
          msg.content += text;
        else if (type == "image" || type == "document")
          msg.content += kMediaPlaceholder;
      }
    }
    if (!msg.content.empty() || !msg.tool_calls.empty()) prompt.messages.push_back(std::move(msg));
  }
  array tools;
  if (doc["tools"].get(tools) == simdjson::SUCCESS) {
    for (element t : tools) {
      object o;
      if (t.get(o) != simdjson::SUCCESS) continue;
      element schema;
      if (o["input_schema"].get(schema) == simdjson::SUCCESS) {
        prompt.tools.push_back(
            function_tool_text(field_or_null(t, "name"), field_or_null(t, "description"), schema));
      } else {
        prompt.tools.push_back(json_text(t));  // server tools (web_search, …)
      }
    }
  }
  return true;
}

// Responses: instructions, input (string or items: messages, function calls
// and their outputs), flat function tools.
bool parse_responses(element doc, ChatPrompt& prompt, std::size_t& instruction_messages,
                     std::string& error) {
  std::string_view instructions;
  instruction_messages = 0;
  if (doc["instructions"].get(instructions) == simdjson::SUCCESS && !instructions.empty()) {
    prompt.messages.push_back({.role = "system", .content = std::string(instructions)});
    instruction_messages = 1;
  }
  element input;
  if (doc["input"].get(input) != simdjson::SUCCESS) {
    error = "'input' is required";
    return false;
  }
  std::string_view text;
  array items;
  if (input.get(text) == simdjson::SUCCESS) {
    prompt.messages.push_back({.role = "user", .content = std::string(text)});
  } else if (input.get(items) == simdjson::SUCCESS) {
    for (element item : items) {
      const std::string_view type = str_or(item, "type", "message");
      if (type == "message") {
        element content;
        std::string body;
        if (item["content"].get(content) == simdjson::SUCCESS) body = content_text(content);
        prompt.messages.push_back(
            {.role = std::string(normalise_role(str_or(item, "role", "user"))), .content = body});
      } else if (type == "function_call") {
        const std::string call =
            tool_call_text(str_or(item, "name"), field_or_null(item, "arguments"));
        // Parallel calls of one turn share the assistant message.
        if (prompt.messages.empty() || prompt.messages.back().role != "assistant") {
          prompt.messages.push_back({.role = "assistant"});
        }
        prompt.messages.back().tool_calls.push_back(call);
      } else if (type == "function_call_output") {
        element output;
        std::string out;
        if (item["output"].get(output) == simdjson::SUCCESS) out = content_text(output);
        prompt.messages.push_back({.role = "tool", .content = std::move(out)});
      }
      // reasoning items: dropped, as the template drops past reasoning.
    }
  } else {
    error = "'input' must be a string or an array";
    return false;
  }
  array tools;
  if (doc["tools"].get(tools) == simdjson::SUCCESS) {
    for (element t : tools) {
      object o;
      element params;
      if (t.get(o) == simdjson::SUCCESS && str_or(t, "type") == "function" &&
          o["parameters"].get(params) == simdjson::SUCCESS) {
        prompt.tools.push_back(
            function_tool_text(field_or_null(t, "name"), field_or_null(t, "description"), params));
      } else {
        prompt.tools.push_back(json_text(t));
      }
    }
  }
  return true;
}

// The value of the last `key` of object `e`, the one Python's json (vLLM's
// reader) keeps when a key is repeated; simdjson's lookup finds the first.
simdjson::simdjson_result<element> last_field(element e, std::string_view key) {
  simdjson::simdjson_result<element> found(simdjson::NO_SUCH_FIELD);
  simdjson::dom::object object;
  if (e.get(object) != simdjson::SUCCESS) return found;
  for (const simdjson::dom::key_value_pair field : object)
    if (field.key == key) found = simdjson::simdjson_result<element>(element(field.value));
  return found;
}

// previous_response_id and store, typed as vLLM's request model types them
// (Optional[str], Optional[bool] = True): anything else is a 400 there too.
// Read by their last occurrence, as vLLM and the warden read them.
bool read_response_chaining(element doc, ApiRequest& req, std::string& error) {
  const auto previous = last_field(doc, "previous_response_id");
  if (previous.error() != simdjson::NO_SUCH_FIELD && !previous.is_null()) {
    std::string_view id;
    if (previous.get(id) != simdjson::SUCCESS) {
      error = fmt::format("'previous_response_id' must be a string, got {}",
                          simdjson::minify(previous.value_unsafe()));
      return false;
    }
    req.previous_response_id = std::string(id);
  }
  const auto store = last_field(doc, "store");
  if (store.error() != simdjson::NO_SUCH_FIELD) {
    if (store.is_null()) {
      req.store = false;
    } else if (store.get(req.store) != simdjson::SUCCESS) {
      error =
          fmt::format("'store' must be a boolean, got {}", simdjson::minify(store.value_unsafe()));
      return false;
    }
  }
  return true;
}

bool parse_completion_prompt(element doc, ApiRequest& req, std::string& error) {
  element prompt;
  if (doc["prompt"].get(prompt) != simdjson::SUCCESS) {
    error = "'prompt' is required";
    return false;
  }
  std::string_view text;
  if (prompt.get(text) == simdjson::SUCCESS) {
    req.prompt_text = std::string(text);
    return true;
  }
  array list;
  if (prompt.get(list) != simdjson::SUCCESS || list.size() == 0) {
    error = "'prompt' must be a string, a list of one string, or a list of token ids";
    return false;
  }
  element first = list.at(0).value_unsafe();
  if (first.get(text) == simdjson::SUCCESS || first.is_array()) {
    if (list.size() != 1) {
      error = "the simulator serves one prompt per request";
      return false;
    }
    if (first.get(text) == simdjson::SUCCESS) {
      req.prompt_text = std::string(text);
      return true;
    }
    list = first.get_array().value_unsafe();
  }
  std::vector<engine::TokenId> ids;
  for (element e : list) {
    std::uint64_t id = 0;
    if (e.get(id) != simdjson::SUCCESS || id >= engine::kVocabSize) {
      error = "'prompt' token ids must be integers below the vocabulary size";
      return false;
    }
    ids.push_back(static_cast<engine::TokenId>(id));
  }
  req.prompt_tokens = std::move(ids);
  return true;
}

// An output cap: 0 when absent or null (the context's room), else a JSON
// integer of at least 1; false with `error` for anything else. vLLM refuses
// 0, -1 and 1.5 as well; this is stricter than its parsing on "5" and true.
bool read_max_tokens(element doc, std::string_view key, std::int32_t& out, std::string& error) {
  out = 0;
  const auto field = doc[key];
  if (field.error() == simdjson::NO_SUCH_FIELD || field.is_null()) return true;
  std::int64_t v = 0;
  if (field.get(v) != simdjson::SUCCESS || v < 1) {
    error = fmt::format("'{}' must be a whole number of at least 1, got {}", key,
                        simdjson::minify(field.value_unsafe()));
    return false;
  }
  out = v > INT32_MAX ? INT32_MAX : static_cast<std::int32_t>(v);
  return true;
}

}  // namespace

ParseResult parse_api_request(Api api, std::string_view body, std::size_t body_capacity) {
  ParseResult out;
  // One parser per thread: its buffers are reused from request to request.
  thread_local simdjson::dom::parser parser;
  element doc;
  const bool padded = body_capacity >= body.size() + simdjson::SIMDJSON_PADDING;
  if (auto err = parser.parse(body.data(), body.size(), /*realloc_if_needed=*/!padded).get(doc);
      err) {
    out.error = std::string("malformed JSON body: ") + simdjson::error_message(err);
    return out;
  }
  if (!doc.is_object()) {
    out.error = "the request body must be a JSON object";
    return out;
  }

  ApiRequest req;
  req.api = api;
  req.model = std::string(str_or(doc, "model"));
  bool flag = false;
  if (doc["stream"].get(flag) == simdjson::SUCCESS) req.stream = flag;
  if (doc["stream_options"]["include_usage"].get(flag) == simdjson::SUCCESS)
    req.include_usage = flag;

  ChatPrompt prompt;
  bool ok = true;
  switch (api) {
    case Api::kChatCompletions:
      ok = read_max_tokens(doc, "max_completion_tokens", req.max_tokens, out.error);
      if (ok && req.max_tokens == 0)
        ok = read_max_tokens(doc, "max_tokens", req.max_tokens, out.error);
      ok = ok && parse_chat_messages(doc, prompt, out.error);
      break;
    case Api::kMessages:
      // The Messages API requires max_tokens (vLLM's too).
      ok = read_max_tokens(doc, "max_tokens", req.max_tokens, out.error);
      if (ok && req.max_tokens == 0) {
        out.error = "'max_tokens' is required";
        ok = false;
      }
      ok = ok && parse_anthropic(doc, prompt, out.error);
      break;
    case Api::kCountTokens:
      ok = parse_anthropic(doc, prompt, out.error);
      break;
    case Api::kResponses:
      ok = read_max_tokens(doc, "max_output_tokens", req.max_tokens, out.error);
      ok = ok && read_response_chaining(doc, req, out.error);
      ok = ok && parse_responses(doc, prompt, req.instruction_messages, out.error);
      break;
    case Api::kCompletions:
      // The OpenAI completions API defaults max_tokens to 16, and so does vLLM.
      ok = read_max_tokens(doc, "max_tokens", req.max_tokens, out.error);
      if (ok && doc["max_tokens"].error() == simdjson::NO_SUCH_FIELD) req.max_tokens = 16;
      ok = ok && parse_completion_prompt(doc, req, out.error);
      break;
  }
  if (!ok) return out;
  if (api != Api::kCompletions) req.prompt_text = engine::render_chat(prompt);
  if (api == Api::kResponses) req.chat = std::move(prompt);
  out.request = std::move(req);
  return out;
}

void render_with_history(ApiRequest& request, const std::vector<ChatMessage>& history) {
  const auto& own = request.chat.messages;
  const auto input = own.begin() + static_cast<std::ptrdiff_t>(request.instruction_messages);
  ChatPrompt prompt{.tools = request.chat.tools,
                    .add_generation_prompt = request.chat.add_generation_prompt};
  prompt.messages.reserve(own.size() + history.size());
  prompt.messages.insert(prompt.messages.end(), own.begin(), input);
  prompt.messages.insert(prompt.messages.end(), history.begin(), history.end());
  prompt.messages.insert(prompt.messages.end(), input, own.end());
  request.prompt_text = engine::render_chat(prompt);
}

std::vector<engine::TokenId> prompt_token_ids(const ApiRequest& request) {
  if (request.prompt_tokens) return *request.prompt_tokens;
  return engine::tokenize(request.prompt_text);
}

}  // namespace lmwarden::sim
