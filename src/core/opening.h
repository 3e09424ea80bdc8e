// A conversation's opening, for clients that send no session id: what it
// starts with and every later turn resends unchanged — its system prompt and
// the client's leading messages (system, developer and user ones: the
// instructions, the context, the task), up to the model's first reply. Two
// requests with the same opening are taken for turns of one conversation
// (the `opening` session source, config::SessionSource::Kind::kOpening).
//
// Hashed, never kept: XXH3 over the raw JSON tokens of the text (escapes as
// the client wrote them), with the roles and block types between them. Other
// keys are left out, so a client that moves its `cache_control` marks from
// one turn to the next, or adds ids to its items, keeps its opening.
//
// Read by the body scan (core/identity.cpp) from the top-level keys
//   system, instructions   Anthropic's system (a string or text blocks);
//                           Responses' instructions
//   messages, input        Chat Completions and Anthropic messages; Responses
//                           input (a string, or items, of which the leading
//                           `message` items from the client count); when a
//                           body has both, `messages`
// A Responses request chained to a stored one (`previous_response_id`, read
// by the scan as a field of its own) has no opening: its body carries only
// its new turn.
// Internal to the core: the only includer of simdjson's on-demand types
// besides identity.cpp.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <string_view>

namespace lmwarden::core::opening {

// The conversation key of an opening's two hashes (either may be 0, absent,
// but not both).
std::uint64_t key(std::uint64_t system, std::uint64_t turns) noexcept;

// Which part a top-level key feeds, if any.
enum class Part { kNone, kSystem, kMessages, kInput };
Part part_of(std::string_view top_level_key) noexcept;

// Hashes `value` as that part and consumes what it reads of it (the rest is
// skipped by the caller's iterator). Sets `out` to 0 when the value holds no
// text of a conversation (a number, an empty list, …), to a non-zero hash
// otherwise.
simdjson::error_code hash_part(Part part, simdjson::ondemand::value& value,
                               std::uint64_t& out) noexcept;

}  // namespace lmwarden::core::opening
