#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "telemetry/histogram.h"
#include "telemetry/token_series.h"

namespace lmwarden::telemetry {
namespace {

using std::chrono::seconds;

// A fixed wall time on a 10-minute boundary, so bucket alignment is obvious.
const WallTime kT0 = WallTime{seconds{1'800'000'000}};

TEST(TokenSeries, OneSecondBucketsOverTheLastMinute) {
  TokenSeries s;
  s.record(kT0 + seconds{10}, {.cached = 100, .computed = 20, .completion = 3});
  s.record(kT0 + seconds{10} + std::chrono::milliseconds{999}, {.computed = 5});
  s.record(kT0 + seconds{59}, {.completion = 7});
  const TokenWindow w = s.query(kT0 + seconds{59} + std::chrono::milliseconds{500}, seconds{60});
  ASSERT_EQ(w.buckets.size(), 60u);
  EXPECT_EQ(w.step, seconds{1});
  EXPECT_EQ(w.buckets.front().start_unix_s, 1'800'000'000);
  EXPECT_EQ(w.buckets[10].tokens, (TokenCounts{.cached = 100, .computed = 25, .completion = 3}));
  EXPECT_EQ(w.buckets[11].tokens, TokenCounts{});
  EXPECT_EQ(w.buckets.back().tokens.completion, 7u);
  EXPECT_EQ(w.total, (TokenCounts{.cached = 100, .computed = 25, .completion = 10}));
  EXPECT_DOUBLE_EQ(*w.cache_hit_ratio(), 100.0 / 125.0);
}

TEST(TokenSeries, BucketedQueriesAlignToTheStep) {
  TokenSeries s;
  for (int i = 0; i < 120; ++i) s.record(kT0 + seconds{i}, {.computed = 1});
  const TokenWindow w = s.query(kT0 + seconds{119}, seconds{120}, seconds{30});
  ASSERT_EQ(w.buckets.size(), 4u);
  for (const TokenBucket& b : w.buckets) EXPECT_EQ(b.tokens.computed, 30u);
  EXPECT_EQ(w.buckets[1].start_unix_s - w.buckets[0].start_unix_s, 30);
  // A step that is not a multiple of the resolution is rounded up.
  EXPECT_EQ(s.query(kT0 + seconds{4000}, seconds{7200}, seconds{15}).step, seconds{20});
}

TEST(TokenSeries, KeepsAnHourAtOneSecondAndSixHoursAtTen) {
  TokenSeries s;
  s.record(kT0, {.cached = 1});
  const WallTime later = kT0 + seconds{3599};
  EXPECT_EQ(s.query(later, seconds{3600}).total.cached, 1u);
  EXPECT_EQ(s.query(later + seconds{1}, seconds{3600}).total.cached, 0u);  // slid out
  // Still there at 10 s resolution for six hours.
  const TokenWindow six = s.query(kT0 + seconds{5 * 3600}, seconds{6 * 3600});
  EXPECT_EQ(six.step, seconds{10});
  EXPECT_EQ(six.buckets.size(), 2160u);
  EXPECT_EQ(six.total.cached, 1u);
  EXPECT_EQ(s.query(kT0 + seconds{7 * 3600}, seconds{6 * 3600}).total.cached, 0u);
}

TEST(TokenSeries, RingSlotsAreReusedNotGrown) {
  TokenSeries s;
  for (int i = 0; i < 3 * 3600; ++i) s.record(kT0 + seconds{i}, {.completion = 1});
  const WallTime now = kT0 + seconds{3 * 3600 - 1};
  EXPECT_EQ(s.query(now, seconds{60}).total.completion, 60u);
  EXPECT_EQ(s.query(now, seconds{3600}).total.completion, 3600u);
  EXPECT_EQ(s.query(now, seconds{6 * 3600}).total.completion, 3u * 3600);
  EXPECT_LT(TokenSeries::memory_bytes(), 200u * 1024);
}

TEST(TokenSeries, LateRecordsNeverOverwriteNewerData) {
  TokenSeries s;
  s.record(kT0 + seconds{3600}, {.computed = 5});
  s.record(kT0, {.computed = 99});  // same fine slot, an hour older: dropped there
  EXPECT_EQ(s.query(kT0 + seconds{3600}, seconds{1}).total.computed, 5u);
}

TEST(TokenSeries, RequestSpreadsCompletionFromFirstTokenToEnd) {
  TokenSeries s;
  s.record_request(kT0 + seconds{2}, kT0 + seconds{5} + std::chrono::milliseconds{300},
                   {.cached = 800, .computed = 200, .completion = 10});
  const TokenWindow w = s.query(kT0 + seconds{9}, seconds{10});
  EXPECT_EQ(w.buckets[2].tokens, (TokenCounts{.cached = 800, .computed = 200, .completion = 3}));
  EXPECT_EQ(w.buckets[3].tokens.completion, 3u);
  EXPECT_EQ(w.buckets[4].tokens.completion, 2u);
  EXPECT_EQ(w.buckets[5].tokens.completion, 2u);
  EXPECT_EQ(w.total.completion, 10u);
  // An end before the first token (clock step) puts everything at first token.
  s.record_request(kT0 + seconds{8}, kT0 + seconds{1}, {.completion = 4});
  EXPECT_EQ(s.query(kT0 + seconds{9}, seconds{10}).buckets[8].tokens.completion, 4u);
}

TEST(TokenWindow, ModelWindowIsTheSumOfReplicas) {
  TokenSeries a, b;
  a.record(kT0 + seconds{1}, {.cached = 3});
  b.record(kT0 + seconds{1}, {.computed = 1});
  TokenWindow w = a.query(kT0 + seconds{5}, seconds{6});
  w.add(b.query(kT0 + seconds{5}, seconds{6}));
  EXPECT_EQ(w.buckets[1].tokens, (TokenCounts{.cached = 3, .computed = 1}));
  EXPECT_DOUBLE_EQ(*w.cache_hit_ratio(), 0.75);
  EXPECT_FALSE(TokenWindow{}.cache_hit_ratio());
  TokenWindow sum;
  sum.add(a.query(kT0 + seconds{5}, seconds{6}));
  sum.add(b.query(kT0 + seconds{5}, seconds{6}));
  EXPECT_EQ(sum.buckets.size(), 6u);
  EXPECT_EQ(sum.buckets[1].tokens, (TokenCounts{.cached = 3, .computed = 1}));
}

TEST(TokenSeries, ConcurrentRecordsAreAllCounted) {
  TokenSeries s;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&s] {
      for (int i = 0; i < 5000; ++i) s.record(kT0 + seconds{i % 60}, {.completion = 1});
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(s.query(kT0 + seconds{59}, seconds{60}).total.completion, 20000u);
}

TEST(Histogram, CumulativeBucketsSumAndCount) {
  const std::array<double, 3> bounds = {0.1, 1, 10};
  Histogram h(bounds);
  for (double v : {0.05, 0.1, 0.5, 2.0, 100.0}) h.observe(v);
  h.observe(std::numeric_limits<double>::quiet_NaN());
  const HistogramSnapshot snap = h.snapshot();
  EXPECT_EQ(snap.cumulative_counts, (std::vector<std::uint64_t>{2, 3, 4, 5}));
  EXPECT_EQ(snap.count(), 5u);
  EXPECT_DOUBLE_EQ(snap.sum, 102.65);
}

}  // namespace
}  // namespace lmwarden::telemetry
