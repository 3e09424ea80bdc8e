#include "core/identity.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstring>
#include <memory>
#include <optional>

#include "common/ascii.h"
#include "common/hash.h"
#include "common/json_text.h"
#include "core/opening.h"

namespace lmwarden::core {
namespace {

namespace od = simdjson::ondemand;
using simdjson::error_code;

constexpr std::string_view kClaudeUserIdPath = "metadata.user_id";

// HTTP optional whitespace around a field value.
std::string_view trim_ows(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Python's str.strip() set, ASCII part (int() strips before parsing).
std::string_view trim_python_ws(std::string_view s) noexcept {
  constexpr std::string_view kWs = " \t\n\r\f\v";
  const auto first = s.find_first_not_of(kWs);
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(kWs);
  return s.substr(first, last - first + 1);
}

const char* describe(error_code error) noexcept {
  switch (error) {
    case simdjson::UTF8_ERROR:
      return "invalid UTF-8";
    case simdjson::UNCLOSED_STRING:
      return "unterminated string";
    case simdjson::UNESCAPED_CHARS:
      return "unescaped control character in a string";
    case simdjson::STRING_ERROR:
      return "invalid escape in a string";
    case simdjson::EMPTY:
      return "no JSON value";
    case simdjson::INCOMPLETE_ARRAY_OR_OBJECT:
      return "unclosed object or array";
    case simdjson::DEPTH_ERROR:
      return "nested too deeply";
    case simdjson::NUMBER_ERROR:
      return "invalid number";
    case simdjson::T_ATOM_ERROR:
    case simdjson::F_ATOM_ERROR:
    case simdjson::N_ATOM_ERROR:
      return "invalid literal";
    case simdjson::CAPACITY:
      return "document too large";
    default:
      return "unexpected or missing token";
  }
}

// simdjson 3.0 has no document::at_end(); current_location() reports
// OUT_OF_BOUNDS exactly when every token has been consumed.
bool at_end(od::document& doc) noexcept {
  const char* location = nullptr;
  return doc.current_location().get(location) == simdjson::OUT_OF_BOUNDS;
}

constexpr std::string_view kBytesAfterValue = "bytes after the JSON value";

// Whether `json` starts with a complete object or array that is followed by
// more than whitespace: what simdjson reports as an unclosed object when the
// last byte is not the closing bracket. Called only once simdjson has refused
// the document, to name the fault; it skips strings and counts brackets,
// nothing more.
bool has_bytes_after_value(std::string_view json) noexcept {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && depth > 0 && --depth == 0) {
      return json.find_first_not_of(" \t\n\r", i + 1) != std::string_view::npos;
    }
  }
  return false;
}

// The code unit written as the four hex digits `digits` starts with;
// nullopt when it does not start with four.
std::optional<std::uint32_t> hex4(std::string_view digits) noexcept {
  std::uint32_t unit = 0;
  if (digits.size() < 4) return std::nullopt;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + 4, unit, 16);
  if (ec != std::errc{} || end != digits.data() + 4) return std::nullopt;
  return unit;
}

