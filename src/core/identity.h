// Conversation identity and the few request fields the warden looks at.
//
// The request body is scanned once with simdjson's on-demand parser: only
// `model`, `stream`, `stream_options.include_usage`, whether `stream_options`
// is there at all, Responses' `previous_response_id` and `store`, and the
// configured body session sources are read (with an `opening` source, also
// the system prompt and the leading messages, hashed: core/opening.h);
// everything else (the history) is skipped, and the original bytes are what
// gets forwarded. Header and body sources are tried in the configured
// order (DESIGN §4); the first non-empty value wins.
//
// Two ways in:
//  - extract_request_facts(): one call, when the identity options are known
//    before the body is read (tests, the offline evaluator, a single model).
//  - scan_body() + resolve_identity(): for the proxy, where the options belong
//    to the model and the model is named inside the body. Build one BodyFields
//    from every model's sources at start, scan once, look the model up, then
//    resolve with that model's options. Still a single pass over the body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"

namespace lmwarden::core {

using HeaderField = std::pair<std::string_view, std::string_view>;  // name, value
using HeaderList = std::span<const HeaderField>;

// The header a client (or the warden itself) uses to pin a vLLM DP rank.
inline constexpr std::string_view kDataParallelRankHeader = "x-data-parallel-rank";

// Case-insensitive header lookup; the first field with that name.
std::optional<std::string_view> find_header(HeaderList headers, std::string_view name) noexcept;

enum class IdentityKind { kAnonymous, kSession, kPinned };

struct Identity {
  IdentityKind kind = IdentityKind::kAnonymous;
  // kPinned: the client's X-data-parallel-rank, as vLLM would read it. It may be
  // negative or beyond the model's replicas; the router answers 400 then, as
  // vLLM does. Values beyond int saturate (still out of range).
  int pinned_rank = -1;
  // kSession: stable_hash of the raw id. The raw id itself is not kept here
  // (the router needs only the hash, and a UUID would be an allocation per
  // request); resolve_identity hands it out on request.
  std::uint64_t session_hash = 0;
  // kSession: which of the IdentityOptions' sources matched, by its index
  // there (sources[source].label() names it); -1 otherwise. An index, not a
  // label, so that resolving an identity builds no string for it.
  int source = -1;
  // A Responses request chained to a stored response: stable_hash of its
  // `previous_response_id`, whatever the kind (0: none). The stored response
  // lives only on the server that made it, so the router sends the request
  // there when it knows where that is (Router::remember_response).
  std::uint64_t previous_response = 0;

  bool operator==(const Identity&) const = default;
};

struct IdentityOptions {
  std::vector<config::SessionSource> sources = config::default_session_sources();
  bool honor_client_rank = true;
};

// What the warden needs from one request. A key repeated in the body counts
// by its last occurrence alone, whatever the type of the earlier ones, as in
// Python's json (vLLM): {"model":"a","model":null} names no model.
struct RequestFacts {
  std::string model;                  // "" when absent or not a string
  bool stream = false;                // `stream` is JSON true
  bool stream_include_usage = false;  // stream_options.include_usage is JSON true
  bool has_stream_options = false;    // the body has a top-level stream_options key
  bool store = true;                  // BodyScan::store
  Identity identity;
  std::string session_id;  // kSession: the raw id (never logged); "" otherwise and for `opening`
};

enum class BodyError { kNone, kMalformedJson, kNotAnObject };

struct ExtractResult {
  RequestFacts facts;
  BodyError error = BodyError::kNone;
  std::string error_detail;  // human-readable, for the 400 message
};

// The set of body fields one scan collects: the three fixed ones plus every
// dotted path named by the session sources it was built from, compiled into a
// small trie so that the scan compares each key it meets with a handful of
// candidates at most. Build once at start; const use is thread-safe.
class BodyFields {
 public:
  BodyFields();
  explicit BodyFields(std::span<const config::SessionSource> sources);

  // Adds the body paths of `sources` (kBody and kClaudeUserId); a path already
  // present keeps its slot. An `opening` source has the scan hash the
  // conversation's opening too (core/opening.h).
  void add(std::span<const config::SessionSource> sources);

  bool opening() const noexcept { return opening_; }

  // Slot of a dotted path in BodyScan::values, nullopt when not collected.
  std::optional<std::size_t> slot_of(std::string_view dotted_path) const noexcept;
  std::size_t slot_count() const noexcept { return paths_.size(); }

