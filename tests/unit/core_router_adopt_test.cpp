// The router taking homes another warden chose (proxy/shared_homes.h): an
// adopted conversation or stored response is routed as if this router had
// placed it, and adoption never overrides what the router knows itself.
#include <gtest/gtest.h>

#include <string>

#include "common/hash.h"
#include "core/router.h"
#include "core_router_test_util.h"

namespace lmwarden::core {
namespace {

const TimePoint t0{};

TEST(RouterAdopt, AnAdoptedHomeIsStickyFromTheFirstRequest) {
  Router router = make_router(servers(4));
  const std::uint64_t key = stable_hash("conv-a");
  EXPECT_FALSE(router.knows_conversation(key, t0));
  // The least-loaded replica would be 0 (first tie-breaker); another warden
  // put the conversation on 2.
  ASSERT_TRUE(router.adopt_home(key, 2, t0));
  EXPECT_TRUE(router.knows_conversation(key, t0));
  const RouteDecision d = router.route(session("conv-a"), t0);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.replica, 2);
  EXPECT_EQ(d.home, 2);
  EXPECT_EQ(d.kind, RouteKind::kSticky);
  router.finish(d, t0);
  EXPECT_EQ(router.view().replicas[2].live_conversations, 1);
}

TEST(RouterAdopt, WhatTheRouterKnowsWins) {
  Router router = make_router(servers(4));
  const RouteDecision first = router.route(session("conv-b"), t0);
  router.finish(first, t0);
  const std::uint64_t key = stable_hash("conv-b");
  const int elsewhere = (first.replica + 1) % 4;
  EXPECT_FALSE(router.adopt_home(key, elsewhere, t0));
  const RouteDecision next = router.route(session("conv-b"), t0);
  EXPECT_EQ(next.replica, first.replica);
  router.finish(next, t0);
}

TEST(RouterAdopt, NothingIsAdoptedOnAReplicaThatDoesNotExistOrWithAffinityOff) {
  Router router = make_router(servers(2));
  const std::uint64_t key = stable_hash("conv-c");
  EXPECT_FALSE(router.adopt_home(key, 2, t0));
  EXPECT_FALSE(router.adopt_home(key, -1, t0));
  EXPECT_FALSE(router.adopt_response(key, 5, t0));
  router.set_affinity(false);
  EXPECT_FALSE(router.adopt_home(key, 1, t0));
  EXPECT_FALSE(router.adopt_response(key, 1, t0));
  router.set_affinity(true);
  EXPECT_FALSE(router.knows_conversation(key, t0));
  EXPECT_EQ(router.stored_responses(), 0u);
}

TEST(RouterAdopt, AnAdoptedHomeOnAnUnhealthyReplicaIsRehomed) {
  Router router = make_router(servers(3));
  const std::uint64_t key = stable_hash("conv-d");
  ASSERT_TRUE(router.adopt_home(key, 1, t0));
  router.set_healthy(1, false);
  const RouteDecision d = router.route(session("conv-d"), t0);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d.replica, 1);
  EXPECT_EQ(d.kind, RouteKind::kRehomed);
  EXPECT_EQ(d.home, d.replica);
  router.finish(d, t0);
}

TEST(RouterAdopt, AnAdoptedStoredResponseBindsItsChainedRequest) {
  Router router = make_router(servers(3));
  ASSERT_TRUE(router.adopt_response(stable_hash("resp_1"), 2, t0));
  EXPECT_TRUE(router.holds_response(stable_hash("resp_1"), t0));
  EXPECT_FALSE(router.adopt_response(stable_hash("resp_1"), 0, t0));  // known now
  const RouteDecision d = router.route({.previous_response = stable_hash("resp_1")}, t0);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.replica, 2);
  EXPECT_TRUE(d.bound);
  router.finish(d, t0);
}

TEST(RouterAdopt, ReplicasAreFoundByServerAndRank) {
  // Two servers of two ranks, then one of three: replicas 0-1, 2-3, 4-6.
  config::ModelConfig m = servers(2, 2);
  m.backends.push_back(
      {.url = "http://127.0.0.1:9100", .host = "127.0.0.1", .port = 9100, .data_parallel_size = 3});
  Router router = make_router(m);
  EXPECT_EQ(router.replica_at(0, 0), 0);
  EXPECT_EQ(router.replica_at(1, 1), 3);
  EXPECT_EQ(router.replica_at(2, 2), 6);
  EXPECT_EQ(router.replica_at(1, 2), -1);  // no third rank there
  EXPECT_EQ(router.replica_at(3, 0), -1);
  EXPECT_EQ(router.replica_at(-1, 0), -1);
  for (int i = 0; i < router.replica_count(); ++i)
    EXPECT_EQ(router.replica_at(router.replica_backend(i), router.replica_rank(i)), i);
}

TEST(RouterAdopt, RememberingAStoredResponseSaysWhere) {
  Router router = make_router(servers(2));
  const RouteDecision d = router.route(session("conv-e"), t0);
  EXPECT_EQ(router.remember_response(stable_hash("resp_e"), d, t0), d.replica);
  EXPECT_EQ(router.remember_response(0, d, t0), -1);
  router.finish(d, t0);
}