void append_utf8(std::string& out, std::uint32_t code) {
  if (code < 0x80) {
    out.push_back(static_cast<char>(code));
  } else if (code < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code >> 6)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else if (code < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
}

// A JSON string's text between its quotes, escapes as they are (simdjson's
// first pass has found where it ends and checked its UTF-8 and that it has no
// raw control character), read as Python's json reads it: escapes decoded,
// and a surrogate escape without its partner (`\ud800`) kept, in the WTF-8
// form Python gives that code unit with "surrogatepass", where simdjson 3.0
// refuses the whole body. vLLM accepts such a string, so the warden must not
// turn the request away for it. `lone` says whether there was one. Without a
// backslash the text is a view of `content`; otherwise it is decoded into
// `scratch`. STRING_ERROR for an unknown escape or bad hex digits, as
// simdjson reports them.
error_code read_json_string(std::string_view content, std::string& scratch, std::string_view& text,
                            bool& lone) {
  lone = false;
  std::size_t at = content.find('\\');
  if (at == std::string_view::npos) {
    text = content;
    return simdjson::SUCCESS;
  }
  scratch.clear();
  std::size_t from = 0;
  while (at != std::string_view::npos) {
    scratch.append(content.substr(from, at - from));
    if (at + 1 >= content.size()) return simdjson::STRING_ERROR;
    const char escape = content[at + 1];
    from = at + 2;
    // The escapes of one character, and what each stands for.
    constexpr std::string_view kEscaped = "\"\\/bfnrt";
    constexpr std::string_view kMeant = "\"\\/\b\f\n\r\t";
    if (const std::size_t simple = kEscaped.find(escape); simple != std::string_view::npos) {
      scratch.push_back(kMeant[simple]);
    } else if (escape == 'u') {
      const std::optional<std::uint32_t> unit = hex4(content.substr(from));
      if (!unit) return simdjson::STRING_ERROR;
      from += 4;
      std::uint32_t code = *unit;
      if (code >= 0xD800 && code <= 0xDBFF && content.substr(from, 2) == "\\u") {
        const std::optional<std::uint32_t> low = hex4(content.substr(from + 2));
        if (low && *low >= 0xDC00 && *low <= 0xDFFF) {
          code = 0x10000 + ((code - 0xD800) << 10) + (*low - 0xDC00);
          from += 6;
        }
      }
      if (code >= 0xD800 && code <= 0xDFFF) lone = true;
      append_utf8(scratch, code);
    } else {
      return simdjson::STRING_ERROR;
    }
    at = content.find('\\', from);
  }
  scratch.append(content.substr(from));
  text = scratch;
  return simdjson::SUCCESS;
}

// The text between the quotes of a string token as raw_json_token() gives it
// (the token may run on over whitespace after its closing quote): bounded, so
// found without a loop over its bytes, which matters for long escaped values
// (Claude Code's metadata.user_id).
std::string_view between_quotes(std::string_view token) noexcept {
  const std::size_t close = token.rfind('"');
  if (close == 0 || close == std::string_view::npos) return {};
  return token.substr(1, close - 1);
}

// A key's text between its quotes, from just after its opening quote
// (where raw_json_string points): up to the first quote that no backslash
// escapes. Keys are short.
std::string_view key_text(const char* start) noexcept {
  const char* p = start;
  while (*p != '"') p += *p == '\\' ? 2 : 1;
  return {start, static_cast<std::size_t>(p - start)};
}

void fail(BodyScan& out, BodyError kind, std::string_view detail) {
  out.error = kind;
  out.error_detail.assign(detail);
}

// One pass over an object, descending only into keys the trie names.
class Walker {
 public:
  Walker(const BodyFields& fields, BodyScan& out) noexcept
      : nodes_(fields.nodes()), opening_(fields.opening()), out_(out) {}

  error_code walk(od::object& object, std::uint32_t node_index) noexcept {
    for (auto field_result : object) {
      od::field field;
      if (auto error = std::move(field_result).get(field)) return error;
      // A key with a lone surrogate names none of ours (all ASCII): skipped.
      std::string_view key;
      bool lone = false;
      if (auto error = read_json_string(key_text(field.key().raw()), key_scratch_, key, lone))
        return error;
      const std::uint32_t child = find_child(node_index, key);
      if (child != kNoChild) {
        if (auto error = read(field.value(), child)) return error;
      } else if (node_index == 0 && opening_) {
        if (auto error = read_opening(key, field.value())) return error;
      }  // else the iterator skips the value
    }
    return simdjson::SUCCESS;
  }

 private:
  static constexpr std::uint32_t kNoChild = UINT32_MAX;

  std::uint32_t find_child(std::uint32_t node_index, std::string_view key) const noexcept {
    for (std::uint32_t child : nodes_[node_index].children)
      if (nodes_[child].key == key) return child;
    return kNoChild;
  }

  // Forgets what earlier occurrences of a key left under `node_index`: the
  // last occurrence of a repeated key wins, whatever its type, as in Python's
  // json (vLLM). {"model":"a","model":5} names no model.
  void clear(std::uint32_t node_index) noexcept {
    const BodyFields::Node& node = nodes_[node_index];
    switch (node.builtin) {
      case BodyFields::Builtin::kModel:
        out_.model.clear();
        break;
      case BodyFields::Builtin::kStream:
        out_.stream = false;
        break;
      case BodyFields::Builtin::kIncludeUsage:
        out_.stream_include_usage = false;
        break;
      case BodyFields::Builtin::kPreviousResponseId:
        out_.previous_response = 0;
        break;
      case BodyFields::Builtin::kStore:
        out_.store = true;
        break;
      case BodyFields::Builtin::kStreamOptions:  // present is present, whatever came last
      case BodyFields::Builtin::kNone:
        break;
    }
    if (node.slot >= 0) out_.values[static_cast<std::size_t>(node.slot)].clear();
    for (std::uint32_t child : node.children) clear(child);
  }

  // A top-level key of the conversation's opening; its last occurrence counts.
  error_code read_opening(std::string_view key, od::value& value) noexcept {
    using opening::Part;
    const Part part = opening::part_of(key);
    std::uint64_t hash = 0;
    if (part == Part::kNone) return simdjson::SUCCESS;
    if (auto error = opening::hash_part(part, value, hash)) return error;
    switch (part) {
      case Part::kSystem:
        out_.opening_system = hash;
        break;
      case Part::kMessages:
        out_.opening_messages = hash;
        break;
      case Part::kInput:
        out_.opening_input = hash;
        break;
      case Part::kNone:
        break;
    }
    return simdjson::SUCCESS;
  }

  error_code read(od::value& value, std::uint32_t node_index) noexcept {
    clear(node_index);
    const BodyFields::Node& node = nodes_[node_index];
    if (node.builtin == BodyFields::Builtin::kStreamOptions) out_.has_stream_options = true;
    od::json_type type;
    if (auto error = value.type().get(type)) return error;
    // `store` is on only while absent or true: false, null (None in vLLM's
    // model, which it takes as off) and anything else turn it off.
    if (node.builtin == BodyFields::Builtin::kStore && type != od::json_type::boolean)
      out_.store = false;
    switch (type) {
      case od::json_type::string: {
        if (node.slot < 0 && node.builtin != BodyFields::Builtin::kModel &&
            node.builtin != BodyFields::Builtin::kPreviousResponseId)
          return simdjson::SUCCESS;
        // The token's text first (not consumed), then the value consumed.
        const std::string_view content = between_quotes(value.raw_json_token());
        od::raw_json_string raw;
        if (auto error = value.get_raw_json_string().get(raw)) return error;
        std::string_view text;
        bool lone = false;
        if (auto error = read_json_string(content, value_scratch_, text, lone)) return error;
        // A model name goes into replies and logs, which carry UTF-8 only;
        // no model served here has a lone surrogate in its name.
        if (node.builtin == BodyFields::Builtin::kModel && lone) return simdjson::STRING_ERROR;
        if (node.builtin == BodyFields::Builtin::kModel) out_.model.assign(text);
        if (node.builtin == BodyFields::Builtin::kPreviousResponseId && !text.empty())
          out_.previous_response = stable_hash(text);
        if (node.slot >= 0) out_.values[static_cast<std::size_t>(node.slot)].assign(text);
        return simdjson::SUCCESS;
      }
      case od::json_type::boolean: {
        bool flag = false;
        switch (node.builtin) {
          case BodyFields::Builtin::kStream:
          case BodyFields::Builtin::kIncludeUsage:
          case BodyFields::Builtin::kStore:
            if (auto error = value.get_bool().get(flag)) return error;
            break;
          default:
            return simdjson::SUCCESS;
        }
        (node.builtin == BodyFields::Builtin::kStream         ? out_.stream
         : node.builtin == BodyFields::Builtin::kIncludeUsage ? out_.stream_include_usage
                                                              : out_.store) = flag;
        return simdjson::SUCCESS;
      }
      case od::json_type::object: {
        if (node.children.empty()) return simdjson::SUCCESS;
        od::object inner;
        if (auto error = value.get_object().get(inner)) return error;
        return walk(inner, node_index);
      }
      default:
        // Numbers, nulls, arrays: nothing we read lives there; skipped.
        return simdjson::SUCCESS;
    }
  }

  const std::vector<BodyFields::Node>& nodes_;
  const bool opening_;
  BodyScan& out_;
  std::string key_scratch_;    // a key with escapes, decoded
  std::string value_scratch_;  // a string value with escapes, decoded
};

// Parsers keep buffers sized to the largest document they have seen (about
// five bytes per input byte), so each thread keeps one for ordinary bodies and
// a rare huge body gets a parser of its own that is freed afterwards.
constexpr std::size_t kRetainedBodyBytes = std::size_t{2} << 20;

struct ThreadScratch {
  od::parser parser;
  std::unique_ptr<char[]> padded;
  std::size_t padded_capacity = 0;
};

ThreadScratch& thread_scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

void scan_document(od::parser& parser, const char* data, std::size_t size, std::size_t capacity,
                   const BodyFields& fields, BodyScan& out) {
  od::document doc;
  if (auto error = parser.iterate(data, size, capacity).get(doc))
    return fail(out, BodyError::kMalformedJson, describe(error));
  od::json_type type;
  if (auto error = doc.type().get(type))
    return fail(out, BodyError::kMalformedJson, describe(error));
  if (type != od::json_type::object)
    return fail(out, BodyError::kNotAnObject, "the request body must be a JSON object");
  od::object object;
  if (auto error = doc.get_object().get(object)) {
    const bool trailing = error == simdjson::INCOMPLETE_ARRAY_OR_OBJECT &&
                          has_bytes_after_value(std::string_view(data, size));
    return fail(out, BodyError::kMalformedJson, trailing ? kBytesAfterValue : describe(error));
  }
  if (auto error = Walker(fields, out).walk(object, 0))
    return fail(out, BodyError::kMalformedJson, describe(error));
  if (!at_end(doc)) return fail(out, BodyError::kMalformedJson, kBytesAfterValue);
}

}  // namespace

