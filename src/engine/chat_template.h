// The one chat template of the simulated model (Qwen3's ChatML layout). Every
// API dialect (OpenAI chat, Anthropic messages, Responses) is first reduced to
// this neutral form by the server, so the same conversation yields the same
// tokens whichever route carries it — as on a real vLLM, where the model's
// template is applied to whatever the route parsed.
#pragma once

#include <string>
#include <vector>

namespace lmwarden::engine {

struct ChatMessage {
  // "system", "user", "assistant" or "tool" (a tool's result).
  std::string role;
  std::string content;
  // Calls made by an assistant turn, each a JSON object text
  // `{"name": ..., "arguments": ...}`, rendered after the content.
  std::vector<std::string> tool_calls;
};

struct ChatPrompt {
  std::vector<ChatMessage> messages;
  // Tool definitions, each as JSON text, rendered into the system turn.
  std::vector<std::string> tools;
  bool add_generation_prompt = true;
};

// Renders like Qwen3's template: a leading system turn (merging the system
// messages that open the conversation, plus the tool block), then one
// `<|im_start|>role … <|im_end|>` turn per message; consecutive tool results
// share one user turn of `<tool_response>` blocks; and an open assistant turn
// when add_generation_prompt is set.
std::string render_chat(const ChatPrompt& prompt);

}  // namespace lmwarden::engine
