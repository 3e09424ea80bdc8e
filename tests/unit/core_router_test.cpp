#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/hash.h"
#include "core/router.h"
#include "core_router_test_util.h"

namespace lmwarden::core {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

// One server of `ranks` ranks; `n` single-rank servers.
config::ModelConfig dp_model(int ranks, std::optional<int> spill = std::nullopt) {
  return servers(1, ranks, spill);
}
config::ModelConfig separate_servers(int n) {
  return servers(n);
}

Identity anonymous() { return {}; }
Identity pinned(int rank) { return {.kind = IdentityKind::kPinned, .pinned_rank = rank}; }

const TimePoint t0{};

TEST(Router, NewConversationsSpreadOverIdleReplicas) {
  Router router = make_router(dp_model(4));
  std::map<int, int> homes;
  for (int i = 0; i < 8; ++i) {
    auto d = router.route(session("c" + std::to_string(i)), t0);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.kind, RouteKind::kNew);
    ++homes[d.replica];
    router.finish(d, t0);  // finished at once: only live conversations differ
  }
  ASSERT_EQ(homes.size(), 4u);
  for (auto [replica, n] : homes) EXPECT_EQ(n, 2) << "replica " << replica;
}

// A replica back in service (or a server added) holds no conversations.
// Those the others hold but that have been idle past the active window are
// no next turn about to arrive: new conversations spread by the requests in
// flight, rather than all going to the empty replica until its requests in
// flight make up a quarter of the others' conversations.
TEST(Router, ConversationsIdlePastTheActiveWindowDoNotPushNewOnesOntoAnEmptyReplica) {
  config::ModelConfig model = dp_model(3);
  model.active_window = std::chrono::minutes(5);
  Router router = make_router(model);
  router.set_healthy(2, false);
  for (int i = 0; i < 40; ++i)
    router.finish(router.route(session("old" + std::to_string(i)), t0), t0);
  ASSERT_EQ(router.view().replicas[0].live_conversations, 20);
  router.set_healthy(2, true);
  const TimePoint later = t0 + std::chrono::minutes(10);
  std::map<int, int> homes;
  for (int i = 0; i < 6; ++i)
    ++homes[router.route(session("new" + std::to_string(i)), later).replica];
  EXPECT_EQ(homes, (std::map<int, int>{{0, 2}, {1, 2}, {2, 2}}));
  // Used within the window, conversations weigh as before, a quarter each:
  // the empty replica takes new ones until 4 in flight + 4 × 0.25 = 20 × 0.25.
  Router busy = make_router(model);
  busy.set_healthy(2, false);
  for (int i = 0; i < 40; ++i) busy.finish(busy.route(session("old" + std::to_string(i)), t0), t0);
  busy.set_healthy(2, true);
  std::map<int, int> busy_homes;
  const TimePoint soon = t0 + std::chrono::minutes(4);
  for (int i = 0; i < 6; ++i)
    ++busy_homes[busy.route(session("new" + std::to_string(i)), soon).replica];
  EXPECT_EQ(busy_homes, (std::map<int, int>{{0, 1}, {1, 1}, {2, 4}}));
}

TEST(Router, KnownConversationStaysHomeAndSendsItsRank) {
  Router router = make_router(dp_model(4));
  router.route(anonymous(), t0);  // load replica 0 so the conversation lands elsewhere
  auto first = router.route(session("a"), t0);
  router.finish(first, t0);
  for (int turn = 0; turn < 5; ++turn) {
    auto d = router.route(session("a"), t0 + seconds(turn));
    EXPECT_EQ(d.kind, RouteKind::kSticky);
    EXPECT_EQ(d.replica, first.replica);
    EXPECT_EQ(d.rank, first.replica);  // one DP server: rank == replica
    router.finish(d, t0);
  }
  EXPECT_EQ(router.view().replicas[static_cast<std::size_t>(first.replica)].counters.count(RouteKind::kSticky), 5u);
}