std::optional<std::string_view> find_header(HeaderList headers, std::string_view name) noexcept {
  for (const auto& [field_name, value] : headers)
    if (ascii_iequals(field_name, name)) return value;
  return std::nullopt;
}

// ---------------------------------------------------------------- BodyFields

BodyFields::BodyFields() {
  nodes_.push_back(Node{});  // the top-level object
  nodes_[add_path("model")].builtin = Builtin::kModel;
  nodes_[add_path("stream")].builtin = Builtin::kStream;
  nodes_[add_path("stream_options.include_usage")].builtin = Builtin::kIncludeUsage;
  nodes_[add_path("stream_options")].builtin = Builtin::kStreamOptions;
  nodes_[add_path("previous_response_id")].builtin = Builtin::kPreviousResponseId;
  nodes_[add_path("store")].builtin = Builtin::kStore;
}

BodyFields::BodyFields(std::span<const config::SessionSource> sources) : BodyFields() {
  add(sources);
}

void BodyFields::add(std::span<const config::SessionSource> sources) {
  using Kind = config::SessionSource::Kind;
  for (const auto& source : sources) {
    std::string_view path;
    if (source.kind == Kind::kBody)
      path = source.name;
    else if (source.kind == Kind::kClaudeUserId)
      path = source.name.empty() ? kClaudeUserIdPath : source.name;
    else if (source.kind == Kind::kOpening)
      opening_ = true;
    else
      continue;
    if (path.empty()) continue;
    const std::uint32_t node = add_path(path);
    if (nodes_[node].slot < 0) {
      nodes_[node].slot = static_cast<int>(paths_.size());
      paths_.emplace_back(path);
    }
  }
}

