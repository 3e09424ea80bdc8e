// HomeStore::claim against a real redis-server: a home set unless another
// warden's is there, answered with what the key holds; and what a Redis
// that refuses the claim's script (an ACL without EVAL and EVALSHA) or
// answers it with an error gets instead; the script loaded once per
// connection and named by its SHA1.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "home_store_support.h"
#include "homes/home_store.h"

namespace lmwarden::homes {
namespace {

using namespace testing_support;

// "" for a claim not answered in 5 s; "taken", "held:<value>", "unchecked" or
// "failed".
std::string claim(HomeStore& store, const std::string& key, const std::string& replaces,
                  const std::string& value, std::chrono::milliseconds ttl = 60s) {
  auto answer = std::make_shared<std::promise<Claim>>();
  auto future = answer->get_future();
  store.claim(key, replaces, value, ttl, [answer](Claim c) { answer->set_value(std::move(c)); });
  if (future.wait_for(5s) != std::future_status::ready) return "";
  const Claim c = future.get();
  switch (c.status) {
    case ClaimStatus::kTaken:
      return "taken";
    case ClaimStatus::kHeld:
      return "held:" + c.holder;
    case ClaimStatus::kUnchecked:
      return "unchecked";
    case ClaimStatus::kRefused:
      return "refused";
    case ClaimStatus::kFailed:
      return "failed";
  }
  return "?";
}

// Store options for a Redis user that may run every command but `denied`
// (ACL names: "eval", "script|load"), made so.
HomeStoreOptions options_for_user_without(const testing::RedisServer& redis,
                                          const std::vector<std::string>& denied) {
  std::vector<std::string> acl{"ACL", "SETUSER", "limited", "reset", "on", ">pw", "~*", "+@all"};
  for (const auto& command : denied) acl.push_back("-" + command);
  EXPECT_EQ(redis.command(acl), "+OK");
  HomeStoreOptions options = options_for(redis.port(), /*retry_after=*/60s);
  options.address.username = "limited";
  options.address.password = "pw";
  return options;
}

TEST_F(HomeStoreTest, AClaimTakesAnAbsentKeyAndYieldsToAnotherValue) {
  HomeStore store(options_for(redis_.port()));
  EXPECT_EQ(claim(store, "conv:1", "", "0 http://a:1", 60s), "taken");
  EXPECT_EQ(lookup(store, "conv:1"), "found:0 http://a:1");
  const long long ttl = std::stoll(redis_.command({"PTTL", "conv:1"}).substr(1));
  EXPECT_GT(ttl, 50000);
  EXPECT_LE(ttl, 60000);
  // Another warden's choice, claimed later, leaves the first.
  EXPECT_EQ(claim(store, "conv:1", "", "1 http://b:1"), "held:0 http://a:1");
  EXPECT_EQ(lookup(store, "conv:1"), "found:0 http://a:1");
  // The same choice again is taken (a warden that had chosen alike).
  EXPECT_EQ(claim(store, "conv:1", "", "0 http://a:1"), "taken");
  const HomeStoreStats stats = store.stats();
  EXPECT_EQ(stats.claims_taken, 2u);
  EXPECT_EQ(stats.claims_held, 1u);
  EXPECT_EQ(stats.writes_sent, 3u);
}

// A home moved off a failed replica replaces what the key held, when it
// still holds that; one another warden moved first is left.
TEST_F(HomeStoreTest, AClaimReplacesOnlyTheHomeItMovedFrom) {
  HomeStore store(options_for(redis_.port()));
  store.put("conv:1", "0 http://a:1", 60s);
  ASSERT_EQ(lookup(store, "conv:1"), "found:0 http://a:1");
  EXPECT_EQ(claim(store, "conv:1", "0 http://a:1", "0 http://b:1"), "taken");
  EXPECT_EQ(claim(store, "conv:1", "0 http://a:1", "0 http://c:1"), "held:0 http://b:1");
  EXPECT_EQ(lookup(store, "conv:1"), "found:0 http://b:1");
}

// A claim Redis answers with an error (here the script meets a key of
// another type; in production, out of memory) is refused alone: not sent
// again, and the connection serves on.
TEST_F(HomeStoreTest, AClaimAnsweredWithAnErrorIsRefused) {
  HomeStore store(options_for(redis_.port(), /*retry_after=*/60s));
  ASSERT_EQ(redis_.command({"HSET", "conv:hash", "f", "v"}), ":1");
  EXPECT_EQ(claim(store, "conv:hash", "", "0 http://a:1"), "refused");
  EXPECT_EQ(claim(store, "conv:1", "", "0 http://a:1"), "taken");
  const HomeStoreStats stats = store.stats();
  EXPECT_EQ(stats.writes_failed, 1u);
  EXPECT_EQ(stats.writes_sent, 1u);
  EXPECT_TRUE(stats.connected);
}

// Of many claims on one key at once, from two stores (two wardens), one
// value is taken and every other claim is told that one.
TEST_F(HomeStoreTest, OfClaimsAtOnceOneValueWins) {
  HomeStore first(options_for(redis_.port()));
  HomeStore second(options_for(redis_.port()));
  std::vector<std::future<std::string>> answers;
  for (int i = 0; i < 20; ++i) {
    HomeStore& store = i % 2 == 0 ? first : second;
    answers.push_back(std::async(std::launch::async, [&store, i] {
      return claim(store, "conv:race", "", std::to_string(i) + " http://a:1");
    }));
  }
  std::vector<std::string> results;
  for (auto& a : answers) results.push_back(a.get());
  const std::string winner = lookup(first, "conv:race").substr(6);  // after "found:"
  int taken = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i] == "taken") {
      ++taken;
      EXPECT_EQ(std::to_string(i) + " http://a:1", winner);
    } else {
      EXPECT_EQ(results[i], "held:" + winner) << i;
    }
  }
  EXPECT_EQ(taken, 1);
}