TEST(Router, SpillsExactlyAtTheThresholdAndNeverBelow) {
  Router router = make_router(dp_model(2, /*spill=*/3));
  auto first = router.route(session("a"), t0);  // in flight 1 at home
  ASSERT_EQ(first.replica, 0);
  auto second = router.route(session("a"), t0);  // 1 < 3: sticky
  auto third = router.route(session("a"), t0);   // 2 < 3: sticky
  EXPECT_EQ(second.kind, RouteKind::kSticky);
  EXPECT_EQ(third.kind, RouteKind::kSticky);
  EXPECT_EQ(router.in_flight(0), 3);
  auto fourth = router.route(session("a"), t0);  // 3 >= 3: spill to the idle replica
  EXPECT_EQ(fourth.kind, RouteKind::kSpilled);
  EXPECT_EQ(fourth.replica, 1);
  // The home did not move: after the load drains the conversation is back home.
  for (auto d : {first, second, third, fourth}) router.finish(d, t0);
  auto later = router.route(session("a"), t0 + seconds(1));
  EXPECT_EQ(later.kind, RouteKind::kSticky);
  EXPECT_EQ(later.replica, 0);
  EXPECT_EQ(router.view().replicas[1].counters.count(RouteKind::kSpilled), 1u);
}

TEST(Router, ReconfigureChangesPolicyAndKeepsConversationsAndCounts) {
  Router router = make_router(dp_model(2, /*spill=*/8));
  auto first = router.route(session("a"), t0);
  auto second = router.route(session("a"), t0);
  ASSERT_EQ(second.kind, RouteKind::kSticky);

  auto reloaded = dp_model(2, /*spill=*/2);
  reloaded.session_ttl = minutes(1);
  router.reconfigure(reloaded);
  EXPECT_EQ(router.spill_threshold(), 2);
  EXPECT_EQ(router.conversations(), 1u);
  EXPECT_EQ(router.in_flight(0), 2) << "requests in flight still count after a reload";
  auto third = router.route(session("a"), t0);  // 2 >= the new threshold
  EXPECT_EQ(third.kind, RouteKind::kSpilled);
  for (auto d : {first, second, third}) router.finish(d, t0);
  EXPECT_EQ(router.view().in_flight, 0);
  EXPECT_EQ(router.view().replicas[0].counters.count(RouteKind::kSticky), 1u);
  // The new idle TTL applies to the conversations already known.
  EXPECT_EQ(router.route(session("a"), t0 + minutes(2)).kind, RouteKind::kNew);
}

TEST(Router, SpillStaysHomeWhenNoReplicaIsLessLoaded) {
  Router router = make_router(dp_model(2, /*spill=*/1));
  auto a = router.route(session("a"), t0);  // replica 0
  auto b = router.route(session("b"), t0);  // replica 1
  ASSERT_NE(a.replica, b.replica);
  // Both homes have one in flight and one conversation: equal load, so a's
  // next request finds no replica lower than home and stays.
  auto again = router.route(session("a"), t0);
  EXPECT_EQ(again.kind, RouteKind::kSticky);
  EXPECT_EQ(again.replica, a.replica);
}

TEST(Router, SpillGoesToTheLeastLoadedLowerReplica) {
  Router router = make_router(dp_model(3, /*spill=*/2));
  auto home = router.route(session("h"), t0);  // replica 0
  ASSERT_EQ(home.replica, 0);
  router.route(session("h"), t0);                // 2 in flight at home
  router.route(pinned(1), t0);                   // replica 1 has one in flight
  auto spilled = router.route(session("h"), t0);
  EXPECT_EQ(spilled.kind, RouteKind::kSpilled);
  EXPECT_EQ(spilled.replica, 2);  // idle beats the one with a request in flight
}

TEST(Router, RehomesWhenHomeIsUnhealthy) {
  Router router = make_router(dp_model(2));
  auto first = router.route(session("a"), t0);
  router.finish(first, t0);
  router.set_healthy(first.replica, false);
  auto d = router.route(session("a"), t0 + seconds(1));
  EXPECT_EQ(d.kind, RouteKind::kRehomed);
  EXPECT_NE(d.replica, first.replica);
  router.finish(d, t0);
  router.set_healthy(first.replica, true);
  auto after = router.route(session("a"), t0 + seconds(2));  // the new home sticks
  EXPECT_EQ(after.kind, RouteKind::kSticky);
  EXPECT_EQ(after.replica, d.replica);
}

