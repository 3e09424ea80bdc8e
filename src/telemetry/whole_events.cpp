#include "telemetry/whole_events.h"

#include <algorithm>

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
  for (auto e = static_cast<std::ptrdiff_t>(chunk.size()); e >= 1; --e) {
    const char last = at(e - 1);
    if (!is_line_end(last)) continue;
    const char prev = at(e - 2);
    // A line end right after another is a blank line. A CR LF pair is one
    // line end: the blank line then needs a line end before the CR.
    if (last == '\n' && prev == '\r') {
      if (is_line_end(at(e - 3))) return static_cast<std::size_t>(e);
    } else if (is_line_end(prev)) {
      return static_cast<std::size_t>(e);
    }
  }
  return std::string_view::npos;
}

void WholeEventGate::remember_tail(std::string_view chunk) noexcept {
  const std::size_t keep = std::min(chunk.size(), sizeof tail_);
  const std::size_t old = std::min(tail_size_, sizeof tail_ - keep);
  std::copy(tail_ + tail_size_ - old, tail_ + tail_size_, tail_);
  std::copy(chunk.end() - static_cast<std::ptrdiff_t>(keep), chunk.end(), tail_ + old);
  tail_size_ = old + keep;
}

std::span<const std::string_view> WholeEventGate::feed(std::string_view chunk) {
  if (chunk.empty()) return {};
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
      if (!held_.empty()) {
        emit_.swap(held_);
        held_.clear();
        out_[n++] = emit_;
      }
      out_[n++] = chunk;
    }
    return {out_, n};
  }
  // Everything up to `end` completes events: it goes, after what was held.
  passthrough_ = false;
  if (!held_.empty()) {
    emit_.swap(held_);
    held_.clear();
    out_[n++] = emit_;
  }
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
  if (held_.empty()) return {};
  emit_.swap(held_);
  held_.clear();
  out_[0] = emit_;
  return {out_, 1};
}

}  // namespace lmwarden::telemetry