std::uint32_t BodyFields::add_path(std::string_view dotted_path) {
  std::uint32_t node = 0;
  while (true) {
    const auto dot = dotted_path.find('.');
    const std::string_view segment = dotted_path.substr(0, dot);
    std::uint32_t next = UINT32_MAX;
    for (std::uint32_t child : nodes_[node].children)
      if (nodes_[child].key == segment) next = child;
    if (next == UINT32_MAX) {
      next = static_cast<std::uint32_t>(nodes_.size());
      nodes_.push_back(Node{.key = std::string(segment)});
      nodes_[node].children.push_back(next);
    }
    node = next;
    if (dot == std::string_view::npos) return node;
    dotted_path.remove_prefix(dot + 1);
  }
}

std::optional<std::size_t> BodyFields::slot_of(std::string_view dotted_path) const noexcept {
  for (std::size_t i = 0; i < paths_.size(); ++i)
    if (paths_[i] == dotted_path) return i;
  return std::nullopt;
}

// ------------------------------------------------------------------- scanning

BodyScan scan_body(std::string_view body, std::size_t body_capacity, const BodyFields& fields) {
  BodyScan out;
  out.values.resize(fields.slot_count());
  if (body.empty()) return out;
  // A UTF-8 byte order mark before the value is skipped, as vLLM's server
  // skips it (common/json_text.h). Only the start moves; the padding after
  // the end stays where it was.
  if (body.starts_with(kUtf8ByteOrderMark)) {
    body.remove_prefix(kUtf8ByteOrderMark.size());
    body_capacity =
        body_capacity > kUtf8ByteOrderMark.size() ? body_capacity - kUtf8ByteOrderMark.size() : 0;
  }

  const bool padded = body_capacity >= body.size() + simdjson::SIMDJSON_PADDING;
  if (body.size() > kRetainedBodyBytes) {
    od::parser parser;
    if (padded) {
      scan_document(parser, body.data(), body.size(), body_capacity, fields, out);
    } else {
      auto copy = simdjson::padded_string(body);  // zero-filled padding
      scan_document(parser, copy.data(), copy.size(), copy.size() + simdjson::SIMDJSON_PADDING,
                    fields, out);
    }
    return out;
  }

  ThreadScratch& scratch = thread_scratch();
  if (padded) {
    scan_document(scratch.parser, body.data(), body.size(), body_capacity, fields, out);
    return out;
  }
  const std::size_t needed = body.size() + simdjson::SIMDJSON_PADDING;
  if (scratch.padded_capacity < needed) {
    // Grow geometrically up to the retained bound, so a slowly growing
    // conversation does not reallocate on every turn.
    const std::size_t grown = std::min(std::max(needed, scratch.padded_capacity * 2),
                                       kRetainedBodyBytes + simdjson::SIMDJSON_PADDING);
    scratch.padded = std::make_unique_for_overwrite<char[]>(grown);
    scratch.padded_capacity = grown;
  }
  std::memcpy(scratch.padded.get(), body.data(), body.size());
  std::memset(scratch.padded.get() + body.size(), 0, simdjson::SIMDJSON_PADDING);
  scan_document(scratch.parser, scratch.padded.get(), body.size(), scratch.padded_capacity, fields,
                out);
  return out;
}