TEST(Router, UnhealthyReplicasTakeNoNewConversations) {
  Router router = make_router(dp_model(3));
  router.set_healthy(0, false);
  router.set_healthy(2, false);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(router.route(session("n" + std::to_string(i)), t0).replica, 1);
}

TEST(Router, AnEjectedReplicaTakesNoNewWorkUntilItsTimeIsServed) {
  Router router = make_router(dp_model(3));
  auto home = router.route(session("a"), t0);
  router.finish(home, t0);
  const int bad = home.replica;
  EXPECT_TRUE(router.eject(bad, t0 + seconds(30)));
  EXPECT_FALSE(router.healthy(bad));
  EXPECT_TRUE(router.ejected(bad));
  EXPECT_TRUE(router.view().replicas[static_cast<std::size_t>(bad)].ejected);
  EXPECT_FALSE(router.eject(bad, t0 + seconds(60))) << "out already";
  // Probes that pass do not bring it back early; its conversations re-home.
  router.set_healthy(bad, true);
  EXPECT_FALSE(router.healthy(bad));
  auto moved = router.route(session("a"), t0 + seconds(1));
  EXPECT_EQ(moved.kind, RouteKind::kRehomed);
  EXPECT_NE(moved.replica, bad);
  router.finish(moved, t0);
  for (int i = 0; i < 6; ++i)
    EXPECT_NE(router.route(session("n" + std::to_string(i)), t0 + seconds(2)).replica, bad);
  // Its time served, it takes new work again.
  router.route(anonymous(), t0 + seconds(30));
  EXPECT_TRUE(router.healthy(bad));
  EXPECT_FALSE(router.ejected(bad));
  // Unless its probes failed meanwhile: then it stays out on their account.
  EXPECT_TRUE(router.eject(bad, t0 + seconds(61)));
  router.set_healthy(bad, false);
  router.route(anonymous(), t0 + seconds(62));
  EXPECT_FALSE(router.healthy(bad));
  EXPECT_FALSE(router.ejected(bad));
}

TEST(Router, TheLastReplicaTakingWorkIsNeverEjected) {
  Router router = make_router(dp_model(3));
  router.set_healthy(2, false);
  EXPECT_FALSE(router.eject(2, t0 + seconds(30))) << "takes no work now";
  EXPECT_TRUE(router.eject(0, t0 + seconds(30)));
  EXPECT_FALSE(router.eject(1, t0 + seconds(30))) << "its errors beat a 503 for everyone";
  EXPECT_TRUE(router.healthy(1));
  // Nor does an ejection outlast the others: when the last one taking work
  // fails its probes, the ejected one comes back at once.
  router.set_healthy(1, false);
  EXPECT_TRUE(router.healthy(0));
  EXPECT_FALSE(router.ejected(0));
  EXPECT_TRUE(router.route(session("x"), t0 + seconds(1)).ok());
}

TEST(Router, AnEjectionEndsOnTheClockWithoutARequest) {
  Router router = make_router(dp_model(2));
  EXPECT_TRUE(router.eject(0, t0 + seconds(30)));
  router.expire(t0 + seconds(29));
  EXPECT_TRUE(router.ejected(0));
  router.expire(t0 + seconds(30));
  EXPECT_FALSE(router.ejected(0));
  EXPECT_TRUE(router.healthy(0));
}

TEST(Router, AServersHealthIsEveryRankOfIt) {
  config::ModelConfig m = dp_model(2);
  m.backends.push_back(
      {.url = "http://127.0.0.1:8001", .host = "127.0.0.1", .port = 8001, .data_parallel_size = 1});
  Router router = make_router(m);
  router.set_backend_healthy(0, false);
  EXPECT_FALSE(router.healthy(0));
  EXPECT_FALSE(router.healthy(1));
  EXPECT_TRUE(router.healthy(2));
  EXPECT_FALSE(router.backend_healthy(0));
  EXPECT_TRUE(router.backend_healthy(1));
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(router.route(session("n" + std::to_string(i)), t0).replica, 2);
  router.set_healthy(1, true);  // one rank back is the server partly back
  EXPECT_TRUE(router.backend_healthy(0));
  router.set_backend_healthy(0, true);
  EXPECT_TRUE(router.healthy(0));
  EXPECT_TRUE(router.healthy(1));
}

