#include "telemetry/whole_events.h"

#include <string.h>

#include <algorithm>
#include <cstring>

namespace lmwarden::telemetry {
namespace {

bool is_line_end(char c) noexcept {
  return c == '\n' || c == '\r';
}

}  // namespace

std::size_t last_event_end(std::string_view before, std::string_view chunk) noexcept {
  // The stream's byte at `i`, counted from the start of `chunk` (negative:
  // from `before`); 'x' (no line end) before what is known.
  const auto at = [&](std::ptrdiff_t i) noexcept -> char {
    if (i >= 0) return chunk[static_cast<std::size_t>(i)];
    const std::ptrdiff_t j = static_cast<std::ptrdiff_t>(before.size()) + i;
    return j >= 0 ? before[static_cast<std::size_t>(j)] : 'x';
  };
  // Whether the line end whose last byte is at e - 1 ends a blank line: it
  // comes right after another line end. A CR LF pair is one line end: the
  // blank line then needs a line end before the CR.
  const auto ends_blank_line = [&at](std::ptrdiff_t e) noexcept {
    const char last = at(e - 1);
    const char prev = at(e - 2);
    if (last == '\n' && prev == '\r') return is_line_end(at(e - 3));
    return is_line_end(prev);
  };
  const char* const data = chunk.data();
  std::size_t limit = chunk.size();  // candidates lie before this
  while (limit > 0) {
    // The last line-end byte before `limit`: the last LF, or a CR after it
    // (memrchr rather than a loop over the bytes: a read that ends inside an
    // event leaves that event's bytes to pass over).
    const void* lf = ::memrchr(data, '\n', limit);
    const std::size_t after_lf = lf ? static_cast<std::size_t>(static_cast<const char*>(lf) - data) + 1 : 0;
    const void* cr = ::memrchr(data + after_lf, '\r', limit - after_lf);
    const std::size_t end =
        cr ? static_cast<std::size_t>(static_cast<const char*>(cr) - data) + 1 : after_lf;
    if (end == 0) break;
    if (ends_blank_line(static_cast<std::ptrdiff_t>(end))) return end;
    limit = end - 1;
  }
  return std::string_view::npos;
}

void WholeEventGate::remember_tail(std::string_view chunk) noexcept {
  constexpr std::size_t kTail = sizeof tail_;
  if (chunk.size() >= kTail) {  // the usual case
    std::memcpy(tail_, chunk.data() + chunk.size() - kTail, kTail);
    tail_size_ = kTail;
    return;
  }
  const std::size_t old = std::min(tail_size_, kTail - chunk.size());
  std::memmove(tail_, tail_ + tail_size_ - old, old);
  std::memcpy(tail_ + old, chunk.data(), chunk.size());
  tail_size_ = old + chunk.size();
}

std::span<const std::string_view> WholeEventGate::feed(std::string_view chunk) {
  if (chunk.empty()) return {};
  // The usual case at an engine's pace: one read, whole events ("\n\n" is a
  // blank line whatever came before it).
  if (held_.empty() && chunk.ends_with("\n\n")) {
    passthrough_ = false;
    remember_tail(chunk);
    out_[0] = chunk;
    return {out_, 1};
  }
  const std::size_t end = last_event_end({tail_, tail_size_}, chunk);
  remember_tail(chunk);
  std::size_t n = 0;
  if (end == std::string_view::npos) {
    if (passthrough_) {
      out_[n++] = chunk;
    } else if (held_.size() + chunk.size() <= kMaxHeldEventBytes) {
      held_.append(chunk);
    } else {
      // Too long to hold: what is held, and the rest of the event as it comes.
      passthrough_ = true;
      release_held(n);
      out_[n++] = chunk;
    }
    return {out_, n};
  }
  // Everything up to `end` completes events: it goes, after what was held.
  passthrough_ = false;
  release_held(n);
  out_[n++] = chunk.substr(0, end);
  const std::string_view rest = chunk.substr(end);
  if (rest.size() <= kMaxHeldEventBytes) {
    held_.assign(rest);
  } else {
    passthrough_ = true;
    out_[n++] = rest;
  }
  return {out_, n};
}

std::span<const std::string_view> WholeEventGate::finish() {
  passthrough_ = false;
  std::size_t n = 0;
  release_held(n);
  return {out_, n};
}

void WholeEventGate::release_held(std::size_t& n) noexcept {
  if (held_.empty()) return;
  // emit_ keeps the bytes while the caller writes them; held_ takes its
  // storage for the next open event.
  emit_.swap(held_);
  held_.clear();
  out_[n++] = emit_;
}

}  // namespace lmwarden::telemetry
