#include "core/session_table.h"

#include <gtest/gtest.h>

namespace lmwarden::core {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

const TimePoint t0{};

TEST(SessionTable, RemembersHomeAndCountsLiveConversations) {
  SessionTable table{/*replicas=*/3, /*capacity=*/10, minutes(30)};
  table.assign(1, 2, t0);
  table.assign(2, 2, t0);
  table.assign(3, 0, t0);
  EXPECT_EQ(table.find(1, t0), 2);
  EXPECT_EQ(table.find(3, t0), 0);
  EXPECT_EQ(table.find(4, t0), std::nullopt);
  EXPECT_EQ(table.live(0), 1);
  EXPECT_EQ(table.live(1), 0);
  EXPECT_EQ(table.live(2), 2);
}

TEST(SessionTable, MovingHomeMovesTheLiveCount) {
  SessionTable table{2, 10, minutes(30)};
  table.assign(7, 0, t0);
  table.assign(7, 1, t0);
  EXPECT_EQ(table.live(0), 0);
  EXPECT_EQ(table.live(1), 1);
  EXPECT_EQ(table.size(), 1u);
}

TEST(SessionTable, ForgetsIdleConversationsAfterTtlButNotBefore) {
  SessionTable table{1, 10, minutes(30)};
  table.assign(1, 0, t0);
  table.assign(2, 0, t0 + minutes(20));
  EXPECT_EQ(table.find(1, t0 + minutes(30)), 0);  // exactly at TTL: still live; touched
  EXPECT_EQ(table.find(2, t0 + minutes(50) + seconds(1)), std::nullopt);
  EXPECT_EQ(table.find(1, t0 + minutes(59)), 0);  // touched at 30 min, so live until 60
  EXPECT_EQ(table.find(1, t0 + minutes(89) + seconds(1)), std::nullopt);  // touched at 59
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.live(0), 0);
}

TEST(SessionTable, EvictsLeastRecentlyUsedWhenFull) {
  SessionTable table{1, 3, minutes(30)};
  table.assign(1, 0, t0);
  table.assign(2, 0, t0 + seconds(1));
  table.assign(3, 0, t0 + seconds(2));
  ASSERT_TRUE(table.find(1, t0 + seconds(3)));  // 1 becomes most recent; 2 is now oldest
  table.assign(4, 0, t0 + seconds(4));
  EXPECT_EQ(table.size(), 3u);
  EXPECT_FALSE(table.find(2, t0 + seconds(5)));
  EXPECT_TRUE(table.find(1, t0 + seconds(5)));
  EXPECT_TRUE(table.find(3, t0 + seconds(5)));
  EXPECT_TRUE(table.find(4, t0 + seconds(5)));
  EXPECT_EQ(table.live(0), 3);
}

TEST(SessionTable, ReusesSlotsSoMemoryStaysBounded) {
  SessionTable table{2, 100, seconds(10)};
  for (int round = 0; round < 50; ++round)
    for (std::uint64_t k = 0; k < 100; ++k)
      table.assign(k + 1000 * static_cast<std::uint64_t>(round), static_cast<int>(k % 2),
                   t0 + seconds(round * 20));
  EXPECT_EQ(table.size(), 100u);
  EXPECT_EQ(table.live(0) + table.live(1), 100);
}

}  // namespace
}  // namespace lmwarden::core