TEST(Router, NoHealthyReplicaIsAnErrorNotACrash) {
  Router router = make_router(dp_model(2));
  router.set_healthy(0, false);
  router.set_healthy(1, false);
  EXPECT_EQ(router.route(session("a"), t0).status, RouteDecision::Status::kNoHealthyReplica);
  EXPECT_EQ(router.route(anonymous(), t0).status, RouteDecision::Status::kNoHealthyReplica);
  EXPECT_EQ(router.view().in_flight, 0);
}

TEST(Router, ClientPinnedGoesWhereAskedAndUnknownRankIsRefused) {
  Router router = make_router(dp_model(4));
  auto d = router.route(pinned(3), t0);
  EXPECT_EQ(d.kind, RouteKind::kPinned);
  EXPECT_EQ(d.replica, 3);
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(router.route(pinned(4), t0).status, RouteDecision::Status::kUnknownRank);
  EXPECT_EQ(router.view().replicas[3].counters.count(RouteKind::kPinned), 1u);
}

TEST(Router, AnonymousRequestsAreBalancedAndRememberedNowhere) {
  Router router = make_router(dp_model(2));
  auto a = router.route(anonymous(), t0);
  auto b = router.route(anonymous(), t0);
  EXPECT_EQ(a.kind, RouteKind::kAnonymous);
  EXPECT_NE(a.replica, b.replica);
  EXPECT_EQ(router.conversations(), 0u);
}

TEST(Router, ConversationsExpireAfterTheirTtl) {
  auto m = dp_model(2);
  m.session_ttl = minutes(30);
  Router router = make_router(m);
  auto first = router.route(session("a"), t0);
  router.finish(first, t0);
  EXPECT_EQ(router.route(session("a"), t0 + minutes(29)).kind, RouteKind::kSticky);
  EXPECT_EQ(router.route(session("a"), t0 + minutes(29) + minutes(31)).kind, RouteKind::kNew);
}

// The TTL is idle time: a conversation whose one request runs longer than
// the TTL is neither placed afresh while it runs nor forgotten when it ends.
TEST(Router, AConversationIsIdleOnlyOnceItsRequestEnds) {
  auto m = dp_model(2);
  m.session_ttl = minutes(30);
  Router router = make_router(m);
  const auto stream = router.route(session("a"), t0);
  router.expire(t0 + minutes(40));          // "a" was last routed 40 minutes ago
  router.finish(stream, t0 + minutes(45));  // its stream ends
  const auto next = router.route(session("a"), t0 + minutes(74));
  EXPECT_EQ(next.kind, RouteKind::kSticky);
  EXPECT_EQ(next.replica, stream.replica);
  router.finish(next, t0 + minutes(74));
  // A spilled request's end keeps its conversation's home, not where it ran.
  auto spill_model = dp_model(2, 1);
  spill_model.session_ttl = minutes(30);
  Router spilling = make_router(spill_model);
  const auto home = spilling.route(session("c"), t0);
  const auto spilled = spilling.route(session("c"), t0);
  ASSERT_EQ(spilled.kind, RouteKind::kSpilled);
  spilling.finish(home, t0);
  spilling.expire(t0 + minutes(31));
  spilling.finish(spilled, t0 + minutes(31));
  const auto back = spilling.route(session("c"), t0 + minutes(32));
  EXPECT_EQ(back.kind, RouteKind::kSticky);
  EXPECT_EQ(back.replica, home.replica);
}

TEST(Router, SessionTableIsBounded) {
  auto m = dp_model(2);
  m.max_conversations = 100;
  Router router = make_router(m);
  for (int i = 0; i < 1000; ++i) router.finish(router.route(session(std::to_string(i)), t0), t0);
  EXPECT_EQ(router.conversations(), 100u);
  auto v = router.view();
  EXPECT_EQ(v.replicas[0].live_conversations + v.replicas[1].live_conversations, 100);
}