// A decision says when it chose a home by load, and which one it left: what
// shared homes claim against other wardens' choices.
TEST(RouterSettle, ADecisionSaysWhenItChoseTheHome) {
  Router router = make_router(servers(3));
  const RouteDecision first = router.route(session("conv-f"), t0);
  EXPECT_TRUE(first.chose_home);
  EXPECT_EQ(first.former_home, -1);
  router.finish(first, t0);
  const RouteDecision again = router.route(session("conv-f"), t0);
  EXPECT_EQ(again.kind, RouteKind::kSticky);
  EXPECT_FALSE(again.chose_home);
  router.finish(again, t0);
  // A retry away from home keeps the home: nothing chosen.
  const int exclude[] = {first.replica};
  const RouteDecision retry = router.route(session("conv-f"), t0, exclude);
  EXPECT_EQ(retry.kind, RouteKind::kRetried);
  EXPECT_FALSE(retry.chose_home);
  router.finish(retry, t0);
  router.set_healthy(first.replica, false);
  const RouteDecision moved = router.route(session("conv-f"), t0);
  EXPECT_EQ(moved.kind, RouteKind::kRehomed);
  EXPECT_TRUE(moved.chose_home);
  EXPECT_EQ(moved.former_home, first.replica);
  router.finish(moved, t0);
  EXPECT_FALSE(router.route({.kind = IdentityKind::kAnonymous}, t0).chose_home);
}

TEST(RouterSettle, AConversationMovesToTheHomeAnotherWardenChose) {
  Router router = make_router(servers(3));
  const std::uint64_t key = stable_hash("conv-g");
  const RouteDecision d = router.route(session("conv-g"), t0);
  ASSERT_EQ(d.replica, 0);
  // Settled while its first request is still in flight, whose end leaves it.
  ASSERT_EQ(router.settle_home(key, 0, 2, t0), Router::Settled::kMoved);
  // A second answer for a write sent before the move finds it there.
  EXPECT_EQ(router.settle_home(key, 0, 2, t0), Router::Settled::kAlreadyThere);
  router.finish(d, t0);
  const auto view = router.view();
  EXPECT_EQ(view.replicas[0].live_conversations, 0);
  EXPECT_EQ(view.replicas[2].live_conversations, 1);
  const RouteDecision next = router.route(session("conv-g"), t0);
  EXPECT_EQ(next.replica, 2);
  EXPECT_EQ(next.kind, RouteKind::kSticky);
  router.finish(next, t0);
}

TEST(RouterSettle, NothingMovesUnlessTheHomeIsStillTheOneChosen) {
  using enum Router::Settled;
  Router router = make_router(servers(3));
  const std::uint64_t key = stable_hash("conv-h");
  EXPECT_EQ(router.settle_home(key, 0, 1, t0), kKept);  // unknown
  EXPECT_FALSE(router.knows_conversation(key, t0));
  router.finish(router.route(session("conv-h"), t0), t0);  // home 0
  EXPECT_EQ(router.settle_home(key, 1, 2, t0), kKept);     // it is not on 1
  EXPECT_EQ(router.settle_home(key, 0, 0, t0), kAlreadyThere);
  EXPECT_EQ(router.settle_home(key, 0, 3, t0), kKept);  // no replica 3
  EXPECT_EQ(router.settle_home(key, 0, -1, t0), kKept);
  router.set_affinity(false);
  EXPECT_EQ(router.settle_home(key, 0, 1, t0), kKept);
  router.set_affinity(true);
  const RouteDecision d = router.route(session("conv-h"), t0);
  EXPECT_EQ(d.replica, 0);
  router.finish(d, t0);
}

// Another warden's home that this router sees failing (it moved the
// conversation there while this one's probes say the replica is down, or its
// 5xx replies ejected it here) is not taken up: the conversation stays.
TEST(RouterSettle, AHomeThatIsUnhealthyHereIsNotTakenUp) {
  Router router = make_router(servers(3));
  const std::uint64_t key = stable_hash("conv-i");
  router.finish(router.route(session("conv-i"), t0), t0);  // home 0
  router.set_healthy(2, false);
  EXPECT_EQ(router.settle_home(key, 0, 2, t0), Router::Settled::kKept);
  const RouteDecision d = router.route(session("conv-i"), t0);
  EXPECT_EQ(d.replica, 0);
  EXPECT_EQ(d.kind, RouteKind::kSticky);
  router.finish(d, t0);
  router.set_healthy(2, true);
  EXPECT_EQ(router.settle_home(key, 0, 2, t0), Router::Settled::kMoved);
}

// A conversation this router knows follows the home another warden keeps
// for it (found in Redis after this warden's own claims had failed).
TEST(RouterSettle, AKnownConversationFollowsAnotherWardensHome) {
  using enum Router::Settled;
  Router router = make_router(servers(3));
  const std::uint64_t key = stable_hash("conv-j");
  EXPECT_EQ(router.follow_home(key, 1, t0), kKept);  // not known here
  EXPECT_FALSE(router.knows_conversation(key, t0));
  router.finish(router.route(session("conv-j"), t0), t0);  // home 0
  router.set_healthy(2, false);
  EXPECT_EQ(router.follow_home(key, 2, t0), kKept);
  EXPECT_EQ(router.follow_home(key, 5, t0), kKept);
  EXPECT_EQ(router.follow_home(key, 1, t0), kMoved);
  EXPECT_EQ(router.follow_home(key, 1, t0), kAlreadyThere);
  const RouteDecision d = router.route(session("conv-j"), t0);
  EXPECT_EQ(d.replica, 1);
  EXPECT_EQ(d.kind, RouteKind::kSticky);
  router.finish(d, t0);
  EXPECT_EQ(router.view().replicas[1].live_conversations, 1);
}

}  // namespace
}  // namespace lmwarden::core
