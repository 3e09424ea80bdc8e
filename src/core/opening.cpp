#include "core/opening.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lmwarden::core::opening {
namespace {

namespace od = simdjson::ondemand;
using simdjson::error_code;

constexpr std::uint64_t kSeed = 0x6f70656e696e6721ull;  // "opening!"

std::uint64_t mix(std::uint64_t h, std::string_view bytes) noexcept {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), h);
}

std::uint64_t mix(std::uint64_t h, std::uint64_t value) noexcept {
  return XXH3_64bits_withSeed(&value, sizeof value, h);
}

// A part's hash when it holds text, never 0 (which stands for absent).
std::uint64_t present(bool any, std::uint64_t h) noexcept {
  if (!any) return 0;
  return h == 0 ? 1 : h;
}

// A message role (its raw token) that the client writes, not the model or a tool.
bool from_the_client(std::string_view role) noexcept {
  return role == "\"user\"" || role == "\"system\"" || role == "\"developer\"";
}

// A token as the client wrote it, without the whitespace up to the next one.
std::string_view trimmed(std::string_view token) noexcept {
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t' || token.back() == '\n' ||
                            token.back() == '\r'))
    token.remove_suffix(1);
  return token;
}

// A string value's raw token, quotes and escapes as written; the value is
// consumed. Empty when the value is not a string.
error_code string_token(od::value& value, std::string_view& token) noexcept {
  token = {};
  od::json_type type;
  if (auto error = value.type().get(type)) return error;
  if (type != od::json_type::string) return simdjson::SUCCESS;
  token = trimmed(value.raw_json_token());
  od::raw_json_string raw;
  return value.get_raw_json_string().get(raw);
}

// One piece of a text into `h`: a string, or a block object. A block with a
// `text` string counts as that text alone, so `"content":"x"` and
// `[{"type":"text","text":"x"}]` open alike, as vLLM renders them alike; a
// block without one (an image, a file) counts by its `type` alone. `any` is
// set when some text was found.
error_code hash_piece(od::value& piece, std::uint64_t& h, bool& any) noexcept {
  od::json_type type;
  if (auto error = piece.type().get(type)) return error;
  std::string_view text;
  std::string_view kind;
  if (type == od::json_type::string) {
    if (auto error = string_token(piece, text)) return error;
  } else if (type == od::json_type::object) {
    od::object object;
    if (auto error = piece.get_object().get(object)) return error;
    for (auto field_result : object) {
      od::field field;
      if (auto error = std::move(field_result).get(field)) return error;
      const bool is_text = field.key() == "text";
      if (!is_text && field.key() != "type") continue;
      if (auto error = string_token(field.value(), is_text ? text : kind)) return error;
    }
  }
  if (!text.empty()) {
    h = mix(h, text);
    any = true;
  } else if (!kind.empty()) {
    h = mix(mix(h, std::string_view("type")), kind);
  }
  return simdjson::SUCCESS;
}

// The text of a system prompt or of a message's content into `h`: a string,
// or a list of pieces (blocks, or bare strings).
error_code hash_text(od::value& value, std::uint64_t& h, bool& any) noexcept {
  od::json_type type;
  if (auto error = value.type().get(type)) return error;
  if (type == od::json_type::string) return hash_piece(value, h, any);
  if (type != od::json_type::array) return simdjson::SUCCESS;
  od::array pieces;
  if (auto error = value.get_array().get(pieces)) return error;
  for (auto piece_result : pieces) {
    od::value piece;
    if (auto error = std::move(piece_result).get(piece)) return error;
    if (auto error = hash_piece(piece, h, any)) return error;
  }
  return simdjson::SUCCESS;
}

// The leading messages (or Responses message items) from the client: system,
// developer and user ones, up to the first that is not (the model's first
// reply, a tool result, a function call). The first request of a
// conversation is all opening; each later one resends it unchanged.
error_code hash_turns(od::value& value, std::uint64_t& out) noexcept {
  out = 0;
  od::json_type type;
  if (auto error = value.type().get(type)) return error;
  if (type == od::json_type::string) {  // Responses: `input` as one user message
    std::uint64_t content = kSeed;
    bool text = false;
    if (auto error = hash_text(value, content, text)) return error;
    out = present(true, mix(mix(kSeed, std::string_view("\"user\"")), content));
    return simdjson::SUCCESS;
  }
  if (type != od::json_type::array) return simdjson::SUCCESS;
  od::array items;
  if (auto error = value.get_array().get(items)) return error;
  std::uint64_t h = kSeed;
  bool any = false;
  for (auto item_result : items) {
    od::value item;
    if (auto error = std::move(item_result).get(item)) return error;
    od::json_type item_type;
    if (auto error = item.type().get(item_type)) return error;
    if (item_type != od::json_type::object) break;
    od::object object;
    if (auto error = item.get_object().get(object)) return error;
    std::string_view role;
    bool message = true;
    std::uint64_t content = kSeed;
    for (auto field_result : object) {
      od::field field;
      if (auto error = std::move(field_result).get(field)) return error;
      if (field.key() == "role") {
        if (auto error = string_token(field.value(), role)) return error;
      } else if (field.key() == "type") {
        std::string_view kind;
        if (auto error = string_token(field.value(), kind)) return error;
        message = kind == "\"message\"";
      } else if (field.key() == "content") {
        bool text = false;
        if (auto error = hash_text(field.value(), content, text)) return error;
      }
    }
    if (!message || !from_the_client(role)) break;  // the rest is skipped by the caller
    h = mix(mix(h, role), content);
    any = true;
  }
  out = present(any, h);
  return simdjson::SUCCESS;
}

}  // namespace

std::uint64_t key(std::uint64_t system, std::uint64_t turns) noexcept {
  return mix(mix(kSeed, system), turns);
}

Part part_of(std::string_view top_level_key) noexcept {
  if (top_level_key == "system" || top_level_key == "instructions") return Part::kSystem;
  if (top_level_key == "messages") return Part::kMessages;
  if (top_level_key == "input") return Part::kInput;
  return Part::kNone;
}

error_code hash_part(Part part, od::value& value, std::uint64_t& out) noexcept {
  out = 0;
  if (part == Part::kMessages || part == Part::kInput) {
    if (auto error = hash_turns(value, out)) return error;
  } else if (part == Part::kSystem) {
    std::uint64_t h = kSeed;
    bool any = false;
    if (auto error = hash_text(value, h, any)) return error;
    out = present(any, h);
  }
  return simdjson::SUCCESS;
}

}  // namespace lmwarden::core::opening
