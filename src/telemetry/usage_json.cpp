#include "telemetry/usage_json.h"

#include <string.h>  // memrchr

#include <algorithm>
#include <array>
#include <bitset>
#include <cmath>
#include <cstring>

#include "common/json_text.h"

namespace lmwarden::telemetry {
namespace {

namespace dom = simdjson::dom;

// The DOM parser validates the whole document before any field is read, so a
// malformed document fails once, cleanly. (On-demand parsing reads lazily and,
// in simdjson 3.0, leaves its iterator unusable after an error mid-document;
// fuzzing found that, and the documents read here are small enough for the
// DOM to cost nothing that matters.)
//
// Documents up to this size reuse one parser per thread (its buffers grow to
// the largest document it saw); larger ones, rare (a Responses API
// response.completed event carries the whole output), get a parser of their
// own so a single big reply does not pin megabytes to an I/O thread.
constexpr std::size_t kSharedParserMaxBytes = 1u << 20;

dom::parser& shared_parser() noexcept {
  thread_local dom::parser parser;
  return parser;
}

// A token count: an integer; a float form (12.0) is accepted, junk is not.
void read_count(dom::element value, std::optional<std::uint64_t>& out) noexcept {
  double d = 0;
  if (value.get_double().get(d) != simdjson::SUCCESS) return;
  if (!std::isfinite(d) || d < 0 || d > 9.0e15 || d != std::floor(d)) return;
  out = static_cast<std::uint64_t>(d);
}

// One pass over an object's fields: fn(i, value) for each field named
// names[i], in document order, so that of duplicate keys the last one counts
// (as in Python's json, which writes vLLM's replies, and as
// find_root_usage_object() finds it). Each at_key would be a scan of its own.
template <std::size_t N, typename Fn>
void for_named_fields(dom::object obj, const std::array<std::string_view, N>& names,
                      Fn&& fn) noexcept {
  for (const dom::key_value_pair field : obj) {
    for (std::size_t i = 0; i < N; ++i) {
      if (field.key == names[i]) {
        fn(i, field.value);
        break;
      }
    }
  }
}

void read_nested_count(dom::element value, std::optional<std::uint64_t>& out) noexcept {
  dom::object inner;
  if (value.get_object().get(inner) != simdjson::SUCCESS) return;
  dom::element count;
  if (inner.at_key("cached_tokens").get(count) == simdjson::SUCCESS) read_count(count, out);
}

// The counts a usage object may hold, by field name; `nested`: the field is
// an object whose cached_tokens is the count.
struct Count {
  std::string_view name;
  std::optional<std::uint64_t> UsageFields::*field;
  bool nested = false;
};
constexpr std::array<Count, 8> kCounts{{
    {"prompt_tokens", &UsageFields::prompt_tokens},
    {"completion_tokens", &UsageFields::completion_tokens},
    {"prompt_tokens_details", &UsageFields::prompt_cached_tokens, true},
    {"input_tokens", &UsageFields::input_tokens},
    {"output_tokens", &UsageFields::output_tokens},
    {"cache_read_input_tokens", &UsageFields::cache_read_input_tokens},
    {"cache_creation_input_tokens", &UsageFields::cache_creation_input_tokens},
    {"input_tokens_details", &UsageFields::input_cached_tokens, true},
}};
constexpr auto kCountNames = [] {
  std::array<std::string_view, kCounts.size()> names;
  for (std::size_t i = 0; i < kCounts.size(); ++i) names[i] = kCounts[i].name;
  return names;
}();

// Reads a usage object; anything but an object (null included) reads nothing.
void read_usage_object(dom::element value, UsageFields& into) noexcept {
  dom::object usage;
  if (value.get_object().get(usage) != simdjson::SUCCESS) return;
  UsageFields f;
  for_named_fields(usage, kCountNames, [&f](std::size_t i, dom::element v) {
    const Count& count = kCounts[i];
    if (count.nested) {
      read_nested_count(v, f.*count.field);
    } else {
      read_count(v, f.*count.field);
    }
  });
  f.seen = true;
  into.merge(f);
}

// The index of the quote that opens the string whose closing quote is at
// `close`, or npos. A quote is escaped when an odd run of backslashes
// precedes it; outside strings JSON has no backslashes, so the run decides.
std::size_t string_start(std::string_view doc, std::size_t close) noexcept {
  std::size_t end = close;
  while (const void* hit = ::memrchr(doc.data(), '"', end)) {
    const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(hit) - doc.data());
    std::size_t backslashes = 0;
    while (backslashes < at && doc[at - 1 - backslashes] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return at;
    end = at;
  }
  return std::string_view::npos;
}

// Parses `size` bytes at `data`, which simdjson's padding follows (a
// PaddedBuffer, or a slice of one), so no copy is made; fn(element) on success.
template <typename Fn>
bool with_parsed(const char* data, std::size_t size, Fn&& fn) noexcept {
  dom::parser local;
  dom::parser& parser = size <= kSharedParserMaxBytes ? shared_parser() : local;
  dom::element element;
  if (parser.parse(data, size, false).get(element) != simdjson::SUCCESS) return false;
  return fn(element);
}

template <typename Fn>
bool with_root(simdjson::padded_string_view doc, Fn&& fn) noexcept {
  return with_parsed(doc.data(), doc.length(), [&fn](dom::element element) {
    dom::object root;
    return element.get_object().get(root) == simdjson::SUCCESS && fn(root);
  });
}

}  // namespace

void UsageFields::merge(const UsageFields& later) noexcept {
  const auto take = [](std::optional<std::uint64_t>& mine, const std::optional<std::uint64_t>& v) {
    if (v) mine = v;
  };
  take(prompt_tokens, later.prompt_tokens);
  take(completion_tokens, later.completion_tokens);
  take(prompt_cached_tokens, later.prompt_cached_tokens);
  take(input_tokens, later.input_tokens);
  take(output_tokens, later.output_tokens);
  take(cache_read_input_tokens, later.cache_read_input_tokens);
  take(cache_creation_input_tokens, later.cache_creation_input_tokens);
  take(input_cached_tokens, later.input_cached_tokens);
  seen = seen || later.seen;
}

void PaddedBuffer::append(std::string_view s) {
  const std::size_t needed = bytes_.size() + s.size() + simdjson::SIMDJSON_PADDING;
  if (bytes_.capacity() < needed) bytes_.reserve(std::max(needed, 2 * bytes_.capacity()));
  bytes_.append(s);
}

std::size_t find_usage_key(std::string_view text) noexcept {
  // Anchored on the key's 'g', its rarest letter in a stream's JSON: memchr
  // (vectorised) hops from one 'g' to the next, and the key is compared around
  // each. A search anchored on the first byte would stop at every '"'.
  static constexpr std::string_view kKey = "\"usage\"";
  static constexpr std::size_t kAnchor = 4;
  static_assert(kKey[kAnchor] == 'g');
  if (text.size() < kKey.size()) return std::string_view::npos;
  const char* at = text.data() + kAnchor;
  const char* const last = text.data() + text.size() - (kKey.size() - kAnchor);
  while (at <= last) {
    at = static_cast<const char*>(std::memchr(at, 'g', static_cast<std::size_t>(last - at) + 1));
    if (at == nullptr) return std::string_view::npos;
    if (std::memcmp(at - kAnchor, kKey.data(), kKey.size()) == 0)
      return static_cast<std::size_t>(at - kAnchor - text.data());
    ++at;
  }
  return std::string_view::npos;
}

bool mentions_usage(std::string_view text) noexcept {
  return find_usage_key(text) != std::string_view::npos;
}

EventsWithoutUsage events_without_usage(std::string_view chunk, std::size_t from) noexcept {
  const std::string_view rest = chunk.substr(from);
  const std::size_t key = find_usage_key(rest);
  const std::size_t search_again = key == std::string_view::npos ? chunk.size() : from + key + 1;
  // The last blank line before the key (or the end): its '\n' is preceded,
  // past an optional '\r', by another '\n' or by the start of `rest`.
  std::size_t end = std::min(key, rest.size());
  while (end > 0) {
    const void* nl = memrchr(rest.data(), '\n', end);
    if (nl == nullptr) break;
    const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(nl) - rest.data());
    std::size_t line = at;  // where the line this '\n' ends starts, if it is blank
    if (line > 0 && rest[line - 1] == '\r') --line;
    if (line == 0 || rest[line - 1] == '\n')
      return {.end = from + at + 1, .search_again = search_again};
    end = at;
  }
  return {.end = from, .search_again = search_again};
}

