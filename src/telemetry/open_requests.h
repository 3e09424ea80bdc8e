// Replies that have begun and whose tokens are not booked yet, counted by the
// second of their first byte, so that the token chart can tell which of its
// seconds are final (DESIGN §7.3).
//
// A request's usage is read from its reply and booked when the reply ends
// (TokenSeries::record_request), at the second of its first byte (prompt) and
// spread from there to its end (completion). Until then the chart's seconds
// from its first byte on are short of its tokens: with coding agents' replies
// of tens of seconds, the last tens of seconds of the chart always read low
// and fill in afterwards. The oldest open second says where that starts.
//
// Storage: one counter per second in a ring of kSlots seconds (about 68
// minutes), allocated with the model; open() and close() are one atomic add
// each and take no lock. A reply open for longer than the ring counts as if it
// had begun a multiple of kSlots seconds later (its slot is shared), so the
// oldest open second can then read later than it is.
//
// Thread-safety: open() and close() from any thread. close() comes after the
// request's tokens are booked and releases them: a snapshot() that no longer
// counts a request, followed by a query of the series, sees its tokens.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "telemetry/token_series.h"

namespace lmwarden::telemetry {

class OpenRequests {
 public:
  static constexpr std::size_t kSlots = 4096;

  struct Snapshot {
    std::optional<std::int64_t> oldest_unix_s;  // the oldest open first byte's second
    std::uint64_t count = 0;                    // requests open
  };

  OpenRequests() = default;
  OpenRequests(const OpenRequests&) = delete;
  OpenRequests& operator=(const OpenRequests&) = delete;

  // Counts a reply whose first byte came at `first_byte`; returns the second
  // to hand back to close() once its tokens are booked.
  std::int64_t open(WallTime first_byte) noexcept;
  void close(std::int64_t unix_s) noexcept;

  // The open replies as of `now`: seconds later than `now` (a clock stepped
  // back) count as kSlots seconds earlier.
  Snapshot snapshot(WallTime now) const noexcept;

 private:
  static std::size_t slot(std::int64_t unix_s) noexcept;

  std::array<std::atomic<std::uint32_t>, kSlots> counts_{};
};

}  // namespace lmwarden::telemetry
