// A log line about events that can come thousands of times a second (503s
// with every replica down, refused PATCHes): written at most once per
// period, naming how many events came since the last line. Lock-free, for
// the request path.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>

#include "common/coarse_clock.h"

namespace lmwarden {

class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::seconds every) noexcept
      : every_(std::chrono::duration_cast<Ticks>(every).count()) {}

  // Counts one event. Returns how many to name in a line written now (this
  // one and those unsaid since the last line), or 0 when no line is due:
  // one was written less than a period ago (on the coarse clock: a period
  // from the last line, not whole seconds of the clock, by which two events
  // a millisecond apart on either side of a second both made a line).
  std::uint64_t note() noexcept { return note_at(coarse_steady_now()); }

  // The same at a given time (tests).
  std::uint64_t note_at(std::chrono::steady_clock::time_point at) noexcept {
    const std::int64_t now = std::chrono::duration_cast<Ticks>(at.time_since_epoch()).count();
    const std::uint64_t events = unsaid_.fetch_add(1, std::memory_order_relaxed) + 1;
    std::int64_t last = said_at_.load(std::memory_order_relaxed);
    if (last > now - every_ ||
        !said_at_.compare_exchange_strong(last, now, std::memory_order_relaxed))
      return 0;
    unsaid_.fetch_sub(events, std::memory_order_relaxed);
    return events;
  }

 private:
  using Ticks = std::chrono::milliseconds;
  const std::int64_t every_;  // in Ticks, as said_at_
  std::atomic<std::int64_t> said_at_{std::numeric_limits<std::int64_t>::min()};
  std::atomic<std::uint64_t> unsaid_{0};
};

}  // namespace lmwarden
