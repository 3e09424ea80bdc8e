// Batching, budgets, preemption, step times and determinism.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine.h"
#include "engine/hardware_profile.h"
#include "engine_test_util.h"

namespace lmwarden::engine {
namespace {

using testing::make_prompt;
using testing::run_to_idle;
using testing::small_config;

TEST(Scheduler, ChunkedPrefillRespectsTheTokenBudgetAndEmitsTheFirstTokenAtTheEnd) {
  Engine engine(small_config());  // budget 256
  ASSERT_TRUE(engine.add_request({.id = 1, .prompt = make_prompt(600), .max_tokens = 3}, 0.0).ok());
  auto log = run_to_idle(engine);
  ASSERT_EQ(log.steps.size(), 5u);  // 256 + 256 + 88, then two decodes
  EXPECT_EQ(log.steps[0].shape.prefill_tokens, 256);
  EXPECT_EQ(log.steps[1].shape.prefill_tokens, 256);
  EXPECT_EQ(log.steps[2].shape.prefill_tokens, 88);
  EXPECT_TRUE(log.steps[0].outputs.empty());
  EXPECT_TRUE(log.steps[1].outputs.empty());
  ASSERT_EQ(log.steps[2].outputs.size(), 1u);
  EXPECT_EQ(log.steps[2].outputs[0].index, 0);
  EXPECT_EQ(log.finished.at(1), FinishReason::kLength);
  EXPECT_EQ(log.tokens.at(1).size(), 3u);
}

TEST(Scheduler, NeverExceedsTheBudgetOrMaxNumSeqsAndRunsRunningRequestsFirst) {
  Engine engine(small_config(512));  // 8 seqs, 256 tokens per step
  for (RequestId id = 1; id <= 12; ++id) {
    ASSERT_TRUE(engine
                    .add_request({.id = id,
                                  .prompt = make_prompt(100, static_cast<std::uint32_t>(id)),
                                  .max_tokens = 10},
                                 0.0)
                    .ok());
  }
  StepResult first = engine.step(0.0);
  EXPECT_EQ(engine.num_running(), 3) << "256 tokens: two prompts and a chunk of a third";
  EXPECT_EQ(first.shape.prefill_tokens, 256);
  int max_running = 0;
  Seconds now = first.end();
  while (engine.has_unfinished_requests()) {
    StepResult r = engine.step(now);
    now = r.end();
    EXPECT_LE(r.num_scheduled_tokens, 256);
    EXPECT_LE(r.shape.num_seqs, 8);
    max_running = std::max(max_running, engine.num_running());
  }
  EXPECT_EQ(max_running, 8);
  EXPECT_EQ(engine.counters().finished_with(FinishReason::kLength), 12u);
}

TEST(Scheduler, DecodesOfRunningRequestsComeBeforeNewPrefills) {
  Engine engine(small_config());
  ASSERT_TRUE(engine.add_request({.id = 1, .prompt = make_prompt(40), .max_tokens = 5}, 0.0).ok());
  Seconds now = engine.step(0.0).end();
  // A prompt larger than the budget arrives: the decode still runs each step,
  // the prefill gets what is left (255 tokens).
  ASSERT_TRUE(
      engine.add_request({.id = 2, .prompt = make_prompt(1000, 7), .max_tokens = 1}, now).ok());
  StepResult r = engine.step(now);
  EXPECT_EQ(r.shape.num_seqs, 2);
  EXPECT_EQ(r.shape.prefill_tokens, 255);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].id, 1u);
}

TEST(Scheduler, PreemptsTheNewestRequestWhenKvRunsOutAndBothStillComplete) {
  // 10 blocks = 160 tokens; two requests growing to 124 tokens each cannot
  // both stay resident.
  Engine engine(small_config(10));
  ASSERT_TRUE(
      engine.add_request({.id = 1, .prompt = make_prompt(60, 1), .max_tokens = 64}, 0.0).ok());
  ASSERT_TRUE(
      engine.add_request({.id = 2, .prompt = make_prompt(60, 2), .max_tokens = 64}, 0.0).ok());
  auto log = run_to_idle(engine);
  EXPECT_GE(engine.counters().num_preemptions, 1u);
  bool two_preempted = false;
  for (const auto& s : log.steps) {
    for (RequestId id : s.preempted) {
      EXPECT_EQ(id, 2u) << "the newest running request is the victim";
      two_preempted = true;
    }
  }
  EXPECT_TRUE(two_preempted);
  EXPECT_EQ(log.finished.at(1), FinishReason::kLength);
  EXPECT_EQ(log.finished.at(2), FinishReason::kLength);
  EXPECT_EQ(log.tokens.at(1).size(), 64u);
  EXPECT_EQ(log.tokens.at(2).size(), 64u);
  EXPECT_EQ(engine.kv_cache().pool().num_free(), 10);

  // Recomputation does not change what a request outputs.
  Engine alone(small_config(10));
  ASSERT_TRUE(
      alone.add_request({.id = 2, .prompt = make_prompt(60, 2), .max_tokens = 64}, 0.0).ok());
  EXPECT_EQ(run_to_idle(alone).tokens.at(2), log.tokens.at(2));
}