  // Internals, for the scanner.
  enum class Builtin : std::uint8_t {
    kNone,
    kModel,
    kStream,
    kStreamOptions,
    kIncludeUsage,
    kPreviousResponseId,
    kStore
  };
  struct Node {
    std::string key;                      // one path segment
    std::vector<std::uint32_t> children;  // indexes into nodes()
    int slot = -1;                        // string value collected here, -1 none
    Builtin builtin = Builtin::kNone;
  };
  const std::vector<Node>& nodes() const noexcept { return nodes_; }

 private:
  std::uint32_t add_path(std::string_view dotted_path);

  std::vector<Node> nodes_;         // nodes_[0] is the top-level object
  std::vector<std::string> paths_;  // slot -> dotted path
  bool opening_ = false;
};

// The result of one pass over a body. Fields read as in RequestFacts; a key
// repeated at any level counts by its last occurrence alone (as in Python), so
// a string followed by a number or null reads as absent, and a `true` followed
// by anything but a boolean as false.
struct BodyScan {
  std::string model;                  // "" when absent or not a string
  bool stream = false;                // `stream` is JSON true
  bool stream_include_usage = false;  // stream_options.include_usage is JSON true
  // The top-level object has a `stream_options` key, whatever its value (null
  // included) and however often: the proxy adds one only when there is none.
  bool has_stream_options = false;
  // Per BodyFields slot: the string found there, "" when absent, empty or not a
  // string.
  std::vector<std::string> values;
  // With BodyFields::opening(): the hashes of the opening's system prompt and
  // of its leading messages from the client; 0 when absent (core/opening.h).
  std::uint64_t opening_system = 0;
  std::uint64_t opening_messages = 0;
  std::uint64_t opening_input = 0;
  // Responses' `previous_response_id`: stable_hash of the string, 0 when
  // absent, empty or not a string.
  std::uint64_t previous_response = 0;
  // Responses' `store` is on: absent or JSON true. vLLM keeps a response for
  // chaining only then (and only when started with its store enabled).
  bool store = true;
  BodyError error = BodyError::kNone;
  std::string error_detail;
};

// Scans `body` once. Never throws on any input (allocation failure aside).
// An empty body is no error. A UTF-8 byte order mark before the value is
// skipped, as Python's json.loads(bytes) in vLLM's server skips it (a body of
// nothing but the mark is an error). `body` is parsed in place when its buffer has
// simdjson::SIMDJSON_PADDING readable bytes after it (body_capacity >=
// body.size() + padding); otherwise it is copied into a padded buffer.
//
// Validation is what a single lazy pass affords: bad UTF-8, unterminated
// strings, control characters, brackets left open, trailing bytes and any
// fault in the fields read are reported; an invalid literal or a mismatched
// bracket deep inside a skipped value (`[tru]`, or `[1,2}` inside
// `messages`) is not — the body goes to vLLM as is and vLLM answers its own
// 400.
BodyScan scan_body(std::string_view body, std::size_t body_capacity, const BodyFields& fields);

// Applies DESIGN §4 to headers and a finished scan. A body source whose path is
// not among `fields` reads as absent. Anonymous when the scan failed. The raw
// session id goes to `session_id` when one is given (left as is otherwise).
Identity resolve_identity(HeaderList headers, const BodyScan& scan, const BodyFields& fields,
                          const IdentityOptions& options, std::string* session_id = nullptr);

// scan_body + resolve_identity with fields built from `options`.
ExtractResult extract_request_facts(HeaderList headers, std::string_view body,
                                    std::size_t body_capacity, const IdentityOptions& options);

// X-data-parallel-rank as vLLM reads it (Python int()): surrounding whitespace,
// an optional sign, digits with single '_' between them. nullopt when not an
// integer, in which case vLLM ignores the header and so does the warden.
std::optional<int> parse_client_rank(std::string_view value) noexcept;

// Claude Code's metadata.user_id → session id: a JSON string
// {"device_id":…,"account_uuid":…,"session_id":…} (2.x), or the legacy
// user_<hex>_account_<…>_session_<uuid> (1.x). nullopt when neither shape.
std::optional<std::string> decode_claude_user_id(std::string_view user_id);

}  // namespace lmwarden::core
