#include "core/placement_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace lmwarden::core {
namespace {

using Key = PlacementIndex::Key;

TEST(PlacementIndex, StartsWithEveryReplicaTiedAtZero) {
  PlacementIndex index{5};
  EXPECT_EQ(index.min(), 0);
  EXPECT_EQ(index.tied(), 5);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(index.nth_tied(k), k);
}

TEST(PlacementIndex, FindsTheLowestAndItsTiesInReplicaOrder) {
  PlacementIndex index{6};
  const Key keys[] = {7, 3, 9, 3, 5, 3};
  for (int i = 0; i < 6; ++i) index.set(i, keys[i]);
  EXPECT_EQ(index.min(), 3);
  ASSERT_EQ(index.tied(), 3);
  EXPECT_EQ(index.nth_tied(0), 1);
  EXPECT_EQ(index.nth_tied(1), 3);
  EXPECT_EQ(index.nth_tied(2), 5);
  index.set(3, 2);
  EXPECT_EQ(index.min(), 2);
  EXPECT_EQ(index.tied(), 1);
  EXPECT_EQ(index.nth_tied(0), 3);
}

TEST(PlacementIndex, UnavailableReplicasNeverWin) {
  PlacementIndex index{3};
  for (int i = 0; i < 3; ++i) index.set(i, PlacementIndex::kUnavailable);
  EXPECT_EQ(index.min(), PlacementIndex::kUnavailable);
  index.set(2, 100);
  EXPECT_EQ(index.min(), 100);
  EXPECT_EQ(index.tied(), 1);
  EXPECT_EQ(index.nth_tied(0), 2);
}

TEST(PlacementIndex, KeysRoundScoresToAMillionthAndSaturate) {
  EXPECT_EQ(PlacementIndex::key_of(0.0), 0);
  EXPECT_EQ(PlacementIndex::key_of(-1.0), 0);
  EXPECT_EQ(PlacementIndex::key_of(std::nan("")), 0);
  EXPECT_EQ(PlacementIndex::key_of(1.25), PlacementIndex::key_of(0.25) * 5);
  // Float noise in a sum is a tie, a real difference is not.
  EXPECT_EQ(PlacementIndex::key_of(0.1 + 0.2), PlacementIndex::key_of(0.3));
  EXPECT_LT(PlacementIndex::key_of(0.3), PlacementIndex::key_of(0.30001));
  EXPECT_LT(PlacementIndex::key_of(1e300), PlacementIndex::kUnavailable);
  EXPECT_EQ(PlacementIndex::key_of(1e300), PlacementIndex::key_of(1e200));
}

// The index against a scan of the same keys, over random updates, on sizes
// that are and are not powers of two.
TEST(PlacementIndex, AgreesWithAScanUnderRandomUpdates) {
  std::mt19937_64 rng{7};
  for (int n : {1, 2, 3, 8, 13, 64, 512, 777}) {
    PlacementIndex index{n};
    std::vector<Key> keys(static_cast<std::size_t>(n), 0);
    for (int step = 0; step < 5000; ++step) {
      const int i = static_cast<int>(rng() % static_cast<std::uint64_t>(n));
      // Few distinct values, so ties are common; now and then unavailable.
      const Key key = rng() % 16 == 0 ? PlacementIndex::kUnavailable : static_cast<Key>(rng() % 6);
      keys[static_cast<std::size_t>(i)] = key;
      index.set(i, key);

      const Key lowest = *std::min_element(keys.begin(), keys.end());
      ASSERT_EQ(index.min(), lowest) << "n=" << n << " step=" << step;
      if (lowest == PlacementIndex::kUnavailable) continue;
      std::vector<int> tied;
      for (int r = 0; r < n; ++r)
        if (keys[static_cast<std::size_t>(r)] == lowest) tied.push_back(r);
      ASSERT_EQ(index.tied(), static_cast<int>(tied.size())) << "n=" << n << " step=" << step;
      const int k = static_cast<int>(rng() % tied.size());
      ASSERT_EQ(index.nth_tied(k), tied[static_cast<std::size_t>(k)]) << "n=" << n << " step=" << step;
    }
  }
}

}  // namespace
}  // namespace lmwarden::core