// ------------------------------------------------------------------- identity

std::optional<int> parse_client_rank(std::string_view value) noexcept {
  std::string_view s = trim_python_ws(value);
  bool negative = false;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return std::nullopt;
  long long magnitude = 0;
  bool previous_digit = false;
  for (char c : s) {
    if (c == '_') {
      if (!previous_digit) return std::nullopt;  // leading or doubled '_'
      previous_digit = false;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    // Saturate: a rank this large is out of range either way.
    if (magnitude <= INT_MAX) magnitude = magnitude * 10 + (c - '0');
    previous_digit = true;
  }
  if (!previous_digit) return std::nullopt;  // trailing '_'
  if (negative) return magnitude > INT_MAX ? INT_MIN : static_cast<int>(-magnitude);
  return magnitude > INT_MAX ? INT_MAX : static_cast<int>(magnitude);
}

std::optional<std::string> decode_claude_user_id(std::string_view user_id) {
  const std::string_view trimmed = trim_python_ws(user_id);

  if (!trimmed.empty() && trimmed.front() == '{') {
    // Claude Code 2.x: the field holds JSON text. A parser of its own: this
    // may run while the thread's body parser still holds a document.
    thread_local od::parser parser;
    thread_local std::string buffer;
    buffer.assign(trimmed);
    buffer.resize(trimmed.size() + simdjson::SIMDJSON_PADDING, '\0');
    od::document doc;
    od::object object;
    if (parser.iterate(buffer.data(), trimmed.size(), buffer.size()).get(doc)) return std::nullopt;
    if (doc.get_object().get(object)) return std::nullopt;
    std::optional<std::string> session;
    for (auto field_result : object) {
      od::field field;
      std::string_view key;
      if (std::move(field_result).get(field) || field.unescaped_key().get(key)) return std::nullopt;
      if (key != "session_id") continue;
      std::string_view id;
      if (field.value().get_string().get(id)) return std::nullopt;
      session = id.empty() ? std::nullopt : std::optional<std::string>(id);
    }
    if (!at_end(doc)) return std::nullopt;
    return session;
  }

  // Claude Code 1.x: user_<hex>_account_<uuid or empty>_session_<uuid>.
  constexpr std::string_view kUser = "user_", kAccount = "_account_", kSession = "_session_";
  if (!trimmed.starts_with(kUser)) return std::nullopt;
  const auto account = trimmed.find(kAccount, kUser.size());
  if (account == std::string_view::npos || account == kUser.size()) return std::nullopt;
  const auto session = trimmed.find(kSession, account + kAccount.size());
  if (session == std::string_view::npos) return std::nullopt;
  const std::string_view id = trimmed.substr(session + kSession.size());
  constexpr std::size_t kMaxIdLength = 64;  // a UUID is 36
  const bool uuid_alphabet = std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-';
  });
  if (id.empty() || id.size() > kMaxIdLength || !uuid_alphabet) return std::nullopt;
  return std::string(id);
}