// A Redis whose ACL refuses scripts: logged once, and the claims on that
// connection are written with a plain SET (unchecked: over whatever the key
// held), the refused first one sent again so, so that every home is still
// shared; lookups and writes go on.
TEST_F(HomeStoreTest, ARedisThatRefusesScriptsGetsPlainWrites) {
  const HomeStoreOptions options = options_for_user_without(redis_, {"eval", "evalsha"});
  CapturedLog log;
  {
    HomeStore store(options);
    EXPECT_EQ(claim(store, "conv:1", "", "0 http://a:1"), "unchecked");
    EXPECT_EQ(lookup(store, "conv:1"), "found:0 http://a:1");
    EXPECT_EQ(claim(store, "conv:2", "", "0 http://a:1"), "unchecked");
    EXPECT_EQ(lookup(store, "conv:2"), "found:0 http://a:1");
    store.put("conv:3", "1 http://b:1", 60s);
    EXPECT_EQ(claim(store, "conv:3", "", "0 http://a:1"), "unchecked");
    EXPECT_EQ(lookup(store, "conv:3"), "found:0 http://a:1");
    const long long ttl = std::stoll(redis_.command({"PTTL", "conv:3"}).substr(1));
    EXPECT_GT(ttl, 50000);
    const HomeStoreStats stats = store.stats();
    EXPECT_TRUE(stats.connected);
    EXPECT_EQ(stats.writes_failed, 0u);
    EXPECT_EQ(stats.writes_sent, 4u);
    EXPECT_EQ(stats.claims_unchecked, 3u);
    EXPECT_EQ(stats.claims_taken + stats.claims_held, 0u);
  }
  EXPECT_EQ(log.count("refuses the claim's script (EVAL): NOPERM"), 1u);
  EXPECT_EQ(log.count("warn"), 1u);
}

// Claims sent together before Redis's first refusal is seen (one pipeline)
// are all refused, and all sent again as SETs.
TEST_F(HomeStoreTest, ClaimsRefusedTogetherAreAllWritten) {
  HomeStore store(options_for_user_without(redis_, {"eval", "evalsha"}));
  std::vector<std::future<std::string>> answers;
  for (int i = 0; i < 8; ++i)
    answers.push_back(std::async(std::launch::async, [&store, i] {
      return claim(store, "conv:" + std::to_string(i), "", "0 http://a:1");
    }));
  for (auto& a : answers) EXPECT_EQ(a.get(), "unchecked");
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(lookup(store, "conv:" + std::to_string(i)), "found:0 http://a:1");
  EXPECT_EQ(store.stats().writes_failed, 0u);
}

// The script goes to Redis once per connection (SCRIPT LOAD, with the
// connection's first commands); claims then name it by its SHA1 (EVALSHA),
// about 180 bytes fewer each.
TEST_F(HomeStoreTest, ClaimsNameTheScriptLoadedOnce) {
  HomeStore store(options_for(redis_.port()));
  EXPECT_EQ(lookup(store, "conv:0"), "absent");  // the connection's first pipeline
  EXPECT_EQ(claim(store, "conv:1", "", "0 http://a:1"), "taken");
  EXPECT_EQ(claim(store, "conv:1", "", "1 http://b:1"), "held:0 http://a:1");
  EXPECT_EQ(claim(store, "conv:2", "", "0 http://a:1"), "taken");
  EXPECT_EQ(redis_.command_stat("script|load", "calls"), 1u);
  EXPECT_EQ(redis_.command_stat("evalsha", "calls"), 3u);
  EXPECT_EQ(redis_.command_stat("eval", "calls"), 0u);
}

