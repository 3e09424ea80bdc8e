// Response bodies as vLLM's OpenAI- and Anthropic-compatible servers send them,
// shared by the usage tap and stripper tests.
#pragma once

#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace lmwarden::telemetry::samples {

// A stream with stream_options.include_usage: content deltas (one with text
// that mentions usage and a multi-byte character), then the usage-only chunk.
inline constexpr std::string_view kOpenAiContent =
    "data: "
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":"
    "null,"
    "\"finish_reason\":null}]}\n\n"
    "data: "
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"caf\xc3\xa9 \\\"usage\\\": "
    "{\\\"prompt_tokens\\\": 5} "
    "\xe2\x9c\x93\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
    "data: "
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"logprobs\":null,\"finish_reason\":"
    "\"stop\","
    "\"stop_reason\":null}]}\n\n";
inline constexpr std::string_view kOpenAiUsageChunk =
    "data: "
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
    "\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"total_tokens\":1250,\"completion_tokens\":"
    "50,"
    "\"prompt_tokens_details\":{\"cached_tokens\":1024}}}\n\n";
inline constexpr std::string_view kDone = "data: [DONE]\n\n";

inline std::string openai_stream() {
  return std::string(kOpenAiContent) + std::string(kOpenAiUsageChunk) + std::string(kDone);
}
inline std::string openai_stream_without_usage() {
  return std::string(kOpenAiContent) + std::string(kDone);
}

inline constexpr std::string_view kOpenAiJson =
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"m\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"The "
    "\\\"usage\\\": "
    "{\\\"prompt_tokens\\\": 5} trick \xc3\xa9\"},\"finish_reason\":\"stop\"}],"
    "\"usage\":{\"prompt_tokens\":300,\"total_tokens\":310,\"completion_tokens\":10,"
    "\"prompt_tokens_details\":null},\"prompt_logprobs\":null,\"kv_transfer_params\":null}";

inline constexpr std::string_view kAnthropicStream =
    "event: message_start\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\","
    "\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"stop_sequence\":"
    "null,"
    "\"usage\":{\"input_tokens\":176,\"cache_read_input_tokens\":1024,\"output_tokens\":0}}}\n\n"
    "event: content_block_start\n"
    "data: "
    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":"
    "\"\"}}\n\n"
    "event: ping\n"
    "data: {\"type\": \"ping\"}\n\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
    "\"text\":\"Hello \xe2\x9c\x93\"}}\n\n"
    "event: content_block_stop\n"
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
    "event: message_delta\n"
    "data: "
    "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},"
    "\"usage\":{\"output_tokens\":15}}\n\n"
    "event: message_stop\n"
    "data: {\"type\":\"message_stop\"}\n\n";

inline constexpr std::string_view kAnthropicJson =
    "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
    "\"text\":\"hi\"}],\"model\":\"m\",\"stop_reason\":\"end_turn\",\"stop_sequence\":null,"
    "\"usage\":{\"input_tokens\":100,\"cache_read_input_tokens\":400,\"output_tokens\":7}}";

inline constexpr std::string_view kResponsesStream =
    "event: response.created\n"
    "data: "
    "{\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\","
    "\"usage\":null}}\n\n"
    "event: response.output_text.delta\n"
    "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"delta\":\"Hi\"}\n\n"
    "event: response.completed\n"
    "data: "
    "{\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\","
    "\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi\"}]}],"
    "\"usage\":{\"input_tokens\":900,\"input_tokens_details\":{\"cached_tokens\":512},"
    "\"output_tokens\":20,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":920}}"
    "}\n\n";

inline constexpr std::string_view kResponsesJson =
    "{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"output\":[],"
    "\"usage\":{\"input_tokens\":64,\"input_tokens_details\":{\"cached_tokens\":48},"
    "\"output_tokens\":3,\"total_tokens\":67}}";

// "\n" → "\r\n".
inline std::string with_crlf(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out.push_back('\r');
    out.push_back(c);
  }
  return out;
}

// One piece of a random event stream: an event (or a stray blank line) and
// whether it is a usage-only chunk, the one inject_stream_usage strips.
struct RandomEvent {
  std::string text;
  bool usage_only = false;
};

// 1 to 40 random pieces for the randomized tests of the tap and the stripper:
// usage-only chunks (one or two data lines, counts that change so that which
// event was read shows), content deltas with an escaped "usage" in their text,
// a content delta that also carries usage, Anthropic message_delta events,
// event: lines, comments, stray blank lines, an event cut in two by a blank
// line, and a first data line that looks like a whole object. "\n" line ends.
inline std::vector<RandomEvent> random_events(std::mt19937& rng) {
  std::vector<RandomEvent> events;
  for (int n = 1 + static_cast<int>(rng() % 40); n > 0; --n) {
    switch (rng() % 10) {
      case 0:
        events.push_back(
            {"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":" + std::to_string(rng() % 5000) +
                 ",\"prompt_tokens_details\":{\"cached_tokens\":" + std::to_string(rng() % 100) +
                 "}}}\n\n",
             true});
        break;
      case 1:
        events.push_back(
            {"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":"
             "{\"output_tokens\":" +
             std::to_string(rng() % 900) + "}}\n\n"});
        break;
      case 2:  // a blank line inside: two events, neither a whole object
        events.push_back({"data: {\"choices\":[],\n\ndata: \"usage\":{\"prompt_tokens\":3}}\n\n"});
        break;
      case 3:
        events.push_back({": keep-alive\n\n\n"});
        break;
      case 4:
        events.push_back({"data: {\"choices\":[],\ndata: \"usage\":{\"completion_tokens\":" +
                              std::to_string(rng() % 70) + "}}\n\n",
                          true});
        break;
      case 5:  // a first data line that ends like a whole object
        events.push_back(
            {"data: {\"choices\":[],\"a\":{\"b\":1}\ndata: ,\"usage\":{\"prompt_tokens\":" +
                 std::to_string(rng() % 80) + "}}\n\n",
             true});
        break;
      case 6:  // continuous usage stats: a delta that carries usage too
        events.push_back(
            {"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":"
             "{\"prompt_tokens\":" +
             std::to_string(rng() % 60) + "}}\n\n"});
        break;
      default:
        events.push_back({"data: {\"choices\":[{\"delta\":{\"content\":\"tok " +
                          std::to_string(rng() % 1000) + " \\\"usage\\\" g\"}}]}\n\n"});
        break;
    }
  }
  return events;
}

// `text` cut into random pieces of 1 to 600 bytes (the longest chosen per call).
inline std::vector<std::string_view> random_pieces(std::string_view text, std::mt19937& rng) {
  std::vector<std::string_view> pieces;
  const std::size_t longest = 1 + rng() % 600;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t len = std::min<std::size_t>(1 + rng() % longest, text.size() - pos);
    pieces.push_back(text.substr(pos, len));
    pos += len;
  }
  return pieces;
}

}  // namespace lmwarden::telemetry::samples
