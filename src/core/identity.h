// Conversation identity and the few request fields the warden looks at.
//
// The request body is scanned once with simdjson's on-demand parser: only
// `model`, `stream`, `stream_options.include_usage` and the configured body
// session sources are read; everything else (the 100 KB of history) is skipped,
// and the original bytes are what gets forwarded. Header and body sources are
// tried in the configured order (DESIGN §4); the first non-empty value wins.
#pragma once

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

// Case-insensitive header lookup; the first field with that name.
std::optional<std::string_view> find_header(HeaderList headers, std::string_view name) noexcept;

enum class IdentityKind { kAnonymous, kSession, kPinned };

struct Identity {
  IdentityKind kind = IdentityKind::kAnonymous;
  int pinned_rank = -1;            // kPinned: the client's X-data-parallel-rank
  std::string session_id;          // kSession: the raw id (never logged)
  std::uint64_t session_hash = 0;  // kSession: stable_hash(session_id)
  std::string source;              // kSession: SessionSource::label() that matched
};

struct IdentityOptions {
  std::vector<config::SessionSource> sources = config::default_session_sources();
  bool honor_client_rank = true;
};

// What the warden needs from one request.
struct RequestFacts {
  std::string model;                 // "" when absent
  bool stream = false;
  bool stream_include_usage = false; // stream_options.include_usage == true
  Identity identity;
};

enum class BodyError { kNone, kMalformedJson, kNotAnObject };

struct ExtractResult {
  RequestFacts facts;
  BodyError error = BodyError::kNone;
  std::string error_detail;  // human-readable, for the 400 message
};

// Headers are looked up case-insensitively. `body` may be empty (no body); it
// need not be padded: a body whose buffer has at least simdjson::SIMDJSON_PADDING
// spare bytes after it (pass capacity) is parsed in place, otherwise copied.
ExtractResult extract_request_facts(HeaderList headers, std::string_view body,
                                    std::size_t body_capacity, const IdentityOptions& options);

// Claude Code's metadata.user_id → session id: a JSON string
// {"device_id":…,"account_uuid":…,"session_id":…} (2.x), or the legacy
// user_<hex>_account_<…>_session_<uuid> (1.x). nullopt when neither shape.
std::optional<std::string> decode_claude_user_id(std::string_view user_id);

}  // namespace lmwarden::core
