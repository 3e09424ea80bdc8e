#include "evaluator/evaluator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "common/hash.h"
#include "evaluator/policy.h"
#include "evaluator/step_result.h"

namespace lmwarden::evaluator {
namespace {

// --- arithmetic -----------------------------------------------------------

TEST(EvaluatorStats, PercentileInterpolatesBetweenClosestRanks) {
  EXPECT_FALSE(percentile({}, 50));
  EXPECT_DOUBLE_EQ(*percentile({7.0}, 95), 7.0);
  EXPECT_DOUBLE_EQ(*percentile({4, 1, 3, 2}, 50), 2.5);  // unsorted input
  EXPECT_DOUBLE_EQ(*percentile({1, 2, 3, 4}, 95), 3.85);
  EXPECT_DOUBLE_EQ(*percentile({1, 2, 3, 4}, 0), 1.0);
  EXPECT_DOUBLE_EQ(*percentile({1, 2, 3, 4}, 100), 4.0);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_DOUBLE_EQ(*percentile(hundred, 50), 50.5);
  EXPECT_DOUBLE_EQ(*percentile(hundred, 95), 95.05);
}

TEST(EvaluatorStats, HitRateIsPooledOverReplicasNotAveraged) {
  StepResult step{.duration_s = 60};
  // 90 % on a busy replica, 0 % on an idle one: pooled 900/1010, not 45 %.
  step.samples.replicas = {{.replica = 0, .prefix_cache_queries = 1000, .prefix_cache_hits = 900},
                           {.replica = 1, .prefix_cache_queries = 10, .prefix_cache_hits = 0}};
  summarize(step);
  ASSERT_TRUE(step.prefix_hit_pct);
  EXPECT_NEAR(*step.prefix_hit_pct, 100.0 * 900 / 1010, 1e-9);
  EXPECT_FALSE(hit_pct(0, 0));
}

TEST(EvaluatorStats, RatesScaleByTheStepDuration) {
  StepResult step{.duration_s = 180, .sessions_completed = 9, .output_tokens = 4500};
  step.samples.replicas_busy = {4, 3, 2, 3};
  step.samples.ttfb_s = {0.5, 1.5};
  summarize(step);
  EXPECT_DOUBLE_EQ(step.sessions_per_hour, 180.0);
  EXPECT_DOUBLE_EQ(step.output_tokens_per_min, 1500.0);
  EXPECT_DOUBLE_EQ(*step.replicas_busy, 3.0);
  EXPECT_DOUBLE_EQ(*step.ttfb_p50_s, 1.0);
  EXPECT_FALSE(step.stayed_pct);  // no follow-ups, no warden counters
}

TEST(EvaluatorStats, StayedPrefersTheWardensCountersThenFollowups) {
  StepResult step{.duration_s = 10};
  step.samples.followups = 10;
  step.samples.followups_stayed = 4;
  summarize(step);
  EXPECT_DOUBLE_EQ(*step.stayed_pct, 40.0);
  step.samples.warden_sticky = 90;
  step.samples.warden_moved = 10;
  summarize(step);
  EXPECT_DOUBLE_EQ(*step.stayed_pct, 90.0);
  step.samples.warden_sticky = 0;
  step.samples.warden_moved = 0;
  summarize(step);
  EXPECT_FALSE(step.stayed_pct);
}

TEST(EvaluatorStats, PoolingAddsTwoRunsOfACellAndSummarizesThem) {
  StepResult a{.duration_s = 60, .sessions_completed = 3, .output_tokens = 600};
  a.samples.ttfb_s = {1, 2};
  a.samples.replicas_busy = {4, 4};
  a.samples.replicas = {{.replica = 0,
                         .prefix_cache_queries = 100,
                         .prefix_cache_hits = 90,
                         .busy_polls = 2,
                         .preemptions = 1,
                         .requests = 5}};
  a.samples.requests_sent = 5;
  a.samples.followups = 2;
  a.samples.followups_stayed = 2;
  a.samples.warden_sticky = 7;
  a.samples.warden_moved = 1;
  StepResult b{.duration_s = 60, .sessions_completed = 1, .output_tokens = 300};
  b.samples.ttfb_s = {3, 4, 5};
  b.samples.replicas_busy = {1, 1};
  b.samples.replicas = {
      {.replica = 0,
       .prefix_cache_queries = 300,
       .prefix_cache_hits = 10,
       .busy_polls = 1,
       .preemptions = 2,
       .requests = 4},
      {.replica = 1, .prefix_cache_queries = 50, .prefix_cache_hits = 0, .requests = 3}};
  b.samples.requests_sent = 6;
  b.samples.requests_failed = 1;
  b.samples.first_failure = "HTTP 500: oops";
  b.samples.followups = 2;
  b.samples.followups_stayed = 0;
  pool(a, b);
  EXPECT_DOUBLE_EQ(a.duration_s, 120);
  EXPECT_DOUBLE_EQ(a.sessions_per_hour, 4 * 3600.0 / 120);  // over the pooled time, not a mean
  EXPECT_DOUBLE_EQ(a.output_tokens_per_min, 900 * 60.0 / 120);
  EXPECT_EQ(a.samples.ttfb_s, (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_DOUBLE_EQ(*a.ttfb_p50_s, 3);  // of every request: the runs' medians were 1.5 and 4
  EXPECT_DOUBLE_EQ(*a.replicas_busy, 2.5);
  ASSERT_EQ(a.samples.replicas.size(), 2u);
  EXPECT_DOUBLE_EQ(a.samples.replicas[0].prefix_cache_queries, 400);
  EXPECT_DOUBLE_EQ(a.samples.replicas[0].prefix_cache_hits, 100);
  EXPECT_DOUBLE_EQ(*a.samples.replicas[0].preemptions, 3);
  EXPECT_DOUBLE_EQ(*a.samples.replicas[0].requests, 9);
  EXPECT_DOUBLE_EQ(a.samples.replicas[1].prefix_cache_queries, 50);
  EXPECT_FALSE(a.samples.replicas[1].requests);  // one run's count is not the pool's
  EXPECT_NEAR(*a.prefix_hit_pct, 100.0 * 100 / 450, 1e-9);
  EXPECT_EQ(a.samples.requests_sent, 11u);
  EXPECT_EQ(a.samples.requests_failed, 1u);
  EXPECT_EQ(a.samples.first_failure, "HTTP 500: oops");
  // The warden's counters were read in one run only: the follow-ups speak for both.
  EXPECT_FALSE(a.samples.warden_sticky);
  EXPECT_DOUBLE_EQ(*a.stayed_pct, 50.0);
}

// --- policies -------------------------------------------------------------

core::Identity session(std::string_view id) {
  return {.kind = core::IdentityKind::kSession, .session_hash = stable_hash(id)};
}

TEST(EvaluatorPolicy, RegistryBuildsEveryKnownSpecAndRejectsOthers) {
  for (const auto& info : known_policies()) {
    const std::string spec = info.spec == "warden:N" ? "warden:3" : std::string(info.spec);
    auto p = make_policy(spec, 4);
    ASSERT_TRUE(p) << spec;
  }
  EXPECT_EQ((*make_policy("off", 4))->name(), "vllm");
  EXPECT_EQ((*make_policy("on", 4))->name(), "warden(spill=8)");
  EXPECT_EQ((*make_policy("warden:3", 4))->name(), "warden(spill=3)");
  EXPECT_FALSE(make_policy("warden:0", 4));
  EXPECT_FALSE(make_policy("warden:x", 4));
  EXPECT_FALSE(make_policy("random", 4));
  EXPECT_NE(make_policy("random", 4).error().find("session-hash"), std::string::npos);
}

TEST(EvaluatorPolicy, VllmBalancerTakesLowestFourWaitingPlusRunningTiesLow) {
  auto p = std::move(make_policy("vllm", 3)).value();
  const auto id = session("a");
  std::vector<ReplicaSnapshot> live{
      {.running = 4, .waiting = 0}, {.running = 0, .waiting = 1}, {.running = 3, .waiting = 0}};
  EXPECT_EQ(p->place({.identity = id}, live).replica, 2);  // 3 < 4 = 4
  live[2].running = 4;
  EXPECT_EQ(p->place({.identity = id}, live).replica, 0);  // three-way tie → lowest
}

TEST(EvaluatorPolicy, SessionHashIsStickyAndLoadBlind) {
  auto p = std::move(make_policy("session-hash", 4)).value();
  const auto id = session("3f1c2b4e-0000-4000-8000-000000000001");
  std::vector<ReplicaSnapshot> live(4);
  const int home = p->place({.identity = id}, live).replica;
  live[static_cast<std::size_t>(home)].waiting = 100;
  EXPECT_EQ(p->place({.identity = id, .turn = 1}, live).replica, home);
}

TEST(EvaluatorPolicy, WardenKeepsAConversationHomeAndSpillsOverTheThreshold) {
  auto p = std::move(make_policy("warden:2", 4)).value();
  std::vector<ReplicaSnapshot> live(4);
  const auto a = session("a");
  const Placement first = p->place({.identity = a}, live);
  p->finished(first, 1.0);
  const Placement again = p->place({.identity = a, .turn = 1, .now = 2.0}, live);
  EXPECT_EQ(again.replica, first.replica);
  // Two in flight at home: the third spills elsewhere, the home stays.
  const Placement second = p->place({.identity = a, .turn = 1, .now = 2.0}, live);
  EXPECT_EQ(second.replica, first.replica);
  const Placement spilled = p->place({.identity = a, .turn = 1, .now = 2.0}, live);
  EXPECT_NE(spilled.replica, first.replica);
  p->finished(again, 3.0);
  p->finished(second, 3.0);
  p->finished(spilled, 3.0);
  EXPECT_EQ(p->place({.identity = a, .turn = 2, .now = 4.0}, live).replica, first.replica);
}

// --- the simulation -------------------------------------------------------

// Steps shorter than the default keep the suite fast under sanitizers; 90 s
// is still several sessions per slot at 4–8 sessions.
EvaluatorConfig short_config(double seconds = 90) {
  EvaluatorConfig c;
  c.step_seconds = seconds;
  return c;
}

StepResult run(const EvaluatorConfig& c, int sessions, const std::string& arm) {
  const workload::Workload w(c.workload);
  auto r = run_step(c, w, sessions, arm);
  EXPECT_TRUE(r) << (r ? "" : r.error());
  return std::move(r).value();
}

void print(const StepResult& s) {
  std::printf(
      "%-16s n=%-3d sess/h %6.1f tok/min %7.0f ttfb p50 %6.2f p95 %6.2f busy %4.2f hit %5.1f%% "
      "stayed %5.1f%% preempt",
      s.policy.c_str(), s.sessions, s.sessions_per_hour, s.output_tokens_per_min,
      s.ttfb_p50_s.value_or(-1), s.ttfb_p95_s.value_or(-1), s.replicas_busy.value_or(-1),
      s.prefix_hit_pct.value_or(-1), s.stayed_pct.value_or(-1));
  for (const auto& r : s.samples.replicas)
    std::printf(" %.0f/%.0f", r.preemptions.value_or(-1), r.busy_polls);
  std::printf("\n");
}

// Counts requests in flight through the policy interface: a closed loop of N
// sessions has exactly N requests placed and not finished at every scrape.
class CountingPolicy final : public Policy {
 public:
  std::string name() const override { return "counting"; }
  void observe(std::span<const ReplicaSnapshot>, engine::Seconds) override {
    samples.push_back(in_flight);
  }
  Placement place(const TurnRequest&, std::span<const ReplicaSnapshot> live) override {
    ++in_flight;
    return {.replica = static_cast<int>(next++ % live.size())};
  }
  void finished(const Placement&, engine::Seconds) override { --in_flight; }
  int in_flight = 0;
  std::uint64_t next = 0;
  std::vector<int>* out = nullptr;
  std::vector<int> samples;
  ~CountingPolicy() override {
    if (out) *out = samples;
  }
};

TEST(EvaluatorSimulation, ClosedLoopConcurrencyHolds) {
  EvaluatorConfig c = short_config(120);
  auto in_flight_at_scrapes = [&] {
    const workload::Workload w(c.workload);
    std::vector<int> in_flight;
    auto policy = std::make_unique<CountingPolicy>();
    policy->out = &in_flight;
    auto r = run_step(c, w, 6, "counting", std::move(policy));
    EXPECT_TRUE(r);
    EXPECT_GT(r->sessions_completed, 0u);  // sessions were replaced, and still 6 ran
    EXPECT_EQ(r->samples.requests_failed, 0u);
    return in_flight;
  };
  // No tool time: every session always has its request in flight.
  c.workload.tool_seconds = 0;
  auto in_flight = in_flight_at_scrapes();
  ASSERT_GE(in_flight.size(), 120u);
  for (int n : in_flight) ASSERT_EQ(n, 6);
  // With tool runs between turns, never more than the sessions, often all.
  c.workload.tool_seconds = 1.0;
  in_flight = in_flight_at_scrapes();
  ASSERT_GE(in_flight.size(), 120u);
  EXPECT_EQ(*std::max_element(in_flight.begin(), in_flight.end()), 6);
  for (int n : in_flight) ASSERT_LE(n, 6);
}

TEST(EvaluatorSimulation, DeterministicForAConfig) {
  const EvaluatorConfig c = short_config(40);
  const StepResult a = run(c, 4, "on");
  const StepResult b = run(c, 4, "on");
  EXPECT_EQ(a.samples.ttfb_s, b.samples.ttfb_s);
  EXPECT_EQ(a.samples.replicas_busy, b.samples.replicas_busy);
  EXPECT_EQ(a.output_tokens, b.output_tokens);
  EXPECT_GT(a.samples.ttfb_s.size(), 10u);
}

// The claim the project exists for, on the default workload and fleet: with
// four or eight agent sessions on four replicas, keeping each conversation on
// its replica serves far more of the prompt from cache than vLLM's balancer.
TEST(EvaluatorSimulation, WardenBeatsVllmBalancerOnPrefixHitsAt4And8Sessions) {
  const EvaluatorConfig c = short_config();
  for (int sessions : {4, 8}) {
    const StepResult off = run(c, sessions, "off");
    const StepResult on = run(c, sessions, "on");
    print(off);
    print(on);
    ASSERT_TRUE(off.prefix_hit_pct && on.prefix_hit_pct);
    EXPECT_GT(*on.prefix_hit_pct, *off.prefix_hit_pct + 15.0) << sessions << " sessions";
    EXPECT_GT(*on.stayed_pct, 95.0);
    EXPECT_LT(*off.stayed_pct, 60.0);
    // Cached prompts turn into faster first tokens, not just a better ratio.
    EXPECT_LT(*on.ttfb_p50_s, *off.ttfb_p50_s);
  }
}

// Session hashing's known weakness, on a skewed workload (half the sessions
// pull in three times the context): perfectly sticky, yet load-blind, so one
// replica draws several heavy conversations and thrashes its cache while
// another sits idle. The warden places by load and keeps every replica busy.
TEST(EvaluatorSimulation, SessionHashingIdlesSomeReplicasWhileOthersThrash) {
  EvaluatorConfig c = short_config(120);
  c.workload.heavy_share = 0.5;
  c.workload.heavy_factor = 3.0;
  const StepResult hash = run(c, 8, "session-hash");
  const StepResult warden = run(c, 8, "on");
  print(hash);
  print(warden);
  const auto polls = static_cast<double>(hash.samples.replicas_busy.size());
  auto least_busy = [&](const StepResult& s) {
    double least = 1.0;
    for (const auto& r : s.samples.replicas) least = std::min(least, r.busy_polls / polls);
    return least;
  };
  // Idle: some replica had nothing running most of the time under hashing.
  EXPECT_LT(least_busy(hash), 0.5);
  EXPECT_GT(least_busy(warden), 0.8);
  EXPECT_LT(*hash.replicas_busy, *warden.replicas_busy - 0.3);
  // Thrash: every turn went home, yet much of home's cache was gone.
  EXPECT_GT(*hash.stayed_pct, 99.0);
  EXPECT_LT(*hash.prefix_hit_pct, *warden.prefix_hit_pct - 10.0);
  EXPECT_GT(*hash.ttfb_p95_s, 1.5 * *warden.ttfb_p95_s);
}

TEST(EvaluatorOffline, RunsEveryStepAndArmInTableOrder) {
  EvaluatorConfig c = short_config(20);
  c.steps = {2, 3};
  c.arms = {"off", "round-robin", "on"};
  std::vector<std::string> seen;
  auto results = run_offline(
      c, [&](const StepResult& s) { seen.push_back(std::to_string(s.sessions) + s.arm); });
  ASSERT_TRUE(results) << results.error();
  EXPECT_EQ(seen, (std::vector<std::string>{"2off", "2round-robin", "2on", "3off", "3round-robin",
                                            "3on"}));
  EXPECT_EQ(results->size(), 6u);
  EXPECT_EQ((*results)[1].policy, "round-robin");
  c.arms = {"bogus"};
  EXPECT_FALSE(run_offline(c));
  c.arms = {"on"};
  c.profile = "no-such-gpu";
  EXPECT_FALSE(run_offline(c));
}

// --repeats: each cell run on consecutive seeds, pooled. The seeds must draw
// different sessions, or pooling would only repeat one run.
TEST(EvaluatorOffline, RepeatsPoolTheRunsOfConsecutiveSeeds) {
  EvaluatorConfig c = short_config(60);
  c.steps = {6};
  c.arms = {"on"};
  c.workload.heavy_share = 0.5;
  c.workload.seed = 5;
  auto first = run_offline(c);
  c.workload.seed = 6;
  auto second = run_offline(c);
  ASSERT_TRUE(first && second);
  const StepResult& a = (*first)[0];
  const StepResult& b = (*second)[0];
  ASSERT_NE(a.samples.ttfb_s, b.samples.ttfb_s);

  c.workload.seed = 5;
  c.repeats = 2;
  std::vector<StepResult> heard;
  auto pooled = run_offline(c, [&](const StepResult& s) { heard.push_back(s); });
  ASSERT_TRUE(pooled) << pooled.error();
  ASSERT_EQ(pooled->size(), 1u);  // one cell
  ASSERT_EQ(heard.size(), 1u);
  const StepResult& p = (*pooled)[0];
  EXPECT_DOUBLE_EQ(p.duration_s, 120);
  EXPECT_EQ(p.sessions_completed, a.sessions_completed + b.sessions_completed);
  std::vector<double> both = a.samples.ttfb_s;
  both.insert(both.end(), b.samples.ttfb_s.begin(), b.samples.ttfb_s.end());
  EXPECT_EQ(p.samples.ttfb_s, both);
  EXPECT_EQ(heard[0].samples.ttfb_s, both);
  EXPECT_EQ(p.ttfb_p50_s, percentile(both, 50));
  double queries = 0;
  double hits = 0;
  for (const auto* s : {&a, &b}) {
    for (const auto& r : s->samples.replicas) {
      queries += r.prefix_cache_queries;
      hits += r.prefix_cache_hits;
    }
  }
  EXPECT_NEAR(*p.prefix_hit_pct, 100.0 * hits / queries, 1e-9);
  EXPECT_EQ(p.samples.requests_sent, a.samples.requests_sent + b.samples.requests_sent);

  c.repeats = 0;
  auto refused = run_offline(c);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), "repeats must be in [1, 1000]");
}

// A first turn longer than the replicas' context: every session would fail
// at once, and the run would start one after another without end.
TEST(EvaluatorOffline, AFirstTurnNoReplicaCanTakeIsRefused) {
  EvaluatorConfig c = short_config(20);
  c.workload.first_user_tokens = 40000;
  auto results = run_offline(c);
  ASSERT_FALSE(results);
  EXPECT_EQ(results.error(),
            "--system-tokens 3500 and --first-user-tokens 40000 make a first turn of 43500 "
            "tokens, and the replicas' context is 32768 (profile a4000-qwen3-4b): no session "
            "could start");
  // Turns that outgrow the context later fail, and the step says why.
  c.workload.first_user_tokens = 28000;
  c.workload.followup_tokens = 1000;
  c.steps = {2};
  c.arms = {"on"};
  results = run_offline(c);
  ASSERT_TRUE(results) << results.error();
  EXPECT_GT((*results)[0].samples.requests_failed, 0u);
  EXPECT_THAT(
      (*results)[0].samples.first_failure,
      ::testing::MatchesRegex("a prompt of [0-9]+ tokens, too long for the replica's context"));
}

// The same with the first turn just under the context but its rendering
// over it: each session fails, a slot gives up after some, and the step ends.
TEST(EvaluatorOffline, ASlotWhoseEverySessionFailsGoesIdle) {
  EvaluatorConfig c = short_config(20);
  c.workload.system_prompt_tokens = 0;
  c.workload.first_user_tokens = 32767;
  c.steps = {1};
  c.arms = {"on"};
  auto results = run_offline(c);
  ASSERT_TRUE(results) << results.error();
  EXPECT_EQ((*results)[0].samples.requests_failed, 64u);
  EXPECT_EQ((*results)[0].samples.requests_sent, 64u);
}

}  // namespace
}  // namespace lmwarden::evaluator
