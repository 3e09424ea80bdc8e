// LogThrottle: a line at most once per period, from the last line, naming
// the events that came since.
#include <gtest/gtest.h>

#include <chrono>

#include "common/log_throttle.h"

namespace lmwarden {
namespace {

using std::chrono::milliseconds;

TEST(LogThrottle, ALineAtMostOncePerPeriodFromTheLastLine) {
  LogThrottle throttle{std::chrono::seconds(1)};
  // Just before a whole second of the clock: the next event, 5 ms later, is
  // in the next second, and still within the period.
  const std::chrono::steady_clock::time_point first{std::chrono::seconds(41) + milliseconds(998)};
  EXPECT_EQ(throttle.note_at(first), 1u);
  EXPECT_EQ(throttle.note_at(first + milliseconds(5)), 0u);
  EXPECT_EQ(throttle.note_at(first + milliseconds(999)), 0u);
  // A period after the last line: this one and the two unsaid.
  EXPECT_EQ(throttle.note_at(first + milliseconds(1000)), 3u);
  EXPECT_EQ(throttle.note_at(first + milliseconds(1500)), 0u);
  EXPECT_EQ(throttle.note_at(first + milliseconds(2100)), 2u);
}

}  // namespace
}  // namespace lmwarden
