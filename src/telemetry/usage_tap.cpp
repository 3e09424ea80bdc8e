#include "telemetry/usage_tap.h"

#include <algorithm>
#include <cstring>

namespace lmwarden::telemetry {
namespace {

bool is_json_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

std::uint64_t value_or_zero(const std::optional<std::uint64_t>& v) noexcept {
  return v.value_or(0);
}

}  // namespace

RequestUsage to_request_usage(const UsageFields& f) noexcept {
  RequestUsage u;
  if (!f.seen) return u;
  u.cache_measured = true;
  if (f.prompt_tokens) {
    u.prompt_tokens = *f.prompt_tokens;
    u.cached_tokens = value_or_zero(f.prompt_cached_tokens);
    u.cached_reported = f.prompt_cached_tokens.has_value();
  } else if (f.input_cached_tokens) {
    u.prompt_tokens = value_or_zero(f.input_tokens);
    u.cached_tokens = *f.input_cached_tokens;
    u.cached_reported = true;
  } else {
    u.prompt_tokens = value_or_zero(f.input_tokens) + value_or_zero(f.cache_read_input_tokens) +
                      value_or_zero(f.cache_creation_input_tokens);
    u.cached_tokens = value_or_zero(f.cache_read_input_tokens);
    u.cached_reported = f.cache_read_input_tokens.has_value();
  }
  u.cached_tokens = std::min(u.cached_tokens, u.prompt_tokens);
  u.completion_tokens = f.completion_tokens ? *f.completion_tokens : value_or_zero(f.output_tokens);
  return u;
}

void UsageTap::feed(std::string_view chunk) noexcept {
  if (finished_ || chunk.empty()) return;
  if (format_ == BodyFormat::kAuto) {
    const auto first = std::find_if_not(chunk.begin(), chunk.end(), is_json_space);
    if (first == chunk.end()) return;  // only whitespace so far: undecided, nothing lost
    format_ = *first == '{' ? BodyFormat::kJson : BodyFormat::kEventStream;
    chunk.remove_prefix(static_cast<std::size_t>(first - chunk.begin()));
  }
  if (format_ == BodyFormat::kJson) {
    // Only the end of a long body is kept: at most 2 × kJsonTailBytes, and
    // when trimmed, at least kJsonTailBytes of it.
    if (chunk.size() >= kJsonTailBytes) {
      document_.clear();
      document_.append(chunk.substr(chunk.size() - kJsonTailBytes));
      document_cut_ = true;
      return;
    }
    if (document_.size() + chunk.size() > 2 * kJsonTailBytes) {
      document_.keep_last(kJsonTailBytes - chunk.size());
      document_cut_ = true;
    }
    document_.append(chunk);
    return;
  }
  feed_event_stream(chunk);
}

void UsageTap::feed_event_stream(std::string_view chunk) {
  std::size_t pos = 0;
  // No "usage" key in chunk[pos, unmentioned): the key search is not repeated
  // for each line of the event that holds the key.
  std::size_t unmentioned = 0;
  while (pos < chunk.size()) {
    // Between events, whole events that do not mention usage (content deltas:
    // nearly all of a stream) carry nothing to read: they are passed over
    // with one search for the key and one for the blank line before it,
    // without finding their lines.
    if (carry_.empty() && !carry_overflow_ && data_lines_ == 0 && pos >= unmentioned) {
      const EventsWithoutUsage run = events_without_usage(chunk, pos);
      unmentioned = run.search_again;
      pos = run.end;
      if (pos == chunk.size()) break;
    }
    const void* nl = std::memchr(chunk.data() + pos, '\n', chunk.size() - pos);
    if (nl == nullptr) {
      const std::string_view rest = chunk.substr(pos);
      if (carry_overflow_ || carry_.size() + rest.size() > kMaxDocumentBytes) {
        if (!carry_overflow_) ++oversized_;
        carry_overflow_ = true;
        carry_.clear();
      } else {
        carry_.append(rest);
      }
      break;
    }
    const std::size_t end = static_cast<std::size_t>(static_cast<const char*>(nl) - chunk.data());
    const std::string_view piece = chunk.substr(pos, end - pos);
    pos = end + 1;
    if (carry_overflow_) {
      carry_overflow_ = false;  // the rest of an oversized line: dropped with it
      continue;
    }
    if (carry_.empty()) {
      on_line(piece, /*in_chunk=*/true);
    } else {
      carry_.append(piece);
      on_line(carry_, /*in_chunk=*/false);
      carry_.clear();
    }
  }
  // The event is still open and its data line points into this chunk, which
  // the caller may reuse: keep a copy.
  if (!data_in_chunk_.empty()) {
    document_.append(data_in_chunk_);
    data_in_chunk_ = {};
  }
}

// One complete SSE line, without its "\n". Only data lines and the blank line
// that ends an event matter; event:, id:, retry: and comments carry no usage
// (the JSON repeats the event type).
void UsageTap::on_line(std::string_view line, bool in_chunk) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) {
    dispatch_event();
    return;
  }
  if (!line.starts_with("data:")) return;
  std::string_view value = line.substr(5);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);

  ++data_lines_;
  if (document_overflow_) return;
  if (data_lines_ == 1 && in_chunk) {
    data_in_chunk_ = value;
    return;
  }
  // Several data lines form one event joined by "\n" (SSE); JSON does not mind.
  if (!data_in_chunk_.empty()) {
    document_.append(data_in_chunk_);
    data_in_chunk_ = {};
  }
  if (data_lines_ > 1) document_.append("\n");
  if (document_.size() + value.size() > kMaxDocumentBytes) {
    document_overflow_ = true;
    return;
  }
  document_.append(value);
}

void UsageTap::dispatch_event() {
  if (data_lines_ > 0) {
    if (document_overflow_) {
      ++oversized_;
    } else if (!data_in_chunk_.empty()) {
      inspect(data_in_chunk_);
    } else {
      inspect(document_.view());
    }
  }
  data_in_chunk_ = {};
  data_lines_ = 0;
  document_.clear();
  document_overflow_ = false;
}

void UsageTap::inspect(std::string_view data) {
  // A Responses stream names its response in every event that carries the
  // whole response object, and each of those has a usage field.
  if (!mentions_usage(data)) return;
  std::string* id = want_response_id_ ? &response_id_ : nullptr;
  if (data.data() == document_.view().data()) {
    merge_usage(document_.padded(), fields_, id);
    return;
  }
  // In-chunk data needs padding behind it before simdjson may read it.
  document_.clear();
  document_.append(data);
  merge_usage(document_.padded(), fields_, id);
}

void UsageTap::finish() noexcept {
  if (finished_) return;
  if (format_ == BodyFormat::kJson) {
    if (!document_cut_) {
      if (!document_.empty()) merge_body_usage(document_.padded(), fields_);
      if (want_response_id_ && !document_.empty())
        telemetry::read_response_id(document_.padded(), response_id_);
    } else if (!merge_tail_usage(document_.padded(), fields_)) {
      ++oversized_;
    }
    document_.clear();
  } else if (format_ == BodyFormat::kEventStream) {
    // A stream cut after its last line but before the blank line still said
    // what it said; read it rather than lose the usage of the final event.
    if (!carry_.empty() && !carry_overflow_) {
      std::string last;
      last.swap(carry_);
      on_line(last, /*in_chunk=*/false);
    }
    dispatch_event();
  }
  finished_ = true;
}

}  // namespace lmwarden::telemetry