TEST(Router, AffinityOffOnADpServerLeavesTheRankToVllm) {
  auto m = dp_model(4);
  m.affinity = false;
  Router router = make_router(m);
  auto d = router.route(session("a"), t0);
  EXPECT_EQ(d.kind, RouteKind::kBalanced);
  EXPECT_EQ(d.replica, -1);
  EXPECT_EQ(d.rank, -1);
  EXPECT_EQ(d.backend, 0);
  EXPECT_EQ(router.view().in_flight, 1);
  router.finish(d, t0);
  EXPECT_EQ(router.view().in_flight, 0);
  EXPECT_EQ(router.conversations(), 0u);  // nothing remembered while off
}

TEST(Router, RequestsTheServersBalancerPlacesAreCountedUnassigned) {
  auto m = dp_model(4);
  m.affinity = false;
  Router router = make_router(m);
  router.finish(router.route(session("a"), t0), t0);
  router.finish(router.route(anonymous(), t0), t0);
  const RouterView v = router.view();
  EXPECT_EQ(v.unassigned.count(RouteKind::kBalanced), 2u);
  for (const auto& r : v.replicas) EXPECT_EQ(r.counters.count(RouteKind::kBalanced), 0u);
}

// A retry is not a spill (its home was not full, it failed): it is counted
// as retried where it went, and the conversation keeps its home.
TEST(Router, ARetryIsCountedAsRetriedAndLeavesTheHome) {
  Router router = make_router(dp_model(3));
  const auto first = router.route(session("a"), t0);
  ASSERT_EQ(first.kind, RouteKind::kNew);
  router.finish(first, t0);
  const auto home = router.route(session("a"), t0);
  ASSERT_EQ(home.kind, RouteKind::kSticky);
  router.finish(home, t0);  // failed
  const int tried[] = {home.replica};
  const auto retry = router.route(session("a"), t0, tried);
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry.kind, RouteKind::kRetried);
  EXPECT_NE(retry.replica, home.replica);
  router.finish(retry, t0);
  const RouterView v = router.view();
  EXPECT_EQ(v.replicas[static_cast<std::size_t>(retry.replica)].counters.count(RouteKind::kRetried),
            1u);
  int spilled = 0;
  for (const auto& r : v.replicas)
    spilled += static_cast<int>(r.counters.count(RouteKind::kSpilled));
  EXPECT_EQ(spilled, 0);
  EXPECT_EQ(v.sticky_ratio, 1.0);  // the sticky attempt only: a retry moves nothing
  EXPECT_EQ(router.route(session("a"), t0).replica, home.replica);
}

// The first attempt of a new conversation failed (not a connect failure:
// its replica stays healthy): the retry's replica is the one that read the
// prefix, and the next turn goes there.
TEST(Router, ARetryOfTheRequestThatPlacedTheConversationMovesItsHome) {
  Router router = make_router(dp_model(3));
  const auto first = router.route(session("a"), t0);
  ASSERT_TRUE(first.chose_home);
  router.finish(first, t0);  // failed
  const int tried[] = {first.replica};
  const auto retry = router.route(session("a"), t0, tried, RankPinning::kHonoured,
                                  /*placed_by_earlier_attempt=*/true);
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry.kind, RouteKind::kRetried);
  EXPECT_NE(retry.replica, first.replica);
  EXPECT_EQ(retry.home, retry.replica);
  EXPECT_TRUE(retry.chose_home) << "other wardens are told of the move";
  EXPECT_EQ(retry.former_home, first.replica);
  router.finish(retry, t0);
  const auto next = router.route(session("a"), t0);
  EXPECT_EQ(next.kind, RouteKind::kSticky);
  EXPECT_EQ(next.replica, retry.replica);
}