TEST(Scheduler, AbortFreesTheRequestsBlocks) {
  Engine engine(small_config(32));
  ASSERT_TRUE(
      engine.add_request({.id = 1, .prompt = make_prompt(100), .max_tokens = 50}, 0.0).ok());
  engine.step(0.0);
  EXPECT_GT(engine.kv_cache_usage(), 0.0);
  EXPECT_TRUE(engine.abort_request(1));
  EXPECT_FALSE(engine.abort_request(1));
  EXPECT_EQ(engine.kv_cache_usage(), 0.0);
  EXPECT_FALSE(engine.has_unfinished_requests());
  EXPECT_EQ(engine.counters().finished_with(FinishReason::kAbort), 1u);
}

TEST(StepTime, FollowsTheModelForPrefillAndDecode) {
  Engine engine(small_config());  // t0 10 ms, 0.1 ms/prefill token, 1 µs/context token, 1 ms/seq
  ASSERT_TRUE(engine.add_request({.id = 1, .prompt = make_prompt(100), .max_tokens = 3}, 0.0).ok());
  auto log = run_to_idle(engine);
  ASSERT_EQ(log.steps.size(), 3u);
  EXPECT_DOUBLE_EQ(log.steps[0].duration, 0.01 + 100 * 1e-4 + 1e-3);
  EXPECT_DOUBLE_EQ(log.steps[1].duration, 0.01 + 101 * 1e-6 + 1e-3);
  EXPECT_DOUBLE_EQ(log.steps[2].duration, 0.01 + 102 * 1e-6 + 1e-3);
  EXPECT_EQ(engine.counters().time_to_first_token.count(), 1u);
  EXPECT_DOUBLE_EQ(engine.counters().time_to_first_token.sum(), log.steps[0].duration);
}

TEST(StepTime, TheA4000ProfileMatchesItsDerivation) {
  const HardwareProfile* p = find_hardware_profile("a4000-qwen3-4b");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->kv_bytes_per_token, 147456);
  EXPECT_EQ(p->num_gpu_blocks * p->block_size, 40048);
  EXPECT_EQ(p->max_num_batched_tokens, 2048);
  EXPECT_EQ(p->max_num_seqs, 256);
  // A lone decode at 8k context: weights + KV streamed at 448 GB/s × 0.8.
  const double decode = p->step_time.step_time({.decode_context_tokens = 8192, .num_seqs = 1});
  EXPECT_NEAR(decode, 8.04e9 / 358.4e9 + 8192 * 147456 / 358.4e9, 0.002);
  // A full 2048-token prefill chunk: a few thousand tokens per second.
  const double chunk = p->step_time.step_time({.prefill_tokens = 2048, .num_seqs = 1});
  EXPECT_GT(2048 / chunk, 2000);
  EXPECT_LT(2048 / chunk, 5000);
  EXPECT_NE(find_hardware_profile("h100-qwen3-8b"), nullptr);
  EXPECT_EQ(find_hardware_profile("nope"), nullptr);
}

TEST(Engine, RejectsEmptyAndOverlongPromptsAndClampsMaxTokens) {
  Engine engine(small_config(64));  // 1024 tokens of KV caps the 4096 window
  EXPECT_EQ(engine.add_request({.id = 1, .prompt = {}}, 0.0).status, AddStatus::kEmptyPrompt);
  EXPECT_EQ(engine.add_request({.id = 2, .prompt = make_prompt(1024)}, 0.0).status,
            AddStatus::kPromptTooLong);
  const AddResult r =
      engine.add_request({.id = 3, .prompt = make_prompt(1000), .max_tokens = 500}, 0.0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.max_tokens, 24);
  EXPECT_EQ(engine.add_request({.id = 3, .prompt = make_prompt(10)}, 0.0).status,
            AddStatus::kDuplicateId);
}

}  // namespace
}  // namespace lmwarden::engine
