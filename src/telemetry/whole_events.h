// Relays an SSE stream in whole events: the bytes of an event the upstream
// has not finished are held until its blank line arrives.
//
// SSE clients act on an event only at its terminating blank line, so holding
// the open event's bytes delays nothing a client can observe. What it buys is
// a clean end when the upstream fails in the middle of an event: the client
// has only whole events, and the error event the relay then sends follows
// them, rather than bytes of a torn event its JSON parser would fail on.
//
// In the usual case (vLLM writes each event whole, and a read ends where an
// event does) feed() returns its input uncopied, after a look at its last
// bytes. Bytes are held only across reads that split an event, and at most
// kMaxHeldEventBytes of them: past that the event goes out as it arrives.
//
// Not thread-safe: one per streamed reply.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace lmwarden::telemetry {

class WholeEventGate {
 public:
  static constexpr std::size_t kMaxHeldEventBytes = 64u << 10;

  // The bytes to write to the client now, in order: views into `chunk` or
  // into this object, valid until the next call. Their concatenation, over
  // all calls and finish(), is the input, byte for byte.
  std::span<const std::string_view> feed(std::string_view chunk);
  // End of stream: the bytes still held (a last event without its blank line).
  std::span<const std::string_view> finish();

  std::size_t held_bytes() const noexcept { return held_.size(); }

 private:
  void remember_tail(std::string_view chunk) noexcept;
  // Puts what is held into the output, at out_[n++], when anything is.
  void release_held(std::size_t& n) noexcept;

  std::string_view out_[3];
  std::string held_;   // the open event's bytes from earlier chunks
  std::string emit_;   // held bytes being written by this call
  char tail_[3] = {};  // the stream's last bytes before the current chunk
  std::size_t tail_size_ = 0;
  bool passthrough_ = false;  // the open event outgrew the hold: it goes out as it comes
};

// Where, in `chunk`, the last SSE event (or blank line) that ends inside it
// ends: the offset just past the blank line's last byte, or npos when no
// blank line ends in `chunk`. `before`: up to the last three bytes of the
// stream before `chunk`, for a blank line that starts there. Lines end in
// LF, CR LF or CR (the SSE specification); "\n\r\n" ends at its LF.
std::size_t last_event_end(std::string_view before, std::string_view chunk) noexcept;

}  // namespace lmwarden::telemetry
