// The router and stored Responses responses: a request chained to one
// (previous_response_id) goes where the response is stored, since vLLM keeps
// it in the memory of the server that made it and no other server has it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/hash.h"
#include "core/router.h"
#include "core_router_test_util.h"

namespace lmwarden::core {
namespace {

using std::chrono::minutes;

// A request chained to the stored response `id`, with no id of its own
// (what an OpenAI SDK client sends with store on), or with a session id.
Identity chained(const std::string& id) {
  return {.previous_response = stable_hash(id)};
}
Identity chained_in(const std::string& session, const std::string& id) {
  return {.kind = IdentityKind::kSession,
          .session_hash = stable_hash(session),
          .previous_response = stable_hash(id)};
}

const TimePoint t0{};

// Routes `identity`, and, when the reply stores `stored`, remembers where.
RouteDecision serve(Router& router, const Identity& identity, const std::string& stored,
                    TimePoint now = t0, RankPinning pinning = RankPinning::kHonoured) {
  const RouteDecision d = router.route(identity, now, {}, pinning);
  EXPECT_TRUE(d.ok());
  router.remember_response(stable_hash(stored), d, now);
  router.finish(d, now);
  return d;
}

TEST(RouterResponses, AChainFollowsItsStoredResponsesFromServerToServer) {
  Router router = make_router(servers(3));
  // Anonymous first turns spread over the servers; each chain then keeps to
  // the server of its first turn, turn after turn, whatever the others do.
  const RouteDecision a1 = router.route({}, t0), b1 = router.route({}, t0);
  EXPECT_NE(a1.replica, b1.replica);
  router.remember_response(stable_hash("resp_a1"), a1, t0);
  router.remember_response(stable_hash("resp_b1"), b1, t0);
  router.finish(a1, t0);
  router.finish(b1, t0);
  for (int turn = 2; turn <= 6; ++turn) {
    const std::string n = std::to_string(turn), before = std::to_string(turn - 1);
    const RouteDecision da = serve(router, chained("resp_a" + before), "resp_a" + n);
    const RouteDecision db = serve(router, chained("resp_b" + before), "resp_b" + n);
    EXPECT_EQ(da.replica, a1.replica);
    EXPECT_EQ(db.replica, b1.replica);
    EXPECT_EQ(da.kind, RouteKind::kSticky);
    EXPECT_TRUE(da.bound);
    serve(router, {}, "resp_other" + std::to_string(turn));  // another one-off request
  }
  const RouterView v = router.view();
  EXPECT_EQ(v.stored_responses, 2u * 6 + 5);
  // Not conversations: they weigh on no replica's load.
  EXPECT_EQ(v.conversations, 0u);
  for (const ReplicaView& r : v.replicas) EXPECT_EQ(r.live_conversations, 0);
}

TEST(RouterResponses, AChainedRequestIsNeverSpilled) {
  Router router = make_router(servers(2, 1, /*spill=*/1));
  const RouteDecision first = serve(router, {}, "resp_1");
  // Two requests in flight where the response is, none on the other server:
  // a conversation's turn would spill.
  const Identity there{.kind = IdentityKind::kPinned, .pinned_rank = first.replica};
  const RouteDecision busy1 = router.route(there, t0), busy2 = router.route(there, t0);
  const RouteDecision next = router.route(chained("resp_1"), t0);
  EXPECT_EQ(next.replica, first.replica);
  EXPECT_EQ(next.kind, RouteKind::kSticky);
  EXPECT_TRUE(next.bound);
  for (const auto& d : {busy1, busy2, next}) router.finish(d, t0);
}

TEST(RouterResponses, AnUnknownOrUnreachableStoreIsPlacedAsAnyRequest) {
  Router router = make_router(servers(2));
  const RouteDecision unknown = router.route(chained("resp_never_seen"), t0);
  EXPECT_EQ(unknown.kind, RouteKind::kAnonymous);
  EXPECT_FALSE(unknown.bound);
  router.finish(unknown, t0);

  const RouteDecision first = serve(router, {}, "resp_1");
  router.set_healthy(first.replica, false);
  const RouteDecision moved = router.route(chained("resp_1"), t0);
  EXPECT_EQ(moved.replica, 1 - first.replica);
  EXPECT_FALSE(moved.bound);
  router.finish(moved, t0);
  router.set_healthy(first.replica, true);
  // Back in service: the response is there again.
  const RouteDecision back = router.route(chained("resp_1"), t0);
  EXPECT_EQ(back.replica, first.replica);
  router.finish(back, t0);
  // A retry after the stored one failed is placed afresh.
  const int tried[] = {first.replica};
  const RouteDecision retry = router.route(chained("resp_1"), t0, tried);
  EXPECT_NE(retry.replica, first.replica);
  EXPECT_FALSE(retry.bound);
  router.finish(retry, t0);
}

TEST(RouterResponses, StoredResponsesAreForgottenAfterTheIdleTtl) {
  config::ModelConfig m = servers(2);
  m.session_ttl = minutes(30);
  Router router = make_router(m);
  serve(router, {}, "resp_1");
  // A chain whose turns keep coming stays known: each turn is remembered anew.
  EXPECT_TRUE(serve(router, chained("resp_1"), "resp_2", t0 + minutes(20)).bound);
  EXPECT_TRUE(serve(router, chained("resp_2"), "resp_3", t0 + minutes(45)).bound);
  EXPECT_EQ(router.stored_responses(), 3u);
  router.expire(t0 + minutes(100));
  EXPECT_EQ(router.stored_responses(), 0u);
  const RouteDecision late = router.route(chained("resp_3"), t0 + minutes(100));
  EXPECT_FALSE(late.bound);
  router.finish(late, t0 + minutes(100));
}

// A client that sends a session id too: the conversation's home follows its
// latest turn, which ran where its response is stored.
TEST(RouterResponses, AConversationsHomeMovesWhereItsChainIs) {
  Router router = make_router(servers(2));
  const Identity conversation{.kind = IdentityKind::kSession, .session_hash = stable_hash("s")};
  const RouteDecision opened = serve(router, conversation, "resp_unused");
  // Its response stored on the other server (a client that pinned the turn).
  const int other = 1 - opened.replica;
  serve(router, {.kind = IdentityKind::kPinned, .pinned_rank = other}, "resp_1");
  const RouteDecision chained_turn = serve(router, chained_in("s", "resp_1"), "resp_2");
  EXPECT_EQ(chained_turn.replica, other);
  EXPECT_EQ(chained_turn.home, other);
  EXPECT_TRUE(chained_turn.bound);
  // A later turn of the conversation, with no stored response to continue.
  const RouteDecision plain = router.route(conversation, t0);
  EXPECT_EQ(plain.kind, RouteKind::kSticky);
  EXPECT_EQ(plain.replica, other);
  EXPECT_FALSE(plain.bound);
  router.finish(plain, t0);
}

// Through a multi-rank server on a route whose rank vLLM does not read, the
// server holds the response: the chain keeps to it, without a rank.
TEST(RouterResponses, OnARouteWithoutRanksTheChainKeepsToTheServer) {
  Router router = make_router(servers(2, /*ranks=*/2));
  constexpr auto kIgnored = RankPinning::kIgnored;
  const RouteDecision first = serve(router, {}, "resp_1", t0, kIgnored);
  ASSERT_EQ(first.replica, -1);
  for (int turn = 2; turn <= 4; ++turn) {
    serve(router, {}, "resp_x" + std::to_string(turn), t0, kIgnored);  // others, anywhere
    const RouteDecision next = serve(router, chained("resp_" + std::to_string(turn - 1)),
                                     "resp_" + std::to_string(turn), t0, kIgnored);
    EXPECT_EQ(next.backend, first.backend);
    EXPECT_EQ(next.replica, -1);
    EXPECT_EQ(next.rank, -1);
    EXPECT_TRUE(next.bound);
  }
  EXPECT_EQ(router.view().unassigned.count(RouteKind::kSticky), 3u);
}

// One model's chat turns pin a rank and its Responses turns do not (Claude
// Code and Codex on one multi-rank server): a pinned home's spill check counts
// its share of the server's rank-free requests, as its load score does.
TEST(RouterResponses, APinnedHomeCountsItsShareOfTheRankFreeRequests) {
  Router router = make_router(servers(1, /*ranks=*/2, /*spill=*/2));
  constexpr auto kIgnored = RankPinning::kIgnored;
  const RouteDecision chat = router.route(session("chat"), t0);
  ASSERT_TRUE(chat.ok());
  const int home = chat.replica;
  ASSERT_GE(home, 0);
  std::vector<RouteDecision> open{chat};
  open.push_back(router.route(session("codex"), t0, {}, kIgnored));
  ASSERT_EQ(open.back().replica, -1);
  // One in flight at home and half of one rank-free: 1.5, under 2.
  const RouteDecision under = router.route(session("chat"), t0);
  EXPECT_EQ(under.kind, RouteKind::kSticky);
  EXPECT_EQ(under.replica, home);
  router.finish(under, t0);
  open.push_back(router.route(session("codex"), t0, {}, kIgnored));
  ASSERT_EQ(open.back().replica, -1);
  // One at home and two rank-free on its server: 2 each for home's rank, 1
  // for the other.
  const RouteDecision full = router.route(session("chat"), t0);
  EXPECT_EQ(full.kind, RouteKind::kSpilled);
  EXPECT_EQ(full.replica, 1 - home);
  EXPECT_EQ(full.home, home) << "a spill does not move the home";
  router.finish(full, t0);
  for (const RouteDecision& d : open) router.finish(d, t0);
}

// With affinity off the router remembers nothing to place by, and stored
// responses are no exception; switched on, it follows the chains made since.
TEST(RouterResponses, AffinityOffFollowsNoChain) {
  config::ModelConfig m = servers(2);
  m.affinity = false;
  Router router = make_router(m);
  serve(router, {}, "resp_1");
  EXPECT_EQ(router.stored_responses(), 0u);
  const RouteDecision next = router.route(chained("resp_1"), t0);
  EXPECT_EQ(next.kind, RouteKind::kBalanced);
  EXPECT_FALSE(next.bound);
  router.finish(next, t0);
  router.set_affinity(true);
  serve(router, {}, "resp_2");
  EXPECT_TRUE(router.route(chained("resp_2"), t0).bound);
}

}  // namespace
}  // namespace lmwarden::core