// The string at `key` of an object, into `out`, when it is a non-empty string.
bool read_string(dom::object object, std::string_view key, std::string& out) noexcept {
  std::string_view value;
  if (object.at_key(key).get_string().get(value) != simdjson::SUCCESS || value.empty())
    return false;
  out.assign(value);
  return true;
}

bool merge_usage(simdjson::padded_string_view doc, UsageFields& into,
                 std::string* response_id) noexcept {
  return with_root(doc, [&into, response_id](dom::object root) {
    // Document order is not merge order: a top-level usage is merged first,
    // then message.usage, then response.usage.
    static constexpr std::array<std::string_view, 3> kNames{"usage", "message", "response"};
    std::array<dom::element, 3> found;
    std::bitset<3> present;
    for_named_fields(root, kNames, [&](std::size_t i, dom::element v) {
      found[i] = v;
      present[i] = true;
    });
    if (present[0]) read_usage_object(found[0], into);
    for (std::size_t i = 1; i < 3; ++i) {
      dom::object wrapper;
      dom::element usage;
      if (present[i] && found[i].get_object().get(wrapper) == simdjson::SUCCESS &&
          wrapper.at_key("usage").get(usage) == simdjson::SUCCESS) {
        read_usage_object(usage, into);
      }
    }
    dom::object response;
    if (response_id && present[2] && found[2].get_object().get(response) == simdjson::SUCCESS)
      read_string(response, "id", *response_id);
    return true;
  });
}

