#include <gtest/gtest.h>

#include <limits>

#include "telemetry/counter_delta.h"

namespace lmwarden::telemetry {
namespace {

RankMetrics scrape(double queries, double hits) {
  return RankMetrics{.prefix_cache_queries = queries, .prefix_cache_hits = hits};
}

TEST(CounterDelta, FirstObservationIsOnlyABaseline) {
  CounterDelta c;
  EXPECT_EQ(c.observe(1000), 0);
  EXPECT_EQ(c.observe(1500), 500);
  EXPECT_EQ(c.observe(1500), 0);
  EXPECT_EQ(c.increase(), 500);
}

TEST(CounterDelta, RestartAddsTheNewValueWholeAndNeverDecreases) {
  CounterDelta c;
  c.observe(1000);
  c.observe(1200);               // +200
  EXPECT_EQ(c.observe(50), 50);  // restarted: 50 counted since
  EXPECT_EQ(c.observe(80), 30);
  EXPECT_EQ(c.increase(), 280);
}

TEST(CounterDelta, IgnoresNonFiniteAndNegative) {
  CounterDelta c;
  c.observe(10);
  EXPECT_EQ(c.observe(std::numeric_limits<double>::quiet_NaN()), 0);
  EXPECT_EQ(c.observe(-std::numeric_limits<double>::infinity()), 0);
  EXPECT_EQ(c.observe(-3), 0);
  EXPECT_EQ(c.observe(15), 5);
}

TEST(RankCounters, HitRateIsSinceTheWardenStarted) {
  RankCounters r;
  r.observe(scrape(1'000'000, 900'000));  // history before the warden: ignored
  EXPECT_FALSE(r.totals().prefix_cache_hit_rate());
  r.observe(scrape(1'001'000, 900'250));
  ASSERT_TRUE(r.totals().prefix_cache_hit_rate());
  EXPECT_DOUBLE_EQ(*r.totals().prefix_cache_hit_rate(), 0.25);
}

TEST(RankCounters, ARestartOfOneCounterReBaselinesAll) {
  RankCounters r;
  r.observe(scrape(100, 50));
  r.observe(scrape(200, 100));  // +100 queries, +50 hits
  r.observe(scrape(80, 60));    // restart: queries went back; the 60 hits are all new
  EXPECT_EQ(r.totals().restarts, 1u);
  EXPECT_EQ(r.totals().prefix_cache_queries, 180);
  EXPECT_EQ(r.totals().prefix_cache_hits, 110);
  r.observe(scrape(100, 70));
  EXPECT_EQ(r.totals().prefix_cache_queries, 200);
  EXPECT_EQ(r.totals().prefix_cache_hits, 120);
  EXPECT_DOUBLE_EQ(*r.totals().prefix_cache_hit_rate(), 0.6);
}

TEST(RankCounters, HitRateStaysInRangeOnInconsistentScrapes) {
  RankCounters r;
  r.observe(scrape(100, 0));
  r.observe(scrape(110, 50));  // hits outran queries (scraped mid-update)
  EXPECT_EQ(*r.totals().prefix_cache_hit_rate(), 1.0);
}

TEST(RankCounters, MissingCountersKeepTheirState) {
  RankCounters r;
  r.observe(RankMetrics{.prompt_tokens = 10, .generation_tokens = 5});
  r.observe(RankMetrics{.prompt_tokens = 30});
  r.observe(RankMetrics{.prompt_tokens = 40, .generation_tokens = 9});
  EXPECT_EQ(r.totals().prompt_tokens, 30);
  EXPECT_EQ(r.totals().generation_tokens, 4);
  EXPECT_EQ(r.totals().restarts, 0u);
}

}  // namespace
}  // namespace lmwarden::telemetry
