#include "telemetry/usage_json.h"

#include <cmath>

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

void read_count(dom::object obj, std::string_view key, std::optional<std::uint64_t>& out) noexcept {
  double d = 0;
  // Token counts are integers; a float form (12.0) is accepted, junk is not.
  if (obj.at_key(key).get_double().get(d) != simdjson::SUCCESS) return;
  if (!std::isfinite(d) || d < 0 || d > 9.0e15 || d != std::floor(d)) return;
  out = static_cast<std::uint64_t>(d);
}

void read_nested_count(dom::object obj, std::string_view outer, std::string_view key,
                       std::optional<std::uint64_t>& out) noexcept {
  dom::object inner;
  if (obj.at_key(outer).get_object().get(inner) != simdjson::SUCCESS) return;
  read_count(inner, key, out);
}

// Reads the usage object under `key` of `parent`; null or absent reads nothing.
void read_usage_object(dom::object parent, std::string_view key, UsageFields& into) noexcept {
  dom::object usage;
  if (parent.at_key(key).get_object().get(usage) != simdjson::SUCCESS) return;
  UsageFields f;
  read_count(usage, "prompt_tokens", f.prompt_tokens);
  read_count(usage, "completion_tokens", f.completion_tokens);
  read_nested_count(usage, "prompt_tokens_details", "cached_tokens", f.prompt_cached_tokens);
  read_count(usage, "input_tokens", f.input_tokens);
  read_count(usage, "output_tokens", f.output_tokens);
  read_count(usage, "cache_read_input_tokens", f.cache_read_input_tokens);
  read_count(usage, "cache_creation_input_tokens", f.cache_creation_input_tokens);
  read_nested_count(usage, "input_tokens_details", "cached_tokens", f.input_cached_tokens);
  f.seen = true;
  into.merge(f);
}

template <typename Fn>
bool with_root(simdjson::padded_string_view doc, Fn&& fn) noexcept {
  dom::parser local;
  dom::parser& parser = doc.length() <= kSharedParserMaxBytes ? shared_parser() : local;
  dom::object root;
  // The buffer carries simdjson's padding (PaddedBuffer), so no copy is made.
  if (parser.parse(doc.data(), doc.length(), false).get_object().get(root) != simdjson::SUCCESS) {
    return false;
  }
  return fn(root);
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

bool merge_usage(simdjson::padded_string_view doc, UsageFields& into) noexcept {
  return with_root(doc, [&into](dom::object root) {
    read_usage_object(root, "usage", into);
    for (std::string_view wrapper : {std::string_view("message"), std::string_view("response")}) {
      dom::object inner;
      if (root.at_key(wrapper).get_object().get(inner) == simdjson::SUCCESS) {
        read_usage_object(inner, "usage", into);
      }
    }
    return true;
  });
}

bool is_usage_only_chunk(simdjson::padded_string_view doc, UsageFields& usage) noexcept {
  return with_root(doc, [&usage](dom::object root) {
    dom::array choices;
    if (root.at_key("choices").get_array().get(choices) != simdjson::SUCCESS) return false;
    if (choices.size() != 0) return false;
    UsageFields f;
    read_usage_object(root, "usage", f);
    if (!f.seen) return false;
    usage.merge(f);
    return true;
  });
}

}  // namespace lmwarden::telemetry
