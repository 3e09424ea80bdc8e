#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "telemetry/open_requests.h"

namespace lmwarden::telemetry {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const WallTime kT0 = WallTime{seconds{1'800'000'000}};

TEST(OpenRequests, NothingOpenHasNoOldestSecond) {
  OpenRequests open;
  const auto s = open.snapshot(kT0);
  EXPECT_FALSE(s.oldest_unix_s.has_value());
  EXPECT_EQ(s.count, 0u);
}

TEST(OpenRequests, TheOldestOpenFirstByteSetsTheSecond) {
  OpenRequests open;
  const auto a = open.open(kT0 + seconds{3} + milliseconds{999});
  const auto b = open.open(kT0 + seconds{5});
  const auto c = open.open(kT0 + seconds{5} + milliseconds{10});
  EXPECT_EQ(a, 1'800'000'003);
  EXPECT_EQ(b, 1'800'000'005);
  auto s = open.snapshot(kT0 + seconds{9});
  EXPECT_EQ(s.oldest_unix_s, 1'800'000'003);
  EXPECT_EQ(s.count, 3u);

  open.close(a);  // the oldest ends: the next oldest sets it
  s = open.snapshot(kT0 + seconds{9});
  EXPECT_EQ(s.oldest_unix_s, 1'800'000'005);
  EXPECT_EQ(s.count, 2u);

  open.close(b);
  open.close(c);
  s = open.snapshot(kT0 + seconds{9});
  EXPECT_FALSE(s.oldest_unix_s.has_value());
  EXPECT_EQ(s.count, 0u);
}

TEST(OpenRequests, AReplyOpenAsLongAsTheRingIsStillSeen) {
  OpenRequests open;
  const auto first = open.open(kT0);
  const WallTime late = kT0 + seconds{OpenRequests::kSlots - 1};
  EXPECT_EQ(open.snapshot(late).oldest_unix_s, first);
  // One second later its slot is the newest second's: still counted, now
  // reading as later than it began.
  const auto s = open.snapshot(late + seconds{1});
  EXPECT_EQ(s.count, 1u);
  EXPECT_EQ(s.oldest_unix_s, first + static_cast<std::int64_t>(OpenRequests::kSlots));
  open.close(first);
  EXPECT_EQ(open.snapshot(late + seconds{1}).count, 0u);
}

TEST(OpenRequests, SecondsBeforeTheEpochMapToTheirOwnSlots) {
  OpenRequests open;
  const auto s = open.open(WallTime{seconds{-5}});
  EXPECT_EQ(s, -5);
  EXPECT_EQ(open.snapshot(WallTime{seconds{-1}}).oldest_unix_s, -5);
  open.close(s);
  EXPECT_EQ(open.snapshot(WallTime{seconds{-1}}).count, 0u);
}

TEST(OpenRequests, ThreadsOpeningAndClosingLeaveNothingOpen) {
  OpenRequests open;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&open, t] {
      for (int i = 0; i < 10'000; ++i) open.close(open.open(kT0 + seconds{(i + t) % 7}));
    });
  }
  const auto held = open.open(kT0 + seconds{2});
  for (auto& th : threads) th.join();
  const auto s = open.snapshot(kT0 + seconds{10});
  EXPECT_EQ(s.count, 1u);
  EXPECT_EQ(s.oldest_unix_s, held);
}

}  // namespace
}  // namespace lmwarden::telemetry
