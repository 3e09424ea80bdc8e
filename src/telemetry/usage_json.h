// Reading token usage out of one JSON document of a response, whatever the
// dialect. Shared by the usage tap and the injected-usage stripper.
//
// Usage objects are looked for where the dialects put them:
//   usage             OpenAI chat/completions bodies and stream chunks,
//                     Anthropic message bodies and message_delta events,
//                     Responses API bodies
//   message.usage     Anthropic message_start events
//   response.usage    Responses API response.completed (and friends) events
// and their fields are kept as reported; RequestUsage is computed from them
// once at the end (usage_tap.h), because a stream reports them piecewise
// (Anthropic: input in message_start, output in message_delta).
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lmwarden::telemetry {

struct UsageFields {
  // OpenAI chat/completions
  std::optional<std::uint64_t> prompt_tokens;
  std::optional<std::uint64_t> completion_tokens;
  std::optional<std::uint64_t> prompt_cached_tokens;  // prompt_tokens_details.cached_tokens
  // Anthropic messages and the Responses API
  std::optional<std::uint64_t> input_tokens;
  std::optional<std::uint64_t> output_tokens;
  std::optional<std::uint64_t> cache_read_input_tokens;      // Anthropic
  std::optional<std::uint64_t> cache_creation_input_tokens;  // Anthropic
  std::optional<std::uint64_t>
      input_cached_tokens;  // Responses: input_tokens_details.cached_tokens
  bool seen = false;        // some usage object was read

  // Fields present in `later` replace ours: streams repeat cumulative counts.
  void merge(const UsageFields& later) noexcept;
  friend bool operator==(const UsageFields&, const UsageFields&) = default;
};

// A growable byte buffer that always keeps simdjson's padding allocated past
// its end, so a document in it parses without another copy.
class PaddedBuffer {
 public:
  void clear() noexcept { bytes_.clear(); }
  void append(std::string_view s);
  // Drops all but the last `n` bytes (n <= size()).
  void keep_last(std::size_t n) { bytes_.erase(0, bytes_.size() - n); }
  std::size_t capacity() const noexcept { return bytes_.capacity(); }
  std::size_t size() const noexcept { return bytes_.size(); }
  bool empty() const noexcept { return bytes_.empty(); }
  std::string_view view() const noexcept { return bytes_; }
  simdjson::padded_string_view padded() const noexcept {
    return simdjson::padded_string_view(bytes_.data(), bytes_.size(), bytes_.capacity());
  }

 private:
  std::string bytes_;
};

// Where `text` first contains the key "usage" (quoted), or npos; and whether
// it does: the cheap test a stream's events take before anything is parsed.
std::size_t find_usage_key(std::string_view text) noexcept;
bool mentions_usage(std::string_view text) noexcept;

// For a reader of an event stream that stands at chunk[from], the start of a
// line between events: `end` is the furthest position after a blank line such
// that chunk[from, end) holds no "usage" key, so the events in it (content
// deltas: nearly all of a stream) carry no usage and can be passed over unread;
// `search_again` is where a later call can find something new: just past the
// key's first occurrence, or chunk.size() when there is none (before it, a
// call would find the same key again). One search for the key and one,
// backwards, for the blank line before it. Shared by the usage tap and the
// injected-usage stripper.
struct EventsWithoutUsage {
  std::size_t end = 0;
  std::size_t search_again = 0;
};
EventsWithoutUsage events_without_usage(std::string_view chunk, std::size_t from) noexcept;

// Parses `doc` and merges every usage object in it into `into`. Returns false
// when the document is not a JSON object (nothing merged). With `response_id`,
// also the id of a Responses event's `response` object, when it has one.
bool merge_usage(simdjson::padded_string_view doc, UsageFields& into,
                 std::string* response_id = nullptr) noexcept;

// The root's "id" of a whole Responses body (`"object": "response"`), into
// `id`; false when it has none (or is another dialect's body).
bool read_response_id(simdjson::padded_string_view doc, std::string& id) noexcept;

// Merges the usage of a whole response body (not a stream event): its root's
// "usage" object when it has one, found by walking the body backwards from its
// end and parsing only that object; otherwise as merge_usage(). The body is
// not validated as a whole (the usage object is), and a root "message" or
// "response" wrapper is read only when the root has no usage of its own: the
// three dialects put a body's usage at its root and the wrappers in stream
// events. Returns false when no usage object was parsed and the body is not a
// JSON object. Duplicate keys: the last one counts, as in merge_usage().
bool merge_body_usage(simdjson::padded_string_view doc, UsageFields& into) noexcept;

// The same for the last bytes of a body whose start was not kept: the root's
// usage object read from the end, as long as it lies within `tail`; no other
// reading (the rest of the body is gone). Returns whether it was read.
bool merge_tail_usage(simdjson::padded_string_view tail, UsageFields& into) noexcept;

// The value of the root object's "usage" field when it is an object, as the
// bytes of `doc` it spans; empty when the root has no such field or `doc`
// does not end as a JSON object does. Reads from the end and stops at the
// field, so it costs what follows the field, not the whole document. Assumes
// `doc` is well-formed JSON; what it returns still has to be parsed.
std::string_view find_root_usage_object(std::string_view doc) noexcept;

// Whether `doc` is the extra final chunk of an OpenAI stream that exists only
// because stream_options.include_usage was set: "choices" is an empty array and
// "usage" an object. Fills `usage` from it when so.
bool is_usage_only_chunk(simdjson::padded_string_view doc, UsageFields& usage) noexcept;

}  // namespace lmwarden::telemetry
