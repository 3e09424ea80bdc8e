// CachedCountCheck: when a server's replies are taken to come from a vLLM
// started without --enable-prompt-tokens-details, and when that is said.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "proxy/model_telemetry.h"

namespace lmwarden::proxy {
namespace {

constexpr auto kNever = [] { return false; };  // the engine's counters say nothing against it
constexpr std::uint64_t kWithin = CachedCountCheck::kExpectedWithin;

TEST(CachedCountCheck, TheReplyThatReachesTheThresholdIsTheOneToTellOfIt) {
  CachedCountCheck check;
  for (std::uint64_t i = 1; i < kWithin; ++i) {
    EXPECT_FALSE(check.count(false, kNever)) << "reply " << i;
    EXPECT_FALSE(check.missing(false));
  }
  EXPECT_TRUE(check.count(false, kNever));
  EXPECT_TRUE(check.missing(false));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(check.count(false, kNever)) << "told once";
  EXPECT_TRUE(check.missing(false));
}

TEST(CachedCountCheck, OneReplyWithACountSettlesIt) {
  CachedCountCheck before;
  EXPECT_FALSE(before.count(true, kNever));
  for (std::uint64_t i = 0; i < 2 * kWithin; ++i) EXPECT_FALSE(before.count(false, kNever));
  EXPECT_FALSE(before.missing(false));

  CachedCountCheck after;  // a count after the threshold clears what was said
  for (std::uint64_t i = 0; i < kWithin; ++i) after.count(false, kNever);
  ASSERT_TRUE(after.missing(false));
  EXPECT_FALSE(after.count(true, kNever));
  EXPECT_FALSE(after.missing(false));
}

TEST(CachedCountCheck, AnEngineThatCachedNothingHoldsItBackUntilItsCountersShowAHit) {
  CachedCountCheck check;
  bool cached_nothing = true;
  int asked = 0;
  const auto engine = [&] {
    ++asked;
    return cached_nothing;
  };
  for (std::uint64_t i = 0; i < kWithin + 5; ++i) EXPECT_FALSE(check.count(false, engine));
  EXPECT_FALSE(check.missing(true));
  EXPECT_EQ(asked, 6) << "asked from the threshold on, not before";
  cached_nothing = false;
  EXPECT_TRUE(check.missing(false));
  EXPECT_TRUE(check.count(false, engine));
  EXPECT_FALSE(check.count(false, engine));
  EXPECT_EQ(asked, 7) << "not asked once said";
}

TEST(CachedCountCheck, ThreadsCountingAtOnceTellItOnce) {
  CachedCountCheck check;
  std::atomic<int> told{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (std::uint64_t i = 0; i < 2 * kWithin; ++i) told += check.count(false, kNever) ? 1 : 0;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(told.load(), 1);
  EXPECT_TRUE(check.missing(false));
}

TEST(ModelTelemetry, EachServerIsCheckedOnItsOwnAndNamedByItsUrl) {
  ModelTelemetry model{"m", {{"http://a:8000", 2}, {"http://b:8000", 1}}};
  EXPECT_EQ(model.replica_count(), 3);
  for (std::uint64_t i = 0; i < kWithin; ++i) {
    model.count_usage(0, false);
    model.count_usage(1, true);
  }
  EXPECT_EQ(model.cached_count_missing(), std::vector<std::string>{"http://a:8000"});
  // Both of a's ranks report prompts read and no hit: nothing says it is off.
  model.replica(0).prefix_hit_rate = 0.0;
  model.replica(1).prefix_hit_rate = 0.0;
  EXPECT_TRUE(model.cached_count_missing().empty());
  model.replica(1).prefix_hit_rate = 0.25;  // one rank served from its cache
  EXPECT_EQ(model.cached_count_missing(), std::vector<std::string>{"http://a:8000"});
  EXPECT_EQ(model.server_url(1), "http://b:8000");
}

// A rank whose counters have not been read rising yet says nothing either
// way: one rank that read prompts and served none from its cache holds the
// server back, as it would alone (the replies without a count came from it).
TEST(ModelTelemetry, ARankNotMeasuredYetDoesNotOverruleOneThatCachedNothing) {
  ModelTelemetry model{"m", {{"http://a:8000", 2}}};
  model.replica(0).prefix_hit_rate = 0.0;  // rank 1: -1, no query seen yet
  for (std::uint64_t i = 0; i < kWithin; ++i) EXPECT_FALSE(model.count_usage(0, false)) << i;
  EXPECT_TRUE(model.cached_count_missing().empty());
  model.replica(1).prefix_hit_rate = 0.5;
  EXPECT_EQ(model.cached_count_missing(), std::vector<std::string>{"http://a:8000"});
  // Neither measured: nothing holds it back (no scrape has read the engine).
  ModelTelemetry unread{"m", {{"http://a:8000", 2}}};
  for (std::uint64_t i = 0; i + 1 < kWithin; ++i) EXPECT_FALSE(unread.count_usage(0, false));
  EXPECT_TRUE(unread.count_usage(0, false));
}

}  // namespace
}  // namespace lmwarden::proxy