bool read_response_id(simdjson::padded_string_view doc, std::string& id) noexcept {
  return with_root(doc, [&id](dom::object root) {
    std::string_view object;
    return root.at_key("object").get_string().get(object) == simdjson::SUCCESS &&
           object == "response" && read_string(root, "id", id);
  });
}

std::string_view find_root_usage_object(std::string_view doc) noexcept {
  constexpr std::size_t npos = std::string_view::npos;
  constexpr std::string_view kKey = "usage";
  std::size_t i = doc.size();
  while (i > 0 && is_json_space(doc[i - 1])) --i;
  if (i == 0 || doc[i - 1] != '}') return {};
  --i;
  // Walking backwards, each string is met at its closing quote and skipped
  // whole, so brackets are counted only outside strings. The last object
  // value met at the root's level is remembered: when the key before it turns
  // out to be "usage", that object is the field's value.
  std::size_t depth = 1;
  std::size_t object_open = npos;
  std::size_t object_close = npos;
  while (i > 0) {
    const char c = doc[--i];
    switch (c) {
      case '"': {
        const std::size_t open = string_start(doc, i);
        if (open == npos) return {};
        if (depth == 1 && doc.substr(open + 1, i - open - 1) == kKey) {
          std::size_t j = i + 1;
          while (j < doc.size() && is_json_space(doc[j])) ++j;
          if (j < doc.size() && doc[j] == ':') {  // a key, not a string value
            ++j;
            while (j < doc.size() && is_json_space(doc[j])) ++j;
            if (j != object_open) return {};  // usage is not an object
            return doc.substr(object_open, object_close - object_open + 1);
          }
        }
        i = open;
        break;
      }
      case '}':
        if (depth == 1) object_close = i;
        ++depth;
        break;
      case ']':
        ++depth;
        break;
      case '{':
      case '[':
        if (--depth == 0) return {};  // the root's start: no usage field
        if (depth == 1 && c == '{') object_open = i;
        break;
      default:
        break;
    }
  }
  return {};
}

bool merge_tail_usage(simdjson::padded_string_view tail, UsageFields& into) noexcept {
  // Walking back from the end, every string is skipped from its closing quote
  // to its opening one, so the walk never mistakes a string's bytes for
  // structure; a string cut by the tail's start has no opening quote left and
  // ends the walk, as the start itself does.
  const std::string_view usage = find_root_usage_object({tail.data(), tail.length()});
  // The object lies inside `tail`, so simdjson's padding lies behind it too.
  return !usage.empty() && with_parsed(usage.data(), usage.size(), [&into](dom::element value) {
    read_usage_object(value, into);
    return true;
  });
}

bool merge_body_usage(simdjson::padded_string_view doc, UsageFields& into) noexcept {
  return merge_tail_usage(doc, into) || merge_usage(doc, into);
}

bool is_usage_only_chunk(simdjson::padded_string_view doc, UsageFields& usage) noexcept {
  return with_root(doc, [&usage](dom::object root) {
    dom::array choices;
    if (root.at_key("choices").get_array().get(choices) != simdjson::SUCCESS) return false;
    if (choices.size() != 0) return false;
    UsageFields f;
    dom::element value;
    if (root.at_key("usage").get(value) == simdjson::SUCCESS) read_usage_object(value, f);
    if (!f.seen) return false;
    usage.merge(f);
    return true;
  });
}

}  // namespace lmwarden::telemetry
