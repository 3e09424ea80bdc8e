// The file of conversation homes kept across a restart (config `saved_homes`;
// proxy/home_saver.h writes and reads it). One JSON document:
//
//   {"lmwarden_saved_homes": 1,
//    "saved_at_unix_ms": 1764950000123,
//    "models": [
//     {"name": "qwen3-coder",
//      "servers": ["http://10.0.0.1:8000", "http://10.0.0.2:8000"],
//      "conversations": [
//       ["9f3a0c11d2e4b5a6", 1, 0, 12345],
//       ...],
//      "responses": [
//       ...]}]}
//
// Each home is [key, server, rank, idle ms]: the conversation's (or stored
// response's) 64-bit key as 16 hex digits (the stable hash of its id, never
// the id itself), its server as an index into "servers" (named as shared
// homes name them: server_name), its rank there, and how long it had been
// idle when the file was written. Each list is least recently used first,
// one home per line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace lmwarden::proxy {

struct SavedHome {
  std::uint64_t key = 0;
  int server = 0;  // index into SavedModel::servers
  int rank = 0;
  std::int64_t idle_ms = 0;

  bool operator==(const SavedHome&) const = default;
};

struct SavedModel {
  std::string name;
  std::vector<std::string> servers;
  std::vector<SavedHome> conversations;  // least recently used first
  std::vector<SavedHome> responses;      // stored Responses API responses, the same
};

struct SavedHomes {
  std::int64_t saved_at_unix_ms = 0;
  std::vector<SavedModel> models;
};

inline constexpr int kSavedHomesVersion = 1;
// What a file may say, at most: a rank (data_parallel_size is at most
// 1024), an idle time (about 31,700 years), a time of writing (the year 3000).
inline constexpr std::int64_t kMaxSavedRank = 1023;
inline constexpr std::int64_t kMaxSavedIdleMs = 1'000'000'000'000'000;
inline constexpr std::int64_t kMaxSavedAtUnixMs = 32'503'680'000'000;

// The file's text.
std::string format_saved_homes(const SavedHomes& homes);
// The file read back, or what is wrong with it (where it can say, the model
// and list at fault).
Result<SavedHomes, std::string> parse_saved_homes(std::string_view text);

}  // namespace lmwarden::proxy
