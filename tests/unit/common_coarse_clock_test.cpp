// The coarse clocks share their precise twins' epochs, so their time points
// mix: a coarse read falls between a precise read taken a tick before it
// and one taken after it.
#include <gtest/gtest.h>

#include <chrono>

#include "common/coarse_clock.h"

namespace lmwarden {
namespace {

using namespace std::chrono_literals;

// Generous: the thread may be preempted between the reads on a busy machine.
constexpr auto kSlack = 250ms;

TEST(CoarseClock, ResolutionIsAKernelTick) {
  EXPECT_GT(coarse_resolution(), 0ns);
  EXPECT_LE(coarse_resolution(), 100ms);
}

TEST(CoarseClock, SteadyReadsLieWithinATickOfTheSteadyClock) {
  for (int i = 0; i < 1000; ++i) {
    const auto before = std::chrono::steady_clock::now();
    const auto coarse = coarse_steady_now();
    const auto after = std::chrono::steady_clock::now();
    ASSERT_LE(coarse, after) << "a coarse read is never ahead of the precise clock";
    ASSERT_GE(coarse + coarse_resolution() + kSlack, before);
  }
}

TEST(CoarseClock, SystemReadsLieWithinATickOfTheSystemClock) {
  const auto before = std::chrono::system_clock::now();
  const auto coarse = coarse_system_now();
  const auto after = std::chrono::system_clock::now();
  EXPECT_LE(coarse, after);
  EXPECT_GE(coarse + coarse_resolution() + kSlack, before);
}

TEST(CoarseClock, SteadyReadsNeverGoBack) {
  auto last = coarse_steady_now();
  for (int i = 0; i < 10000; ++i) {
    const auto now = coarse_steady_now();
    ASSERT_GE(now, last);
    last = now;
  }
}

}  // namespace
}  // namespace lmwarden
