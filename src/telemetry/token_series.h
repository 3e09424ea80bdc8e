// Tokens per second — prompt cached, prompt computed, completion — for one
// replica, kept for the stats page and GET /api/stats (DESIGN §7.2, §7.3).
//
// Storage: two rings of fixed size, allocated once.
//   fine    1 s  slots × 3600  = the last hour at 1 s resolution
//   coarse  10 s slots × 2160  = the last six hours at 10 s
// Every record goes to both, so a query picks the finest ring that covers its
// window. A slot remembers which second (or ten) it holds, so a ring needs no
// sweeping: a slot holding another time reads as zero and is reset when
// written. Memory is constant, memory_bytes() (≈ 140 KiB per replica),
// whatever the traffic or the uptime.
//
// Time is unix time from the caller (std::chrono::system_clock, injected, so
// tests use a fake clock and the UI can label buckets as they are). A record
// older than what its slot now holds (a clock step back beyond the ring) is
// dropped rather than allowed to overwrite newer data.
//
// Attribution: record_request() puts a request's prompt tokens at its first
// token (prefill is done by then) and spreads its completion tokens evenly over
// the seconds from first token to end, which is what a tokens-per-second chart
// of a streaming server should show; record() puts everything at one instant.
//
// Thread-safety: internally synchronised. record*() and query() take a mutex
// per series; the I/O threads that finish requests on one replica at the same
// instant are the only contenders, and a record holds it for a few slot writes
// (a spread over a long request for at most one pass over its seconds).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace lmwarden::telemetry {

using WallClock = std::chrono::system_clock;
using WallTime = WallClock::time_point;

struct TokenCounts {
  std::uint64_t cached = 0;    // prompt tokens served from the prefix cache
  std::uint64_t computed = 0;  // prompt tokens prefilled
  std::uint64_t completion = 0;

  std::uint64_t prompt() const noexcept { return cached + computed; }
  TokenCounts& operator+=(const TokenCounts& o) noexcept;
  friend bool operator==(const TokenCounts&, const TokenCounts&) = default;
};

struct TokenBucket {
  std::int64_t start_unix_s = 0;  // the bucket covers [start, start + step)
  TokenCounts tokens;             // tokens in the bucket; rate = tokens / step
};

struct TokenWindow {
  std::chrono::seconds step{1};
  std::vector<TokenBucket> buckets;  // oldest first, contiguous, the last holds "now"
  TokenCounts total;

  // Share of prompt tokens served from cache over the window; nullopt when no
  // prompt tokens were recorded.
  std::optional<double> cache_hit_ratio() const noexcept;
  // Adds another replica's window of the same query (same now, window, step):
  // a model's series is the sum of its replicas'. An empty (default) window
  // takes the shape of the first one added.
  void add(const TokenWindow& other);
};

class TokenSeries {
 public:
  static constexpr std::chrono::seconds kFineResolution{1};
  static constexpr std::size_t kFineSlots = 3600;
  static constexpr std::chrono::seconds kCoarseResolution{10};
  static constexpr std::size_t kCoarseSlots = 2160;
  static constexpr std::chrono::seconds kMaxWindow{kCoarseResolution * kCoarseSlots};

  TokenSeries();
  TokenSeries(const TokenSeries&) = delete;
  TokenSeries& operator=(const TokenSeries&) = delete;

  void record(WallTime at, const TokenCounts& tokens) noexcept;
  void record_request(WallTime first_token, WallTime end, const TokenCounts& tokens) noexcept;

  // Buckets of `step` (rounded up to the ring's resolution: 1 s for windows up
  // to an hour, 10 s beyond) aligned to multiples of step in unix time, the
  // last one containing `now`; enough of them to cover `window` (at most
  // kMaxWindow).
  TokenWindow query(WallTime now, std::chrono::seconds window,
                    std::chrono::seconds step = std::chrono::seconds{1}) const;

  static constexpr std::size_t memory_bytes() noexcept {
    return sizeof(TokenSeries) + (kFineSlots + kCoarseSlots) * sizeof(Slot);
  }

 private:
  struct Slot {
    std::int64_t index = INT64_MIN;  // which resolution-sized interval of unix time
    std::uint32_t cached = 0;
    std::uint32_t computed = 0;
    std::uint32_t completion = 0;
  };
  struct Ring {
    std::int64_t resolution_s;
    std::vector<Slot> slots;
    void add(std::int64_t unix_s, const TokenCounts& tokens) noexcept;
    TokenCounts sum(std::int64_t from_unix_s, std::int64_t to_unix_s) const noexcept;
  };

  void add_locked(std::int64_t unix_s, const TokenCounts& tokens) noexcept;

  mutable std::mutex mutex_;
  Ring fine_;
  Ring coarse_;
};

}  // namespace lmwarden::telemetry
