#include "workload/wire.h"

#include <fmt/format.h>

#include "common/hash.h"

namespace lmwarden::workload {
namespace {

// A JSON array of the conversation's messages, each written by `item` (which
// returns false to leave one out), with the commas between them.
template <typename Item>
void append_messages(const Conversation& c, std::string& out, Item&& item) {
  out += '[';
  for (const auto& m : c.messages()) {
    const std::size_t before = out.size();
    if (out.back() != '[') out += ',';
    if (!item(m, out)) out.resize(before);
  }
  out += ']';
}

void append_openai_messages(const Conversation& c, std::string& out) {
  append_messages(c, out, [](const engine::ChatMessage& m, std::string& o) {
    o += R"({"role":)";
    o += json_quote(m.role);
    o += R"(,"content":)";
    o += json_quote(m.content);
    o += '}';
    return true;
  });
}

void append_anthropic_messages(const Conversation& c, std::string& out) {
  append_messages(c, out, [](const engine::ChatMessage& m, std::string& o) {
    if (m.role == "system") return false;  // top-level `system` in this dialect
    o += R"({"role":)";
    o += json_quote(m.role);
    o += R"(,"content":[{"type":"text","text":)";
    o += json_quote(m.content);
    o += "}]}";
    return true;
  });
}

// Responses input items as Codex sends them: the system prompt as a
// `developer` message, user text as `input_text`, earlier replies as
// `output_text`.
void append_responses_input(const Conversation& c, std::string& out) {
  append_messages(c, out, [](const engine::ChatMessage& m, std::string& o) {
    o += R"({"type":"message","role":)";
    o += json_quote(m.role == "system" ? std::string_view("developer") : std::string_view(m.role));
    o += m.role == "assistant" ? R"(,"content":[{"type":"output_text","text":)"
                               : R"(,"content":[{"type":"input_text","text":)";
    o += json_quote(m.content);
    o += "}]}";
    return true;
  });
}

// Room for a request's body: the system prompt and up to 8 KiB per turn.
std::size_t body_size_hint(const Session& s) {
  return s.system_prompt->size() + 8 * 1024 * static_cast<std::size_t>(s.turns());
}

WireRequest build_openai(const Session& s, const Conversation& conversation, std::string_view model,
                         bool ids) {
  WireRequest req;
  req.target = "/v1/chat/completions";
  if (ids) req.headers.emplace_back("session-id", s.id);
  req.headers.emplace_back("originator", "codex_cli_rs");
  std::string& body = req.body;
  body.reserve(body_size_hint(s));
  body += R"({"model":)";
  body += json_quote(model);
  body += R"(,"messages":)";
  append_openai_messages(conversation, body);
  body += fmt::format(R"(,"max_tokens":{},"stream":true,"stream_options":{{"include_usage":true}})",
                      s.max_output_tokens);
  if (ids) body += R"(,"prompt_cache_key":)" + json_quote(s.id);
  body += '}';
  return req;
}

WireRequest build_responses(const Session& s, const Conversation& conversation,
                            std::string_view model, bool ids) {
  WireRequest req;
  req.target = "/v1/responses";
  if (ids) req.headers = {{"session-id", s.id}, {"thread-id", s.id}};
  req.headers.emplace_back("originator", "codex_exec");
  req.headers.emplace_back("accept", "text/event-stream");
  std::string& body = req.body;
  body.reserve(body_size_hint(s));
  body += R"({"model":)";
  body += json_quote(model);
  body += R"(,"stream":true,"input":)";
  append_responses_input(conversation, body);
  body += R"(,"tools":[],"tool_choice":"auto","parallel_tool_calls":false,"store":false,)"
          R"("include":[],)";
  if (ids) body += R"("prompt_cache_key":)" + json_quote(s.id) + ",";
  body += fmt::format(R"("max_output_tokens":{}}})", s.max_output_tokens);
  return req;
}

// Claude Code 2.x: device and account ids are stable per user; here one
// synthetic user per session index keeps them deterministic.
WireRequest build_anthropic(const Session& s, const Conversation& conversation,
                            std::string_view model, bool ids) {
  WireRequest req;
  req.target = "/v1/messages?beta=true";
  if (ids) req.headers.emplace_back("X-Claude-Code-Session-Id", s.id);
  req.headers.emplace_back("anthropic-version", "2023-06-01");
  req.headers.emplace_back("x-app", "cli");
  std::string& body = req.body;
  body.reserve(body_size_hint(s));
  body += R"({"model":)";
  body += json_quote(model);
  body += R"(,"max_tokens":)";
  body += std::to_string(s.max_output_tokens);
  if (!s.system_prompt->empty()) {
    body += R"(,"system":[{"type":"text","text":)";
    body += json_quote(*s.system_prompt);
    body += "}]";
  }
  body += R"(,"messages":)";
  append_anthropic_messages(conversation, body);
  if (ids) {
    const std::string device =
        fmt::format("{:016x}{:016x}{:016x}{:016x}", stable_hash(s.id), stable_hash(s.id + "/1"),
                    stable_hash(s.id + "/2"), stable_hash(s.id + "/3"));
    const std::string account = uuid_from(stable_hash(s.id + "/account"), stable_hash(s.id + "/a"));
    const std::string user_id = fmt::format(
        R"({{"device_id":"{}","account_uuid":"{}","session_id":"{}"}})", device, account, s.id);
    body += R"(,"metadata":{"user_id":)";
    body += json_quote(user_id);
    body += '}';
  }
  body += R"(,"stream":true})";
  return req;
}

}  // namespace

std::string_view to_string(Dialect d) noexcept {
  switch (d) {
    case Dialect::kOpenAi:
      return "openai";
    case Dialect::kAnthropic:
      return "anthropic";
    case Dialect::kResponses:
      return "responses";
  }
  return "openai";
}

std::optional<Dialect> parse_dialect(std::string_view name) noexcept {
  for (const Dialect d : {Dialect::kOpenAi, Dialect::kAnthropic, Dialect::kResponses}) {
    if (name == to_string(d)) return d;
  }
  return std::nullopt;
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

WireRequest build_request(Dialect dialect, const Conversation& conversation, std::string_view model,
                          bool session_ids) {
  const Session& s = conversation.session();
  WireRequest req;
  switch (dialect) {
    case Dialect::kOpenAi:
      req = build_openai(s, conversation, model, session_ids);
      break;
    case Dialect::kAnthropic:
      req = build_anthropic(s, conversation, model, session_ids);
      break;
    case Dialect::kResponses:
      req = build_responses(s, conversation, model, session_ids);
      break;
  }
  return req;
}

}  // namespace lmwarden::workload