TEST(Router, EveryKindOfRetryIsCountedAsRetried) {
  // A spilled request that failed where it spilled to can come home: retried, not sticky.
  Router router = make_router(dp_model(2, /*spill=*/1));
  const auto home = router.route(session("a"), t0);  // new, in flight at home
  const auto spill = router.route(session("a"), t0);
  ASSERT_EQ(spill.kind, RouteKind::kSpilled);
  router.finish(home, t0);
  router.finish(spill, t0);  // failed
  const int tried[] = {spill.replica};
  const auto back = router.route(session("a"), t0, tried);
  EXPECT_EQ(back.replica, home.replica);
  EXPECT_EQ(back.kind, RouteKind::kRetried);
  router.finish(back, t0);
  // Anonymous and balanced requests too.
  const auto anon = router.route(anonymous(), t0);
  router.finish(anon, t0);
  const int anon_tried[] = {anon.replica};
  EXPECT_EQ(router.route(anonymous(), t0, anon_tried).kind, RouteKind::kRetried);
  auto off = separate_servers(2);
  off.affinity = false;
  Router balanced = make_router(off);
  const auto b = balanced.route(anonymous(), t0);
  balanced.finish(b, t0);
  const int b_tried[] = {b.replica};
  EXPECT_EQ(balanced.route(anonymous(), t0, b_tried).kind, RouteKind::kRetried);
}

// A route whose rank header the server ignores (vLLM's /v1/responses): the
// conversation keeps to its home's server, sent without a rank and counted
// as the server's; a single-rank server is unchanged.
TEST(Router, ARouteThatIgnoresTheRankGoesToTheHomesServerWithoutOne) {
  config::ModelConfig m = dp_model(2);
  m.backends.push_back(
      {.url = "http://127.0.0.1:8001", .host = "127.0.0.1", .port = 8001, .data_parallel_size = 1});
  Router router = make_router(m);
  constexpr auto kIgnored = RankPinning::kIgnored;
  const auto first = router.route(session("a"), t0, {}, kIgnored);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first.kind, RouteKind::kNew);
  EXPECT_EQ(first.backend, 0);
  EXPECT_EQ(first.replica, -1);
  EXPECT_EQ(first.rank, -1);
  RouterView v = router.view();
  EXPECT_EQ(v.unassigned_in_flight, (std::vector<int>{1, 0}));
  EXPECT_EQ(v.unassigned.count(RouteKind::kNew), 1u);
  for (const ReplicaView& r : v.replicas) EXPECT_EQ(r.in_flight, 0);
  // Half a request in flight on each of the server's two ranks: the next
  // conversation goes to the single-rank server, and keeps its rank-free home.
  ASSERT_TRUE(first.home == 0 || first.home == 1);
  EXPECT_DOUBLE_EQ(v.replicas[static_cast<std::size_t>(1 - first.home)].score, 0.5);
  const auto second = router.route(session("b"), t0, {}, kIgnored);
  EXPECT_EQ(second.replica, 2);
  EXPECT_EQ(second.backend, 1);
  router.finish(second, t0);
  router.finish(first, t0);
  EXPECT_EQ(router.view().unassigned_in_flight, (std::vector<int>{0, 0}));
  // The next turn goes back to the same server; on a route that pins, to the home rank.
  const auto again = router.route(session("a"), t0, {}, kIgnored);
  EXPECT_EQ(again.kind, RouteKind::kSticky);
  EXPECT_EQ(again.backend, 0);
  EXPECT_EQ(again.replica, -1);
  router.finish(again, t0);
  const auto pinned_turn = router.route(session("a"), t0);
  EXPECT_EQ(pinned_turn.kind, RouteKind::kSticky);
  EXPECT_EQ(pinned_turn.replica, first.home);
  EXPECT_EQ(pinned_turn.rank, first.home);
}

