// Stable 64-bit hashing of conversation ids. Stable across runs and builds, so
// the short hash in a log line can be matched to the same conversation later.
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

}  // namespace lmwarden