// Redis's script cache emptied (SCRIPT FLUSH) under a connection: the claim
// that finds the script gone is sent whole (EVAL), which loads it again,
// and the next one names it again. Nothing fails.
TEST_F(HomeStoreTest, AScriptCacheEmptiedIsFilledAgain) {
  HomeStore store(options_for(redis_.port()));
  EXPECT_EQ(claim(store, "conv:1", "", "0 http://a:1"), "taken");
  ASSERT_EQ(redis_.command({"SCRIPT", "FLUSH"}), "+OK");
  EXPECT_EQ(claim(store, "conv:2", "", "0 http://a:1"), "taken");
  EXPECT_EQ(claim(store, "conv:2", "", "1 http://b:1"), "held:0 http://a:1");
  EXPECT_EQ(lookup(store, "conv:2"), "found:0 http://a:1");
  const HomeStoreStats stats = store.stats();
  EXPECT_EQ(stats.writes_failed, 0u);
  EXPECT_EQ(stats.claims_taken, 2u);
  EXPECT_EQ(stats.claims_held, 1u);
  // conv:1's EVAL (the first pipeline's claim) and conv:2's first, after
  // its EVALSHA found no script; conv:2's second by its SHA1 again.
  EXPECT_EQ(redis_.command_stat("eval", "calls"), 2u);
  EXPECT_EQ(redis_.command_stat("evalsha", "calls"), 2u);
}

// A Redis user allowed only one of the two ways to run a script gets full
// claims through it, with no warning; the refused command is tried once per
// connection.
TEST_F(HomeStoreTest, AUserWithOneWayToRunScriptsClaimsThroughIt) {
  for (const std::string refused : {"eval", "evalsha", "script|load"}) {
    SCOPED_TRACE(refused);
    const HomeStoreOptions options = options_for_user_without(redis_, {refused});
    ASSERT_EQ(redis_.command({"CONFIG", "RESETSTAT"}), "+OK");
    CapturedLog log;
    {
      HomeStore store(options);
      const std::string key = "conv:" + refused;
      // Three pipelines: the first, with the script's loading (refused or
      // not); two after it.
      EXPECT_EQ(claim(store, key, "", "0 http://a:1"), "taken");
      EXPECT_EQ(claim(store, key, "", "1 http://b:1"), "held:0 http://a:1");
      EXPECT_EQ(claim(store, key, "", "0 http://a:1"), "taken");
      const HomeStoreStats stats = store.stats();
      EXPECT_EQ(stats.claims_unchecked, 0u);
      EXPECT_EQ(stats.writes_failed, 0u);
    }
    EXPECT_EQ(log.count("warn"), 0u);
    EXPECT_EQ(redis_.command_stat(refused, "rejected_calls"), 1u);
  }
}

// An ACL that lets the user run every command but not on the warden's keys
// (a key pattern that key_prefix does not match): the claims are refused as
// they come, not taken for a refusal of scripts (no plain SET is tried), and
// the warning names the keys, not the script.
TEST_F(HomeStoreTest, AnAclThatRefusesTheKeysIsNotTakenForARefusalOfScripts) {
  ASSERT_EQ(
      redis_.command({"ACL", "SETUSER", "elsewhere", "reset", "on", ">pw", "~other:*", "+@all"}),
      "+OK");
  HomeStoreOptions options = options_for(redis_.port(), /*retry_after=*/60s);
  options.address.username = "elsewhere";
  options.address.password = "pw";
  CapturedLog log;
  {
    HomeStore store(options);
    EXPECT_EQ(claim(store, "conv:1", "", "0 http://a:1"), "refused");
    EXPECT_EQ(claim(store, "conv:2", "", "0 http://a:1"), "refused");
    const HomeStoreStats stats = store.stats();
    EXPECT_EQ(stats.claims_unchecked, 0u);
    EXPECT_EQ(stats.writes_failed, 2u);
    EXPECT_TRUE(stats.connected);
  }
  EXPECT_EQ(log.count("refuses the claim's script"), 0u) << ::testing::PrintToString(log.lines());
  EXPECT_EQ(log.count("must allow the keys under shared_homes.key_prefix"), 1u)
      << ::testing::PrintToString(log.lines());
  EXPECT_EQ(redis_.command({"EXISTS", "conv:1"}), ":0");
}

}  // namespace
}  // namespace lmwarden::homes