// Home is a server there: such a conversation spills once its server has
// spill_threshold requests in flight per rank, and to another server.
TEST(Router, ARouteThatIgnoresTheRankSpillsFromAFullServerToAnother) {
  config::ModelConfig m = dp_model(2, /*spill=*/2);
  m.backends.push_back(
      {.url = "http://127.0.0.1:8001", .host = "127.0.0.1", .port = 8001, .data_parallel_size = 2});
  Router router = make_router(m);
  constexpr auto kIgnored = RankPinning::kIgnored;
  std::vector<RouteDecision> open;
  for (int i = 0; i < 4; ++i) open.push_back(router.route(session("a"), t0, {}, kIgnored));
  const int home_server = open[0].backend;
  for (const auto& d : open) {
    EXPECT_EQ(d.backend, home_server) << "2 per rank is not yet over the threshold of 2";
    EXPECT_NE(d.kind, RouteKind::kSpilled);
  }
  const auto fifth = router.route(session("a"), t0, {}, kIgnored);
  EXPECT_EQ(fifth.kind, RouteKind::kSpilled);
  EXPECT_NE(fifth.backend, home_server);
  EXPECT_EQ(fifth.replica, -1);
  EXPECT_EQ(router.view().unassigned.count(RouteKind::kSpilled), 1u);
  router.finish(fifth, t0);
  for (const auto& d : open) router.finish(d, t0);
  EXPECT_EQ(router.route(session("a"), t0, {}, kIgnored).backend, home_server)
      << "a spill does not move the home";
}

TEST(Router, AffinityOffOnSeparateServersPicksFewestInFlight) {
  auto m = separate_servers(3);
  m.affinity = false;
  Router router = make_router(m);
  auto a = router.route(session("a"), t0);
  auto b = router.route(session("a"), t0);
  auto c = router.route(session("a"), t0);
  EXPECT_EQ(a.replica, 0);
  EXPECT_EQ(b.replica, 1);
  EXPECT_EQ(c.replica, 2);
  EXPECT_EQ(a.rank, -1);  // single-rank servers get no rank header
  router.finish(b, t0);
  EXPECT_EQ(router.route(session("z"), t0).replica, 1);
}

// Servers equally loaded are taken in turn, as placements are: one request
// at a time would otherwise always go to the first.
TEST(Router, AffinityOffBreaksTiesBetweenServersInTurn) {
  auto m = separate_servers(4);
  m.affinity = false;
  Router router{m, std::make_unique<RotatingTieBreaker>()};
  int sent[4] = {};
  for (int i = 0; i < 8; ++i) {
    const auto d = router.route(session("a"), t0);
    ASSERT_TRUE(d.ok());
    ++sent[d.replica];
    router.finish(d, t0);
  }
  for (int n : sent) EXPECT_EQ(n, 2);
  // A busier server is never among the tied.
  const auto held = router.route(session("b"), t0);
  for (int i = 0; i < 6; ++i) {
    const auto d = router.route(session("a"), t0);
    EXPECT_NE(d.replica, held.replica);
    router.finish(d, t0);
  }
}

TEST(Router, SwitchingAffinityAtRunTimeTakesEffectNextRequest) {
  Router router = make_router(dp_model(2));
  router.finish(router.route(session("a"), t0), t0);
  router.set_affinity(false);
  EXPECT_EQ(router.route(session("a"), t0).kind, RouteKind::kBalanced);
  router.set_affinity(true);
  router.set_spill_threshold(1);
  EXPECT_EQ(router.view().spill_threshold, 1);
  EXPECT_FALSE(router.view().spill_threshold_auto);
}

TEST(Router, ReconfigureUndoesRunTimeChanges) {
  // docs/configuration.md: a reload restores the file's affinity and spill
  // threshold even where the file did not change them.
  const config::ModelConfig file = dp_model(2);  // affinity on, spill auto
  Router router = make_router(file);
  router.set_affinity(false);
  router.set_spill_threshold(3);
  router.reconfigure(file);
  EXPECT_TRUE(router.affinity());
  EXPECT_TRUE(router.view().spill_threshold_auto);
  EXPECT_EQ(router.spill_threshold(), config::kAutoSpillThreshold);
}

