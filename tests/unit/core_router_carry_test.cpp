// A reload that changes a model's replicas: the new router takes the
// conversations and stored responses whose server and rank it still has
// (Router::homes_for, Router::take_homes), in their order of use, so that they keep the cache
// they built; those on a replica gone are placed again.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/hash.h"
#include "core/router.h"
#include "core_router_test_util.h"

namespace lmwarden::core {
namespace {

const TimePoint t0{};

// Places `id` (a new conversation) and ends its request; its home.
int place(Router& router, const std::string& id, TimePoint now = t0) {
  const RouteDecision d = router.route(session(id), now);
  EXPECT_TRUE(d.ok());
  router.finish(d, now);
  return d.home;
}

TEST(RouterCarry, ConversationsOnReplicasKeptStayThereAndTheOthersArePlacedAgain) {
  // Two servers of two ranks; the reload drops the first and adds a third:
  // the second's ranks (2 and 3 before) are 0 and 1 now.
  Router before = make_router(servers(2, 2));
  std::vector<int> homes;
  for (int i = 0; i < 8; ++i) homes.push_back(place(before, "conv-" + std::to_string(i)));
  config::ModelConfig next = servers(3, 2);
  next.backends.erase(next.backends.begin());
  Router after = make_router(next);
  const Router::Carried carried = after.take_homes(before.homes_for({-1, -1, 0, 1}), t0);

  int kept = 0;
  for (int i = 0; i < 8; ++i) {
    const RouteDecision d = after.route(session("conv-" + std::to_string(i)), t0);
    ASSERT_TRUE(d.ok());
    if (homes[static_cast<std::size_t>(i)] >= 2) {
      ++kept;
      EXPECT_EQ(d.kind, RouteKind::kSticky) << i;
      EXPECT_EQ(d.replica, homes[static_cast<std::size_t>(i)] - 2) << i;
    } else {
      EXPECT_EQ(d.kind, RouteKind::kNew) << i;
    }
    after.finish(d, t0);
  }
  ASSERT_GT(kept, 0);
  ASSERT_LT(kept, 8);  // the first placements spread over both servers
  EXPECT_EQ(carried.conversations, static_cast<std::size_t>(kept));
  EXPECT_EQ(carried.left, static_cast<std::size_t>(8 - kept));
}

TEST(RouterCarry, LiveCountsFollowTheConversationsTaken) {
  Router before = make_router(servers(2));
  for (int i = 0; i < 6; ++i) place(before, "conv-" + std::to_string(i));
  ASSERT_EQ(before.view().replicas[0].live_conversations, 3);
  ASSERT_EQ(before.view().replicas[1].live_conversations, 3);
  Router after = make_router(servers(3));  // one server more, the two kept in place
  after.take_homes(before.homes_for({0, 1}), t0);
  const RouterView v = after.view();
  EXPECT_EQ(v.replicas[0].live_conversations, 3);
  EXPECT_EQ(v.replicas[1].live_conversations, 3);
  EXPECT_EQ(v.replicas[2].live_conversations, 0);
  // So the next new conversation goes to the new server, the least loaded.
  EXPECT_EQ(place(after, "conv-new"), 2);
}

TEST(RouterCarry, IdleOnesAreLeftAndASmallerTableKeepsTheMostRecent) {
  config::ModelConfig m = servers(1);
  m.session_ttl = std::chrono::seconds(60);
  Router before = make_router(m);
  for (int i = 0; i < 5; ++i)
    place(before, "conv-" + std::to_string(i), t0 + std::chrono::seconds(i * 20));
  // At t0 + 90 s, conv-0 (t0) and conv-1 (t0 + 20 s) are idle past the TTL.
  const TimePoint now = t0 + std::chrono::seconds(90);
  m.max_conversations = 2;
  Router after = make_router(m);
  const Router::Carried carried = after.take_homes(before.homes_for({0}), now);
  EXPECT_EQ(carried.conversations, 2u);
  EXPECT_EQ(carried.over_capacity, 1u);  // conv-2: taken, then pushed out by conv-3 and 4
  EXPECT_EQ(after.conversations(), 2u);
  EXPECT_FALSE(after.knows_conversation(stable_hash("conv-2"), now));  // older than conv-3 and 4
  // So the two are conv-3 and conv-4, and they keep their last use (a lookup
  // would touch them): conv-3 (t0 + 60 s) expires before conv-4 (t0 + 80 s).
  EXPECT_FALSE(after.knows_conversation(stable_hash("conv-3"), t0 + std::chrono::seconds(125)));
  EXPECT_TRUE(after.knows_conversation(stable_hash("conv-4"), t0 + std::chrono::seconds(125)));
}

TEST(RouterCarry, StoredResponsesAreTakenToo) {
  Router before = make_router(servers(2));
  const RouteDecision a = before.route({}, t0), b = before.route({}, t0);
  ASSERT_NE(a.replica, b.replica);
  before.remember_response(stable_hash("resp_a"), a, t0);
  before.remember_response(stable_hash("resp_b"), b, t0);
  before.finish(a, t0);
  before.finish(b, t0);
  Router after = make_router(servers(1));  // the first server only
  const Router::Carried carried = after.take_homes(before.homes_for({0, -1}), t0);
  EXPECT_EQ(carried.responses, 1u);
  EXPECT_EQ(carried.responses_left, 1u);
  EXPECT_EQ(after.holds_response(stable_hash(a.replica == 0 ? "resp_a" : "resp_b"), t0), true);
  EXPECT_EQ(after.holds_response(stable_hash(a.replica == 0 ? "resp_b" : "resp_a"), t0), false);
}

TEST(RouterCarry, NothingIsTakenWithAffinityOff) {
  Router before = make_router(servers(2));
  place(before, "conv-a");
  config::ModelConfig off = servers(2);
  off.affinity = false;
  Router after = make_router(off);
  const Router::Carried carried = after.take_homes(before.homes_for({0, 1}), t0);
  EXPECT_EQ(carried.conversations, 0u);
  EXPECT_EQ(after.conversations(), 0u);
}

TEST(RouterCarryState, AServerDownOrEjectedStaysOutAndEngineFiguresAreKept) {
  // Three servers; the reload drops the first and adds a fourth: the second
  // and third are replicas 0 and 1 now.
  Router before = make_router(servers(3));
  before.set_backend_healthy(1, false);
  ASSERT_TRUE(before.eject(2, t0 + std::chrono::seconds(30)));
  EngineStats busy;
  busy.running = 7;
  busy.waiting = 2;
  busy.kv_used = 0.5;
  before.set_engine_stats(2, busy);
  config::ModelConfig next = servers(4);
  next.backends.erase(next.backends.begin());
  Router after = make_router(next);
  after.carry_state(before, {-1, 0, 1}, false);

  const RouterView v = after.view();
  EXPECT_FALSE(v.replicas[0].healthy) << "down before the reload";
  EXPECT_FALSE(after.backend_healthy(0));
  EXPECT_FALSE(v.replicas[1].healthy);
  EXPECT_TRUE(v.replicas[1].ejected);
  EXPECT_EQ(v.replicas[1].engine.running, 7);
  EXPECT_EQ(v.replicas[1].engine.waiting, 2);
  EXPECT_TRUE(v.replicas[2].healthy) << "new: healthy until its probes say otherwise";
  // The ejection still ends when it was due.
  after.expire(t0 + std::chrono::seconds(31));
  EXPECT_TRUE(after.view().replicas[1].healthy);
  EXPECT_FALSE(after.view().replicas[0].healthy);
}

// An ejection never takes a model's last replica that takes work; a reload
// that drops the others would otherwise carry it into that state.
TEST(RouterCarryState, AnEjectionLeftAloneByTheReloadEnds) {
  Router before = make_router(servers(2));
  ASSERT_TRUE(before.eject(0, t0 + std::chrono::seconds(30)));
  Router after = make_router(servers(1));  // the first server only
  after.carry_state(before, {0, -1}, false);
  EXPECT_FALSE(after.ejected(0));
  EXPECT_TRUE(after.view().replicas[0].healthy);
  EXPECT_TRUE(after.route({}, t0).ok());

  // Kept with another that takes work, it stays ejected.
  Router three = make_router(servers(3));
  three.carry_state(before, {0, 1}, false);
  EXPECT_TRUE(three.ejected(0));
}

TEST(RouterCarryState, CountersContinueOnlyUnderTheSameIndex) {
  Router before = make_router(servers(2));
  for (int i = 0; i < 4; ++i) place(before, "conv-" + std::to_string(i));
  const RouterView was = before.view();
  ASSERT_EQ(was.replicas[0].counters.count(RouteKind::kNew), 2u);
  ASSERT_EQ(was.replicas[1].counters.count(RouteKind::kNew), 2u);

  // A server added at the end: both keep their index and their counters.
  Router grown = make_router(servers(3));
  grown.carry_state(before, {0, 1}, true);
  EXPECT_EQ(grown.view().replicas[0].counters.count(RouteKind::kNew), 2u);
  EXPECT_EQ(grown.view().replicas[1].counters.count(RouteKind::kNew), 2u);
  EXPECT_EQ(grown.view().replicas[2].counters.count(RouteKind::kNew), 0u);

  // Without `counters`, none continue, though health would.
  Router fresh = make_router(servers(3));
  fresh.carry_state(before, {0, 1}, false);
  EXPECT_EQ(fresh.view().replicas[0].counters.count(RouteKind::kNew), 0u);

  // A replica whose index moved starts afresh even with `counters`.
  Router swapped = make_router(servers(2));
  swapped.carry_state(before, {1, 0}, true);
  EXPECT_EQ(swapped.view().replicas[0].counters.count(RouteKind::kNew), 0u);
  EXPECT_EQ(swapped.view().replicas[1].counters.count(RouteKind::kNew), 0u);
}

// Requests still running when the reload came are counted by the new
// router where they run (carry_state), and ended there (drop_in_flight): its
// spills see them.
TEST(RouterCarryState, RequestsInFlightAreCountedWhereTheyRun) {
  // One server of two ranks, spill threshold 2; the reload adds a second.
  Router before = make_router(servers(1, 2, /*spill=*/2));
  const RouteDecision first = before.route(session("c"), t0);
  const RouteDecision second = before.route(session("c"), t0);
  ASSERT_EQ(second.kind, RouteKind::kSticky);
  const RouteDecision unranked = before.route(session("u"), t0, {}, RankPinning::kIgnored);
  ASSERT_EQ(unranked.replica, -1);
  Router after = make_router(servers(2, 2, /*spill=*/2));
  after.take_homes(before.homes_for({0, 1}), t0);
  after.carry_state(before, {0, 1}, false);
  EXPECT_EQ(after.in_flight(first.replica), 2);
  EXPECT_EQ(after.view().unassigned_in_flight[0], 1);
  EXPECT_EQ(after.view().in_flight, 3);
  // Its home holds two: the conversation's next request spills.
  const RouteDecision next = after.route(session("c"), t0);
  EXPECT_EQ(next.kind, RouteKind::kSpilled);
  after.finish(next, t0);
  // As they end, the new router lets go of them.
  after.drop_in_flight(first.replica, first.backend);
  after.drop_in_flight(unranked.replica, unranked.backend);
  EXPECT_EQ(after.in_flight(first.replica), 1);
  EXPECT_EQ(after.view().unassigned_in_flight[0], 0);
  EXPECT_EQ(after.route(session("c"), t0).kind, RouteKind::kSticky);
}

}  // namespace
}  // namespace lmwarden::core
