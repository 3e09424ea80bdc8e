#include <gtest/gtest.h>

#include <vector>

#include "engine/block_pool.h"
#include "engine/kv_cache_manager.h"

namespace lmwarden::engine {
namespace {

TEST(BlockPool, AllocatesFromTheHeadAndRefusesWhenShort) {
  BlockPool pool(4);
  std::vector<BlockId> got;
  ASSERT_TRUE(pool.allocate(3, got));
  EXPECT_EQ(got, (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_FALSE(pool.allocate(2, got));
  EXPECT_EQ(got.size(), 3u);  // unchanged on failure
  EXPECT_DOUBLE_EQ(pool.usage(), 0.75);
}

TEST(BlockPool, FreedBlocksJoinTheTailAndCachedOnesAreEvictedFromTheHead) {
  BlockPool pool(4);
  std::vector<BlockId> a;
  ASSERT_TRUE(pool.allocate(4, a));
  pool.cache(0, 100);
  pool.cache(1, 101);
  pool.cache(2, 102);
  // Freed in the order 2, 0, 1: the queue is that order, 3 still in use.
  pool.release(std::vector<BlockId>{2, 0, 1});
  EXPECT_EQ(pool.free_queue(), (std::vector<BlockId>{2, 0, 1}));
  EXPECT_EQ(pool.lookup(102), 2);

  std::vector<BlockId> b;
  ASSERT_TRUE(pool.allocate(1, b));
  EXPECT_EQ(b, std::vector<BlockId>{2});
  EXPECT_EQ(pool.lookup(102), -1) << "the least recently freed block loses its hash";
  EXPECT_EQ(pool.lookup(100), 0);
  EXPECT_EQ(pool.num_evictions(), 1);
}

TEST(BlockPool, TouchTakesACachedBlockOutOfTheFreeQueue) {
  BlockPool pool(3);
  std::vector<BlockId> a;
  ASSERT_TRUE(pool.allocate(3, a));
  pool.cache(1, 7);
  pool.release(a);
  ASSERT_EQ(pool.free_queue(), (std::vector<BlockId>{0, 1, 2}));
  const BlockId hit = pool.lookup(7);
  ASSERT_EQ(hit, 1);
  pool.touch(std::vector<BlockId>{hit});
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.free_queue(), (std::vector<BlockId>{0, 2}));
  // Shared: a second touch, then two releases, before it is free again.
  pool.touch(std::vector<BlockId>{hit});
  pool.release(std::vector<BlockId>{hit});
  EXPECT_EQ(pool.num_free(), 2);
  pool.release(std::vector<BlockId>{hit});
  EXPECT_EQ(pool.free_queue(), (std::vector<BlockId>{0, 2, 1}));
}

TEST(KvCacheManager, FreesARequestTailFirstSoItsPrefixIsEvictedLast) {
  KvCacheManager kv(8, 4, true);
  RequestState req;
  req.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(kv.allocate_slots(req, 12, nullptr));
  ASSERT_EQ(req.blocks, (std::vector<BlockId>{0, 1, 2}));
  kv.free(req);
  // Blocks 3..7 were never used; then the request's blocks, tail first.
  EXPECT_EQ(kv.pool().free_queue(), (std::vector<BlockId>{3, 4, 5, 6, 7, 2, 1, 0}));
}

TEST(KvCacheManager, PrefixHitStopsAtTheFirstMissAndLeavesTheLastTokenToCompute) {
  KvCacheManager kv(16, 4, true);
  RequestState first;
  first.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(kv.allocate_slots(first, 12, nullptr));
  kv.free(first);

  RequestState same;  // identical: 12 tokens, at most 11 cached → 2 blocks
  same.tokens = first.tokens;
  EXPECT_EQ(kv.find_cached_prefix(same).num_tokens, 8);

  RequestState diverging;  // differs in block 1: only block 0 matches
  diverging.tokens = {1, 2, 3, 4, 5, 0, 7, 8, 9, 10, 11, 12, 13};
  EXPECT_EQ(kv.find_cached_prefix(diverging).num_tokens, 4);

  RequestState longer;  // extends the prompt: all three blocks match
  longer.tokens = first.tokens;
  longer.tokens.push_back(13);
  EXPECT_EQ(kv.find_cached_prefix(longer).num_tokens, 12);
}

TEST(KvCacheManager, DisabledPrefixCachingFindsNothing) {
  KvCacheManager kv(16, 4, false);
  RequestState a;
  a.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_TRUE(kv.allocate_slots(a, 9, nullptr));
  kv.free(a);
  RequestState b;
  b.tokens = a.tokens;
  EXPECT_EQ(kv.find_cached_prefix(b).num_tokens, 0);
}

}  // namespace
}  // namespace lmwarden::engine
