// inject_stream_usage: measuring streamed OpenAI requests whose client did not
// ask for usage.
//
// An OpenAI-style stream reports usage only when the request sets
// stream_options.include_usage; then the server appends one extra chunk with
// "choices": [] and the usage. With inject_stream_usage on for a model, the
// warden adds that option to streaming requests that lack it, and removes the
// extra chunk from what the client receives, so the client sees the stream it
// asked for and the warden still measures the request (DESIGN §7, issue 4).
//
//   request:  with_stream_usage(body)       a byte splice, not a re-serialisation
//   response: InjectedUsageStripper         forwards everything but that chunk
//
// The relay feeds the same upstream bytes to its UsageTap (which sees the usage
// chunk) and to the stripper (which decides what the client gets).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/usage_json.h"

namespace lmwarden::telemetry {

inline constexpr std::string_view kIncludeUsageMember =
    R"("stream_options":{"include_usage":true})";

// The request body with kIncludeUsageMember inserted as the first member of the
// top-level object; nullopt when the body does not start with '{' (after a
// UTF-8 byte order mark, if any, and whitespace). Every other byte is kept as
// sent. Callers inject only into
// streaming requests without stream_options; should one slip through, the
// client's own stream_options comes later in the object and wins under the
// last-member-wins reading of vLLM's JSON parser.
std::optional<std::string> with_stream_usage(std::string_view body);

// Removes the usage-only chunk(s) from an OpenAI event stream.
//
// SSE clients act on an event only when its terminating blank line arrives, so
// the stripper holds back an event until it is complete and then forwards or
// drops it whole; that adds no delay a client could observe. In the usual case
// (each chunk carries whole events and none is dropped) feed() returns the
// input chunk itself, uncopied. An event split across chunks is copied once.
// An event longer than kMaxHeldEventBytes cannot be a usage chunk (a few hundred
// bytes), so it is forwarded as it arrives instead of being held.
//
// Not thread-safe: one per streamed request.
class InjectedUsageStripper {
 public:
  static constexpr std::size_t kMaxHeldEventBytes = 64u << 10;

  // The bytes to write to the client for `chunk`, in order (a gather list for
  // the socket write). Views point into `chunk` or into this object and stay
  // valid until the next call.
  std::span<const std::string_view> feed(std::string_view chunk);
  // End of stream: whatever is still held (an event cut short) is decided and
  // returned.
  std::span<const std::string_view> finish();

  std::size_t stripped_events() const noexcept { return stripped_; }
  // Usage read from the chunks that were stripped.
  const UsageFields& stripped_usage() const noexcept { return usage_; }

 private:
  bool is_usage_event(std::string_view event);
  void forward(std::string_view bytes);

  std::vector<std::string_view> out_;
  std::string held_;  // the open event's bytes from earlier chunks
  std::string emit_;  // a completed held event being forwarded by this call
  PaddedBuffer data_;
  bool event_open_ = false;        // the current event has a non-blank line
  bool line_has_content_ = false;  // the current partial line has a non-'\r' byte
  bool passthrough_ = false;       // the open event is too long to be a usage chunk
  std::size_t stripped_ = 0;
  UsageFields usage_;
};

}  // namespace lmwarden::telemetry
