#include "workload/wire.h"

#include <fmt/format.h>

#include "common/hash.h"

namespace lmwarden::workload {
namespace {

void append_openai_messages(const Conversation& c, std::string& out) {
  out += "[";
  bool first = true;
  for (const auto& m : c.messages()) {
    if (!first) out += ',';
    first = false;
    out += R"({"role":)";
    out += json_quote(m.role);
    out += R"(,"content":)";
    out += json_quote(m.content);
    out += '}';
  }
  out += ']';
}

void append_anthropic_messages(const Conversation& c, std::string& out) {
  out += "[";
  bool first = true;
  for (const auto& m : c.messages()) {
    if (m.role == "system") continue;  // top-level `system` in this dialect
    if (!first) out += ',';
    first = false;
    out += R"({"role":)";
    out += json_quote(m.role);
    out += R"(,"content":[{"type":"text","text":)";
    out += json_quote(m.content);
    out += "}]}";
  }
  out += ']';
}

}  // namespace

std::string_view to_string(Dialect d) noexcept {
  return d == Dialect::kOpenAi ? "openai" : "anthropic";
}

std::optional<Dialect> parse_dialect(std::string_view name) noexcept {
  if (name == "openai") return Dialect::kOpenAi;
  if (name == "anthropic") return Dialect::kAnthropic;
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

WireRequest build_request(Dialect dialect, const Conversation& conversation,
                          std::string_view model) {
  const Session& s = conversation.session();
  WireRequest req;
  std::string& body = req.body;
  body.reserve(s.system_prompt->size() + 8 * 1024 * static_cast<std::size_t>(s.turns()));
  if (dialect == Dialect::kOpenAi) {
    req.target = "/v1/chat/completions";
    req.headers = {{"session-id", s.id}, {"originator", "codex_cli_rs"}};
    body += R"({"model":)";
    body += json_quote(model);
    body += R"(,"messages":)";
    append_openai_messages(conversation, body);
    body += fmt::format(
        R"(,"max_tokens":{},"stream":true,"stream_options":{{"include_usage":true}},"prompt_cache_key":{}}})",
        s.max_output_tokens, json_quote(s.id));
    return req;
  }
  // Claude Code 2.x: device and account ids are stable per user; here one
  // synthetic user per session index keeps them deterministic.
  const std::string device =
      fmt::format("{:016x}{:016x}{:016x}{:016x}", stable_hash(s.id), stable_hash(s.id + "/1"),
                  stable_hash(s.id + "/2"), stable_hash(s.id + "/3"));
  const std::string account = uuid_from(stable_hash(s.id + "/account"), stable_hash(s.id + "/a"));
  const std::string user_id = fmt::format(
      R"({{"device_id":"{}","account_uuid":"{}","session_id":"{}"}})", device, account, s.id);
  req.target = "/v1/messages?beta=true";
  req.headers = {
      {"X-Claude-Code-Session-Id", s.id}, {"anthropic-version", "2023-06-01"}, {"x-app", "cli"}};
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
  body += R"(,"metadata":{"user_id":)";
  body += json_quote(user_id);
  body += R"(},"stream":true})";
  return req;
}

}  // namespace lmwarden::workload
