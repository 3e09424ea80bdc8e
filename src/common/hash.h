// Stable 64-bit hashing of conversation ids. Stable across runs and builds, so
// the short hash in a log line can be matched to the same conversation later.
// Because anyone can compute it, a table keyed by it salts it with
// process_hash_seed() before hashing (core/session_table.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lmwarden {

// FNV-1a followed by a 64-bit finaliser (splitmix64) so that ids differing only
// in their last characters still spread over all bits.
constexpr std::uint64_t stable_hash(std::string_view s) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

// Eight hex digits of the hash: what logs show instead of the id itself.
std::string short_hash(std::uint64_t h);

// 64 random bits drawn once per process (std::random_device) at first use, for
// salting the hashes of tables whose keys clients choose, so that no client
// can pick keys that crowd into one probe group. Differs between processes
// and runs: never use it for anything that must match elsewhere (logs,
// another process, expected values in tests); that is stable_hash's job.
std::uint64_t process_hash_seed() noexcept;

}  // namespace lmwarden
