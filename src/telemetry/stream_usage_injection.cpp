#include "telemetry/stream_usage_injection.h"

#include <algorithm>
#include <cstring>

#include "common/json_text.h"

namespace lmwarden::telemetry {
namespace {

bool has_content(std::string_view line) noexcept {
  return std::any_of(line.begin(), line.end(), [](char c) { return c != '\r'; });
}

}  // namespace

std::optional<std::string> with_stream_usage(std::string_view body) {
  // A UTF-8 byte order mark may come first (scan_body skips it, as Python's
  // json.loads of bytes does); it stays where it is.
  const std::size_t start = body.starts_with(kUtf8ByteOrderMark) ? kUtf8ByteOrderMark.size() : 0;
  const auto open = std::find_if_not(body.begin() + static_cast<std::ptrdiff_t>(start), body.end(),
                                     is_json_space);
  if (open == body.end() || *open != '{') return std::nullopt;
  const std::size_t after_open = static_cast<std::size_t>(open - body.begin()) + 1;
  const auto next = std::find_if_not(body.begin() + after_open, body.end(), is_json_space);
  if (next == body.end()) return std::nullopt;  // unterminated object
  const bool empty_object = *next == '}';

  std::string out;
  out.reserve(body.size() + kIncludeUsageMember.size() + 1);
  out.append(body.substr(0, after_open));
  out.append(kIncludeUsageMember);
  if (!empty_object) out.push_back(',');
  out.append(body.substr(after_open));
  return out;
}

void InjectedUsageStripper::forward(std::string_view bytes) {
  if (bytes.empty()) return;
  // Adjacent pieces of the same chunk are merged so the common case stays one
  // view equal to the input.
  if (!out_.empty() && out_.back().data() + out_.back().size() == bytes.data()) {
    out_.back() = std::string_view(out_.back().data(), out_.back().size() + bytes.size());
  } else {
    out_.push_back(bytes);
  }
}

std::span<const std::string_view> InjectedUsageStripper::feed(std::string_view chunk) {
  out_.clear();
  emit_.clear();
  std::size_t event_start = 0;  // where the open event's bytes in this chunk begin
  std::size_t pos = 0;
  // No "usage" key in chunk[pos, unmentioned): the key search is not repeated
  // for each line of the event that holds the key.
  std::size_t unmentioned = 0;
  while (pos < chunk.size()) {
    // Between events (nothing held, no event open), whole events that do not
    // mention usage cannot be the usage chunk: they are forwarded as they
    // are, with one search for the key and one for the blank line before it,
    // without finding their lines.
    if (!event_open_ && !line_has_content_ && !passthrough_ && held_.empty() &&
        pos >= unmentioned) {
      const EventsWithoutUsage run = events_without_usage(chunk, pos);
      unmentioned = run.search_again;
      forward(chunk.substr(pos, run.end - pos));
      pos = run.end;
      event_start = pos;
      if (pos == chunk.size()) break;
    }
    const void* nl = std::memchr(chunk.data() + pos, '\n', chunk.size() - pos);
    if (nl == nullptr) {
      line_has_content_ = line_has_content_ || has_content(chunk.substr(pos));
      break;
    }
    const std::size_t end = static_cast<std::size_t>(static_cast<const char*>(nl) - chunk.data());
    const bool blank = !line_has_content_ && !has_content(chunk.substr(pos, end - pos));
    line_has_content_ = false;
    pos = end + 1;
    if (!blank) {
      event_open_ = true;
      continue;
    }
    if (!event_open_) {
      // A blank line outside any event: forwarded as it is, after whatever of
      // it an earlier chunk left held (a lone "\r").
      const std::string_view blank_line = chunk.substr(event_start, pos - event_start);
      if (held_.empty()) {
        forward(blank_line);
      } else {
        emit_.swap(held_);
        held_.clear();
        emit_.append(blank_line);
        out_.push_back(emit_);
      }
      event_start = pos;
      continue;
    }
    // The event ends here (its blank line included).
    const std::string_view tail = chunk.substr(event_start, pos - event_start);
    if (passthrough_) {
      forward(tail);
    } else if (!held_.empty()) {
      emit_.swap(held_);
      held_.clear();
      emit_.append(tail);
      if (!is_usage_event(emit_)) out_.push_back(emit_);
    } else if (!is_usage_event(tail)) {
      forward(tail);
    }
    passthrough_ = false;
    event_open_ = false;
    event_start = pos;
  }

  // What is left belongs to an event not yet complete; even a partial line of
  // only "\r" is held, since the bytes after it decide what line it starts.
  const std::string_view rest = chunk.substr(event_start);
  if (rest.empty()) {
    // nothing open
  } else if (passthrough_) {
    forward(rest);
  } else if (held_.size() + rest.size() > kMaxHeldEventBytes) {
    passthrough_ = true;
    if (!held_.empty()) {
      emit_.swap(held_);
      held_.clear();
      out_.push_back(emit_);
    }
    forward(rest);
  } else {
    held_.append(rest);
  }
  return out_;
}

std::span<const std::string_view> InjectedUsageStripper::finish() {
  out_.clear();
  emit_.clear();
  if (!held_.empty()) {
    emit_.swap(held_);
    held_.clear();
    if (!is_usage_event(emit_)) out_.push_back(emit_);
  }
  event_open_ = line_has_content_ = passthrough_ = false;
  return out_;
}

// Whether a complete event (its lines and blank terminator) is the injected
// usage chunk. Cheap textual checks first: almost every event is a content
// delta without "usage".
bool InjectedUsageStripper::is_usage_event(std::string_view event) {
  if (!mentions_usage(event) || event.find("\"choices\"") == std::string_view::npos) {
    return false;
  }
  data_.clear();
  bool first = true;
  std::size_t pos = 0;
  while (pos < event.size()) {
    std::size_t end = event.find('\n', pos);
    if (end == std::string_view::npos) end = event.size();
    std::string_view line = event.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.starts_with("data:")) continue;
    line.remove_prefix(5);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (!first) data_.append("\n");
    data_.append(line);
    first = false;
  }
  if (data_.empty() || !is_usage_only_chunk(data_.padded(), usage_)) return false;
  ++stripped_;
  return true;
}

}  // namespace lmwarden::telemetry