Identity resolve_identity(HeaderList headers, const BodyScan& scan, const BodyFields& fields,
                          const IdentityOptions& options, std::string* session_id) {
  using Kind = config::SessionSource::Kind;
  Identity identity;
  if (scan.error != BodyError::kNone) return identity;
  identity.previous_response = scan.previous_response;

  if (options.honor_client_rank) {
    if (auto value = find_header(headers, kDataParallelRankHeader)) {
      if (auto rank = parse_client_rank(*value)) {
        identity.kind = IdentityKind::kPinned;
        identity.pinned_rank = *rank;
        return identity;
      }
    }
  }

  auto body_value = [&](std::string_view path) -> std::string_view {
    const auto slot = fields.slot_of(path);
    return slot && *slot < scan.values.size() ? std::string_view(scan.values[*slot])
                                              : std::string_view();
  };

  for (std::size_t index = 0; index < options.sources.size(); ++index) {
    const config::SessionSource& source = options.sources[index];
    std::string_view value;
    std::optional<std::string> decoded;  // a Claude user_id's session, owned
    switch (source.kind) {
      case Kind::kHeader:
        if (auto header = find_header(headers, source.name)) value = trim_ows(*header);
        break;
      case Kind::kBody:
        value = body_value(source.name);
        break;
      case Kind::kClaudeUserId:
        if (const std::string_view text =
                body_value(source.name.empty() ? kClaudeUserIdPath : std::string_view(source.name));
            !text.empty() && (decoded = decode_claude_user_id(text)))
          value = *decoded;
        break;
      case Kind::kOpening: {
        const std::uint64_t turns =
            scan.opening_messages ? scan.opening_messages : scan.opening_input;
        if (scan.previous_response != 0 || (scan.opening_system == 0 && turns == 0)) break;
        identity.kind = IdentityKind::kSession;
        identity.session_hash = opening::key(scan.opening_system, turns);
        identity.source = static_cast<int>(index);
        if (session_id) session_id->clear();
        return identity;
      }
    }
    if (!value.empty()) {
      identity.kind = IdentityKind::kSession;
      identity.session_hash = stable_hash(value);
      identity.source = static_cast<int>(index);
      if (session_id) session_id->assign(value);
      return identity;
    }
  }
  return identity;
}

ExtractResult extract_request_facts(HeaderList headers, std::string_view body,
                                    std::size_t body_capacity, const IdentityOptions& options) {
  // The default sources' trie is built once (most models keep the defaults);
  // building it per request cost a dozen allocations.
  static const std::vector<config::SessionSource> kDefaultSources =
      config::default_session_sources();
  static const BodyFields kDefaultFields(kDefaultSources);
  std::optional<BodyFields> own;
  const BodyFields& fields =
      options.sources == kDefaultSources ? kDefaultFields : own.emplace(options.sources);
  BodyScan scan = scan_body(body, body_capacity, fields);
  ExtractResult result;
  result.facts.identity =
      resolve_identity(headers, scan, fields, options, &result.facts.session_id);
  result.facts.model = std::move(scan.model);
  result.facts.stream = scan.stream;
  result.facts.stream_include_usage = scan.stream_include_usage;
  result.facts.has_stream_options = scan.has_stream_options;
  result.facts.store = scan.store;
  result.error = scan.error;
  result.error_detail = std::move(scan.error_detail);
  return result;
}

}  // namespace lmwarden::core
