// Per-request token usage, read from the response bytes as they are relayed.
//
// The relay hands every chunk to feed() right after (or before) writing it to
// the client, exactly as received: chunk boundaries may fall anywhere, inside
// "data:", inside a JSON string, inside a UTF-8 sequence. The tap never holds
// the stream back; it only looks.
//
// What it reads (DESIGN §7), whatever the route:
//   OpenAI JSON      usage.prompt_tokens, .completion_tokens,
//                    .prompt_tokens_details.cached_tokens
//   OpenAI SSE       the same in the final chunk (present only when the request
//                    set stream_options.include_usage), then "data: [DONE]"
//   Anthropic JSON   usage.input_tokens, .cache_read_input_tokens,
//                    .cache_creation_input_tokens, .output_tokens
//   Anthropic SSE    message_start → message.usage; message_delta → usage
//   Responses API    usage / response.usage with input_tokens_details.cached_tokens
//
// Cost. Event streams: whole events that do not mention "usage" (content
// deltas: nearly all of a stream) are passed over by one search for the key per
// chunk and a look back from it (or from the chunk's end) for the last blank
// line; their lines are never found. Lines are found with memchr only in the
// event that mentions the key and in an event cut by a chunk's end. An event
// whose data lies within one chunk is inspected in place, and only events whose
// data contains the key are parsed (simdjson). A line split across chunks is
// carried over in a buffer the size of the line. JSON bodies are copied aside
// and read once at finish(), since the usage object sits near the end of a
// body whose start may be megabytes earlier: the body is walked back from its
// end to the root's usage field, and only that object is parsed
// (merge_body_usage). Of a body longer than 2 × kJsonTailBytes only the last
// kJsonTailBytes or more are kept, and read the same way (merge_tail_usage).
//
// Not thread-safe: one tap per request, used by the task relaying it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "telemetry/usage_json.h"

namespace lmwarden::telemetry {

struct RequestUsage {
  std::uint64_t prompt_tokens = 0;  // all prompt tokens: cached + computed
  std::uint64_t cached_tokens = 0;  // prompt tokens served from the prefix cache (<= prompt)
  std::uint64_t completion_tokens = 0;
  // A usage report was read. Cache use counts as measured whenever usage is
  // present (vLLM omits cached_tokens when it is 0); a request without usage
  // has nothing measured and its prompt, if known elsewhere, counts as computed.
  bool cache_measured = false;
  // The report named the cached count explicitly. False with cache_measured
  // true on every request usually means vLLM runs without
  // --enable-prompt-tokens-details: worth telling the operator.
  bool cached_reported = false;

  std::uint64_t computed_tokens() const noexcept { return prompt_tokens - cached_tokens; }
  friend bool operator==(const RequestUsage&, const RequestUsage&) = default;
};

// How the three dialects' fields become one RequestUsage:
//   prompt_tokens present   → OpenAI: prompt = prompt_tokens, cached = details.cached_tokens
//   input_tokens_details    → Responses: prompt = input_tokens, cached = its cached_tokens
//   otherwise               → Anthropic: prompt = input + cache_read + cache_creation,
//                             cached = cache_read (vLLM: input_tokens = prompt − cached)
RequestUsage to_request_usage(const UsageFields& fields) noexcept;

enum class BodyFormat : std::uint8_t {
  kAuto,         // '{' first → JSON, anything else → event stream
  kJson,         // Content-Type: application/json
  kEventStream,  // Content-Type: text/event-stream
};

// Largest single SSE event that is read; larger ones are passed over
// (counted by oversized()) so one reply cannot make the tap hold more.
inline constexpr std::size_t kMaxDocumentBytes = 16u << 20;
// How much of a JSON body's end is sure to be kept: a root usage field that
// ends further than this from the body's end may go unread (counted by
// oversized()). vLLM writes usage after the choices, and after it only short
// fields (prompt_logprobs, when asked for, is the exception). The tap holds
// at most twice this of a body.
inline constexpr std::size_t kJsonTailBytes = 512u << 10;

class UsageTap {
 public:
  explicit UsageTap(BodyFormat format = BodyFormat::kAuto) noexcept : format_(format) {}

  // Also reads the id of the Responses response the reply carries: a body's
  // root `id` (when the body is held whole), or an event's `response.id`.
  void read_response_id() noexcept { want_response_id_ = true; }

  void feed(std::string_view chunk) noexcept;
  // End of the response body: reads a JSON body and any unterminated event.
  void finish() noexcept;

  // Usage read so far (complete after finish()).
  RequestUsage usage() const noexcept { return to_request_usage(fields_); }
  const UsageFields& fields() const noexcept { return fields_; }
  // With read_response_id(): the id read so far ("" when none).
  std::string_view response_id() const noexcept { return response_id_; }
  BodyFormat format() const noexcept { return format_; }
  std::size_t oversized() const noexcept { return oversized_; }
  // Bytes the tap holds storage for (its copy of a JSON body, or of an event).
  std::size_t held_capacity() const noexcept { return document_.capacity() + carry_.capacity(); }

 private:
  void feed_event_stream(std::string_view chunk);
  void on_line(std::string_view line, bool in_chunk);
  void dispatch_event();
  void inspect(std::string_view data);

  BodyFormat format_;
  bool finished_ = false;
  std::size_t oversized_ = 0;
  UsageFields fields_;
  bool want_response_id_ = false;
  std::string response_id_;

  // JSON body: the bytes so far, or its last ones (document_cut_). Event
  // stream: the current event's data.
  PaddedBuffer document_;
  bool document_overflow_ = false;  // event stream: the event is too long to read
  bool document_cut_ = false;       // JSON: the body's start is no longer held
  // Event stream: the start of a line whose end has not arrived yet.
  std::string carry_;
  bool carry_overflow_ = false;
  // The current event's only data line, when it lies inside the chunk being
  // fed: inspected in place, copied into document_ only if the event is still
  // open when feed() returns.
  std::string_view data_in_chunk_;
  std::size_t data_lines_ = 0;
};

}  // namespace lmwarden::telemetry
