#include "core/session_table.h"

#include <gtest/gtest.h>

#include <boost/unordered/detail/xmx.hpp>
#include <random>
#include <set>
#include <vector>

#include "common/hash.h"

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

// Of the live conversations, those used within the active window count
// apart: they age out of it as time passes, and a use brings one back.
TEST(SessionTable, CountsTheConversationsUsedWithinTheActiveWindow) {
  SessionTable table{/*replicas=*/2, /*capacity=*/10, minutes(10)};
  table.set_active_window(seconds(60));
  table.assign(1, 0, t0);
  table.assign(2, 1, t0 + seconds(10));
  table.assign(3, 0, t0 + seconds(20));
  EXPECT_EQ(table.active(0), 2);
  EXPECT_EQ(table.active(1), 1);
  table.expire(t0 + seconds(65));  // 1 was last used 65 s ago
  EXPECT_EQ(table.active(0), 1);
  EXPECT_EQ(table.active(1), 1);
  table.expire(t0 + seconds(85));
  EXPECT_EQ(table.active(0), 0);
  EXPECT_EQ(table.active(1), 0);
  EXPECT_EQ(table.live(0), 2) << "still live: within the TTL";
  EXPECT_EQ(table.find(1, t0 + seconds(90)), 0);
  EXPECT_EQ(table.active(0), 1) << "used again";
  table.assign(2, 0, t0 + seconds(95));  // moved, and used
  EXPECT_EQ(table.active(0), 2);
  EXPECT_EQ(table.active(1), 0);
  table.expire(t0 + minutes(20));
  EXPECT_EQ(table.active(0), 0);
  EXPECT_EQ(table.live(0), 0);
}

// A TTL shortened under a full table (a reload): each expire forgets at
// most kMostExpiredPerCall, and until the rest are forgotten a find takes
// them for gone all the same.
TEST(SessionTable, AShortenedTtlIsAppliedInBoundedSteps) {
  constexpr std::uint64_t kConversations = 10'000;
  SessionTable table{/*replicas=*/2, /*capacity=*/kConversations, minutes(60)};
  for (std::uint64_t key = 0; key < kConversations; ++key)
    table.assign(key, static_cast<int>(key % 2), t0 + seconds(key % 60));
  table.set_ttl(minutes(1));
  const auto later = t0 + minutes(5);
  table.expire(later);
  EXPECT_EQ(table.size(), kConversations - SessionTable::kMostExpiredPerCall);
  // The most recently used, still in the table, is past the TTL: gone.
  EXPECT_EQ(table.find(kConversations - 1, later), std::nullopt);
  table.expire(later);
  table.expire(later);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.live(0) + table.live(1), 0);
}

// The counts against a count made by hand, under random uses, moves,
// evictions (a small table) and expiry.
TEST(SessionTable, ActiveCountsMatchTheLastUsesUnderRandomUse) {
  constexpr int kReplicas = 3;
  // A window shorter than the TTL, one as long, and a table so small that
  // the least recently used conversation it evicts is often an active one.
  for (const auto& [window, capacity] :
       {std::pair{seconds(30), 40}, std::pair{seconds(300), 40}, std::pair{seconds(30), 8}}) {
    SCOPED_TRACE(window.count());
    SCOPED_TRACE(capacity);
    SessionTable table{kReplicas, static_cast<std::size_t>(capacity), seconds(300)};
    table.set_active_window(window);
    std::mt19937_64 random{7};
    TimePoint now = t0;
    for (int step = 0; step < 20000; ++step) {
      now += std::chrono::milliseconds(random() % 2000);
      const std::uint64_t key = random() % 60;
      const int home = static_cast<int>(random() % kReplicas);
      switch (random() % 4) {
        case 0:
          table.assign(key, home, now);
          break;
        case 1:
          table.find(key, now);
          break;
        case 2:
          table.touch(key, home, now);
          break;
        default:
          table.expire(now);
      }
      int counted[kReplicas] = {};
      const TimePoint cutoff = now - window;
      table.for_each_oldest_first([&](std::uint64_t, int replica, TimePoint last_seen) {
        if (last_seen >= cutoff) ++counted[replica];
      });
      for (int r = 0; r < kReplicas; ++r)
        ASSERT_EQ(table.active(r), counted[r]) << "step " << step << ", replica " << r;
    }
  }
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

TEST(SessionTable, TouchKeepsTheHomeAndBringsBackOneForgotten) {
  SessionTable table{3, 10, minutes(30)};
  table.assign(1, 2, t0);
  table.assign(1, 0, t0 + minutes(10));  // re-homed while a request of it ran
  table.touch(1, 2, t0 + minutes(20));   // that request ends: the home stays 0
  EXPECT_EQ(table.find(1, t0 + minutes(49)), 0) << "idle counts from the touch";
  table.touch(5, 1, t0 + minutes(50));  // forgotten meanwhile: back with its home
  EXPECT_EQ(table.find(5, t0 + minutes(50)), 1);
  EXPECT_EQ(table.live(0), 1);
  EXPECT_EQ(table.live(1), 1);
  EXPECT_EQ(table.live(2), 0);
  EXPECT_EQ(table.size(), 2u);
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

TEST(SessionTable, KeysAreSaltedWithTheTablesSeed) {
  const std::uint64_t key = stable_hash("5506220c-1ac0-498d-ad24-592ac04efcdd");
  SessionTable a{1, 10, minutes(30), /*seed=*/0x1234};
  SessionTable same{1, 10, minutes(30), /*seed=*/0x1234};
  SessionTable other{1, 10, minutes(30), /*seed=*/0x9876};
  EXPECT_EQ(a.index_hash(key), same.index_hash(key));
  EXPECT_NE(a.index_hash(key), other.index_hash(key));

  // Without a seed, every table of this process takes the process's one, and
  // a key is not hashed as itself.
  SessionTable first{1, 10, minutes(30)};
  SessionTable second{1, 10, minutes(30)};
  EXPECT_EQ(process_hash_seed(), process_hash_seed());
  EXPECT_EQ(first.index_hash(key), second.index_hash(key));
  EXPECT_NE(first.index_hash(key), key);

  // The salt changes where keys lie, never what the table answers.
  for (SessionTable* table : {&a, &other, &first}) {
    table->assign(key, 0, t0);
    EXPECT_EQ(table->find(key, t0), 0);
    EXPECT_EQ(table->find(key + 1, t0), std::nullopt);
  }
}

TEST(SessionTable, KeysCraftedToCrowdOneGroupSpreadUnderAnotherSeed) {
  // The attack: keys whose mixed hash (Boost's xmx, applied by the map to the
  // salted key) shares its top 12 bits, i.e. one probe group of a table of
  // 4096 groups. Found by search, as a client would search for ids.
  auto group = [](std::size_t hash) { return boost::unordered::detail::xmx(hash) >> 52; };
  const SessionTable known{1, 10, minutes(30), /*seed=*/0};
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> crafted;
  while (crafted.size() < 256) {
    const std::uint64_t k = rng();
    if (group(known.index_hash(k)) == 0x5a5) crafted.push_back(k);
  }
  const SessionTable salted{1, 10, minutes(30), /*seed=*/0x243f6a8885a308d3};
  std::set<std::size_t> groups;
  for (std::uint64_t k : crafted) groups.insert(group(salted.index_hash(k)));
  EXPECT_GT(groups.size(), 200u);  // 256 keys over 4096 groups: ~248 distinct
}

}  // namespace
}  // namespace lmwarden::core