TEST(Router, HybridTopologyMapsReplicasToServerAndRank) {
  config::ModelConfig m;
  m.name = "m";
  m.backends.push_back({.url = "http://a:1", .host = "a", .port = 1, .data_parallel_size = 2});
  m.backends.push_back({.url = "http://b:1", .host = "b", .port = 1, .data_parallel_size = 2});
  Router router = make_router(m);
  auto d = router.route(pinned(3), t0);
  EXPECT_EQ(d.backend, 1);
  EXPECT_EQ(d.rank, 1);
  auto v = router.view();
  ASSERT_EQ(v.replicas.size(), 4u);
  EXPECT_EQ(v.replicas[2].backend, 1);
  EXPECT_EQ(v.replicas[2].rank, 0);
}

TEST(Router, KvUsageSteersNewConversationsAway) {
  Router router = make_router(dp_model(2));
  router.set_engine_stats(0, {.running = 3, .waiting = 0, .kv_used = 0.9});
  router.set_engine_stats(1, {.running = 0, .waiting = 0, .kv_used = 0.1});
  EXPECT_EQ(router.route(session("x"), t0).replica, 1);
}

TEST(Router, RotatingTieBreakSpreadsABurstOfAnonymousRequests) {
  Router router{dp_model(4)};  // default rotating tie-breaker
  std::map<int, int> seen;
  for (int i = 0; i < 4; ++i) {
    auto d = router.route(anonymous(), t0);
    ++seen[d.replica];
    router.finish(d, t0);
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(Router, InFlightReturnsToZeroAfterEveryFinish) {
  Router router = make_router(dp_model(4, 2));
  std::vector<RouteDecision> open;
  for (int i = 0; i < 50; ++i) open.push_back(router.route(session("s" + std::to_string(i % 7)), t0));
  for (auto& d : open) router.finish(d, t0);
  auto v = router.view();
  EXPECT_EQ(v.in_flight, 0);
  for (auto& r : v.replicas) EXPECT_EQ(r.in_flight, 0);
}

// Placement keeps the replicas' scores in an index updated on every change.
// Against the scores view() computes afresh, after a random mix of everything
// that moves them (requests starting and ending, conversations placed and
// forgotten by capacity and by age, scrapes, health flips), every new
// conversation must land on the lowest-indexed healthy replica of lowest score.
TEST(Router, NewConversationsAlwaysGoToTheLeastLoadedReplicaOfTheView) {
  config::ModelConfig m = separate_servers(3);
  m.backends[1].data_parallel_size = 4;
  m.max_conversations = 40;
  m.session_ttl = seconds(30);
  Router router = make_router(m);
  std::mt19937 rng{11};
  std::vector<RouteDecision> open;
  TimePoint now = t0;
  int checked = 0;
  for (int step = 0; step < 4000; ++step) {
    now += std::chrono::milliseconds(rng() % 200);
    const int replicas = router.replica_count();
    switch (rng() % 6) {
      case 0:
        if (!open.empty()) {
          const std::size_t i = rng() % open.size();
          router.finish(open[i], now);
          open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 1:
        router.set_healthy(static_cast<int>(rng() % replicas), rng() % 4 != 0);
        break;
      case 2:
        router.set_engine_stats(static_cast<int>(rng() % replicas),
                                {.running = 1, .waiting = 0, .kv_used = (rng() % 5) / 4.0});
        break;
      case 3: {  // a known conversation's next turn (may spill or rehome)
        const auto d = router.route(session("c" + std::to_string(rng() % 60)), now);
        if (d.ok()) open.push_back(d);
        break;
      }
      default: {  // a conversation never seen before
        router.expire(now);  // as route() itself does, so the view matches
        const RouterView v = router.view();
        double best = std::numeric_limits<double>::infinity();
        int expected = -1;
        for (const ReplicaView& r : v.replicas)
          if (r.healthy && r.score < best - 1e-6) best = r.score, expected = r.index;
        const auto d = router.route(session("new" + std::to_string(step)), now);
        if (expected < 0) {
          EXPECT_EQ(d.status, RouteDecision::Status::kNoHealthyReplica) << "step " << step;
          break;
        }
        ASSERT_TRUE(d.ok()) << "step " << step;
        EXPECT_EQ(d.kind, RouteKind::kNew);
        EXPECT_EQ(d.replica, expected) << "step " << step;
        open.push_back(d);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace lmwarden::core
