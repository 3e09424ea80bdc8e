// Prefix caching as the engine exposes it: repeated prompts, other replicas,
// LRU eviction under pressure.
#include <gtest/gtest.h>

#include "engine/dp_server.h"
#include "engine/engine.h"
#include "engine_test_util.h"

namespace lmwarden::engine {
namespace {

using testing::make_prompt;
using testing::run_to_idle;
using testing::small_config;

std::int32_t cached_on_resend(Engine& engine, RequestId id, const std::vector<TokenId>& prompt) {
  EXPECT_TRUE(engine.add_request({.id = id, .prompt = prompt, .max_tokens = 2}, 0.0).ok());
  auto log = run_to_idle(engine);
  return log.cached.at(id);
}

class RepeatedPrompt : public ::testing::TestWithParam<std::int32_t> {};

TEST_P(RepeatedPrompt, IsServedFromCacheUpToTheLastFullBlockBeforeTheLastToken) {
  const std::int32_t len = GetParam();
  Engine engine(small_config(128));
  const auto prompt = make_prompt(len);
  EXPECT_EQ(cached_on_resend(engine, 1, prompt), 0) << "cold cache";
  EXPECT_EQ(cached_on_resend(engine, 2, prompt), (len - 1) / 16 * 16);
  EXPECT_EQ(engine.counters().prefix_cache_queries, 2u * static_cast<unsigned>(len));
  EXPECT_EQ(engine.counters().prefix_cache_hits, static_cast<unsigned>((len - 1) / 16 * 16));
}

INSTANTIATE_TEST_SUITE_P(Lengths, RepeatedPrompt,
                         ::testing::Values(1, 15, 16, 17, 96, 97, 100, 600));

TEST(PrefixCache, OffItCachesNothingAndCountsNoLookups) {
  EngineConfig config = small_config(128);
  config.enable_prefix_caching = false;
  Engine engine(config);
  const auto prompt = make_prompt(100);
  EXPECT_EQ(cached_on_resend(engine, 1, prompt), 0);
  EXPECT_EQ(cached_on_resend(engine, 2, prompt), 0);
  EXPECT_EQ(engine.counters().prefix_cache_queries, 0u) << "vLLM counts no lookup it does not make";
  EXPECT_EQ(engine.counters().prefix_cache_hits, 0u);
}

TEST(PrefixCache, AGrowingConversationHitsItsEarlierTurns) {
  Engine engine(small_config(128));
  auto turn1 = make_prompt(200);
  ASSERT_TRUE(engine.add_request({.id = 1, .prompt = turn1, .max_tokens = 20}, 0.0).ok());
  auto log = run_to_idle(engine);
  // Turn 2 = turn 1 + the reply + a new user message.
  auto turn2 = turn1;
  turn2.insert(turn2.end(), log.tokens.at(1).begin(), log.tokens.at(1).end());
  const auto tail = make_prompt(50, 9);
  turn2.insert(turn2.end(), tail.begin(), tail.end());
  // The reply's last token was never computed: 219 tokens have KV → 13 blocks.
  EXPECT_EQ(cached_on_resend(engine, 2, turn2), 208);
}

TEST(PrefixCache, AnotherReplicaHasNothingCached) {
  DpServer server(2, small_config(128));
  const auto prompt = make_prompt(100);
  auto p = server.add_request({.id = 1, .prompt = prompt, .max_tokens = 2}, 0.0, 0);
  ASSERT_EQ(p.rank, 0);
  run_to_idle(server.engine(0));
  EXPECT_EQ(server.engine(0).probe_cached_prefix(prompt), 96);
  EXPECT_EQ(server.engine(1).probe_cached_prefix(prompt), 0);
  EXPECT_EQ(cached_on_resend(server.engine(1), 2, prompt), 0);
  EXPECT_EQ(cached_on_resend(server.engine(0), 3, prompt), 96);
}

TEST(PrefixCache, UnderPressureTheLeastRecentlyFreedBlocksAreEvictedTailFirst) {
  // 20 blocks. A then B (4 full blocks each) finish and are freed; C needs 14
  // blocks: the 12 never used, then the two at the head of the free queue —
  // A's last two blocks (A was freed first, and freed tail first).
  Engine engine(small_config(20));
  const auto a = make_prompt(64, 1);
  const auto b = make_prompt(64, 2);
  const auto c = make_prompt(224, 3);
  for (auto [id, prompt] : {std::pair{1u, &a}, std::pair{2u, &b}}) {
    ASSERT_TRUE(engine.add_request({.id = id, .prompt = *prompt, .max_tokens = 1}, 0.0).ok());
    run_to_idle(engine);
  }
  EXPECT_EQ(engine.probe_cached_prefix(a), 48);
  EXPECT_EQ(engine.probe_cached_prefix(b), 48);
  ASSERT_TRUE(engine.add_request({.id = 3, .prompt = c, .max_tokens = 1}, 0.0).ok());
  run_to_idle(engine);
  EXPECT_EQ(engine.probe_cached_prefix(a), 32) << "A's two tail blocks were evicted";
  EXPECT_EQ(engine.probe_cached_prefix(b), 48) << "B, freed later, is intact";
  EXPECT_EQ(engine.kv_cache().pool().num_evictions(), 2);
}

TEST(PrefixCache, ConcurrentRequestsShareBlocksRegisteredByAnEarlierStep) {
  Engine engine(small_config(64));
  const auto prompt = make_prompt(160);
  ASSERT_TRUE(engine.add_request({.id = 1, .prompt = prompt, .max_tokens = 50}, 0.0).ok());
  StepResult first = engine.step(0.0);
  // Request 2 arrives while 1 is still decoding: 1's prompt blocks are shared.
  ASSERT_TRUE(engine.add_request({.id = 2, .prompt = prompt, .max_tokens = 5}, first.end()).ok());
  engine.step(first.end());
  const RequestState* r2 = engine.find(2);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->num_cached_tokens, 144);
  EXPECT_EQ(engine.kv_cache().pool().ref_count(r2->blocks[0]), 2);
  run_to_idle(engine, first.end());
  EXPECT_EQ(engine.kv_cache().pool().num_free(), 64);
}

}  // namespace
}  // namespace lmwarden::engine
