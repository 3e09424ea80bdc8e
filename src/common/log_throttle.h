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
  explicit LogThrottle(std::chrono::seconds every) noexcept : every_(every.count()) {}

  // Counts one event. Returns how many to name in a line written now (this
  // one and those unsaid since the last line), or 0 when no line is due:
  // none within the period, on the coarse clock's whole seconds.
  std::uint64_t note() noexcept {
    const std::int64_t now =
        std::chrono::duration_cast<std::chrono::seconds>(coarse_steady_now().time_since_epoch())
            .count();
    const std::uint64_t events = unsaid_.fetch_add(1, std::memory_order_relaxed) + 1;
    std::int64_t last = said_at_.load(std::memory_order_relaxed);
    if (last > now - every_ ||
        !said_at_.compare_exchange_strong(last, now, std::memory_order_relaxed))
      return 0;
    unsaid_.fetch_sub(events, std::memory_order_relaxed);
    return events;
  }

 private:
  const std::int64_t every_;
  std::atomic<std::int64_t> said_at_{std::numeric_limits<std::int64_t>::min()};
  std::atomic<std::uint64_t> unsaid_{0};
};

}  // namespace lmwarden
