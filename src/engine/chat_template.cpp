#include "engine/chat_template.h"

#include <cstddef>
#include <string_view>

namespace lmwarden::engine {
namespace {

constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>\n";

constexpr std::string_view kToolsPreamble =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsPostamble =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";

void open_turn(std::string& out, std::string_view role) {
  out += kStart;
  out += role;
  out += '\n';
}

}  // namespace

std::string render_chat(const ChatPrompt& prompt) {
  std::string out;
  const auto& msgs = prompt.messages;
  std::size_t i = 0;

  // Opening system turn: the leading system messages, then the tools.
  std::string system;
  while (i < msgs.size() && msgs[i].role == "system") {
    if (!system.empty()) system += "\n\n";
    system += msgs[i].content;
    ++i;
  }
  if (!prompt.tools.empty()) {
    if (!system.empty()) system += "\n\n";
    system += kToolsPreamble;
    for (const auto& tool : prompt.tools) {
      system += '\n';
      system += tool;
    }
    system += kToolsPostamble;
  }
  if (!system.empty()) {
    open_turn(out, "system");
    out += system;
    out += kEnd;
  }

  for (; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "tool") {
      const bool first = i == 0 || msgs[i - 1].role != "tool";
      const bool last = i + 1 == msgs.size() || msgs[i + 1].role != "tool";
      if (first)
        open_turn(out, "user");
      else
        out += '\n';
      out += "<tool_response>\n";
      out += m.content;
      out += "\n</tool_response>";
      if (last) out += kEnd;
      continue;
    }
    open_turn(out, m.role);
    out += m.content;
    for (const auto& call : m.tool_calls) {
      if (!out.ends_with('\n')) out += '\n';
      out += "<tool_call>\n";
      out += call;
      out += "\n</tool_call>";
    }
    out += kEnd;
  }
  if (prompt.add_generation_prompt) open_turn(out, "assistant");
  return out;
}

}  // namespace lmwarden::engine
