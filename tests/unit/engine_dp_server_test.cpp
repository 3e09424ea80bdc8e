// The DP front end's balancer, and determinism of whole runs.
#include <gtest/gtest.h>

#include "engine/dp_server.h"
#include "engine_test_util.h"

namespace lmwarden::engine {
namespace {

using testing::make_prompt;
using testing::run_to_idle;
using testing::RunLog;
using testing::small_config;

TEST(DpServer, BalancesOnFourTimesWaitingPlusRunningWithTiesToTheLowestRank) {
  DpServer server(4, small_config(256));
  std::vector<std::int32_t> ranks;
  for (RequestId id = 1; id <= 5; ++id) {
    auto p = server.add_request(
        {.id = id, .prompt = make_prompt(50, static_cast<std::uint32_t>(id))}, 0.0, std::nullopt);
    ASSERT_TRUE(p.result.ok());
    ranks.push_back(p.rank);
  }
  EXPECT_EQ(ranks, (std::vector<std::int32_t>{0, 1, 2, 3, 0}));
  // After a step ranks 1-3 hold one running request (score 1); rank 0 holds
  // two running (score 2): the next goes to rank 1.
  for (std::int32_t r = 0; r < 4; ++r) server.engine(r).step(0.0);
  EXPECT_EQ(server.balanced_rank(), 1);
}

TEST(DpServer, PinnedRanksAreHonouredAndUnknownRanksRefused) {
  DpServer server(2, small_config());
  auto p = server.add_request({.id = 1, .prompt = make_prompt(10)}, 0.0, 1);
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(server.engine(1).num_waiting(), 1);
  auto bad = server.add_request({.id = 2, .prompt = make_prompt(10)}, 0.0, 2);
  EXPECT_EQ(bad.rank, -1);
  auto negative = server.add_request({.id = 3, .prompt = make_prompt(10)}, 0.0, -1);
  EXPECT_EQ(negative.rank, -1);
  EXPECT_EQ(server.engine(0).num_waiting() + server.engine(1).num_waiting(), 1);
}

RunLog run_workload(std::uint64_t seed) {
  EngineConfig config = small_config(40);
  config.seed = seed;
  config.early_stop_probability = 0.3;
  Engine engine(config);
  for (RequestId id = 1; id <= 20; ++id) {
    EXPECT_TRUE(engine
                    .add_request({.id = id,
                                  .prompt = make_prompt(40 + static_cast<std::int32_t>(id) * 13,
                                                        static_cast<std::uint32_t>(id % 3)),
                                  .max_tokens = 40},
                                 0.001 * static_cast<double>(id))
                    .ok());
  }
  return run_to_idle(engine);
}

TEST(Determinism, TheSameSeedGivesTheSameRunAndAnotherSeedAnotherOutput) {
  const RunLog a = run_workload(7);
  const RunLog b = run_workload(7);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].duration, b.steps[i].duration);
    EXPECT_EQ(a.steps[i].outputs.size(), b.steps[i].outputs.size());
    EXPECT_EQ(a.steps[i].preempted, b.steps[i].preempted);
  }
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.finished, b.finished);
  EXPECT_EQ(a.end, b.end);
  EXPECT_NE(run_workload(8).tokens, a.tokens);
}

}  // namespace
}  // namespace lmwarden::engine
