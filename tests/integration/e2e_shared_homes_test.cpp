// End to end with real processes: two `lmwarden serve` in front of the same
// three `lmwarden sim` servers, sharing conversation homes through a real
// redis-server (shared_homes). A conversation whose turns go to either
// warden keeps one home, so each later turn is served from the cache its
// earlier turns left; a Responses chain finds its stored responses whichever
// warden takes each turn; and with Redis gone each warden places alone.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/hash.h"
#include "redis_server.h"
#include "scratch.h"
#include "sim_test_client.h"
#include "telemetry/prometheus.h"

namespace lmwarden::testing {
namespace {

using nlohmann::json;

// The sum of a warden's samples of `name` whose labels include `labels`.
double metric_of(std::uint16_t port, const std::string& name,
                 const std::map<std::string, std::string>& labels = {}) {
  const auto parsed = telemetry::parse_exposition(http_request(port, "GET", "/metrics").body);
  double sum = 0;
  for (const auto& s : parsed.samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) match &= s.label(k) != nullptr && *s.label(k) == v;
    if (match) sum += s.value;
  }
  return sum;
}

// Waits (up to 5 s) until `port`'s metric reaches `at_least`.
bool reaches(std::uint16_t port, const std::string& name,
             const std::map<std::string, std::string>& labels, double at_least) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (metric_of(port, name, labels) < at_least) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

class SharedFleet {
 public:
  SharedFleet()
      : a_(sim()),
        b_(sim()),
        c_(sim()),
        config_path_(write_config(dir_, redis_.port(), {a_.port(), b_.port(), c_.port()})),
        w1_(serve(config_path_)),
        w2_(serve(config_path_)) {}

  std::uint16_t warden(int i) const { return i % 2 == 0 ? w1_.port() : w2_.port(); }
  RedisServer& redis() { return redis_; }
  // Kills the server of replica i (one rank each, in the file's order) and
  // waits for it to be gone, its port refusing connections.
  void kill_server(int i) {
    SimProcess& server = i == 0 ? a_ : i == 1 ? b_ : c_;
    ::kill(server.pid(), SIGKILL);
    for (int wait = 0; wait < 500 && server.running(); ++wait)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  json card(int i) { return json::parse(http_request(warden(i), "GET", "/api/models/m").body); }
  // Waits until warden i has sent `n` homes to Redis, so that the other
  // warden can find them.
  void written(int i, int n) {
    ASSERT_TRUE(reaches(warden(i), "lmwarden_shared_homes_writes_total", {{"result", "sent"}}, n))
        << "warden " << i % 2 << " sent "
        << metric_of(warden(i), "lmwarden_shared_homes_writes_total", {{"result", "sent"}});
  }

 private:
  static SimProcess sim() {
    return SimProcess({"sim", "--listen", "127.0.0.1:0", "--served-model-name", "m", "--time-scale",
                       "20", "--enable-responses-store"});
  }
  static SimProcess serve(const std::string& config) {
    return SimProcess(
        {"serve", "--config", config, "--listen", "127.0.0.1:0", "--log-level", "warn"});
  }
  // The timeout is far above the pauses some tests make Redis take (CLIENT
  // PAUSE 300): the requests and claims made meanwhile are answered after
  // it, however late a busy machine lets the wardens read the answers.
  static std::string write_config(const TempDir& dir, std::uint16_t redis,
                                  std::initializer_list<std::uint16_t> sims) {
    const std::string path = dir.file("lmwarden.yaml");
    std::ofstream out{path};
    out << "listen: 127.0.0.1:0\nshared_homes:\n  redis: redis://127.0.0.1:" << redis
        << "\n  key_prefix: \"e2e/\"\n  timeout: 2s\nmodels:\n  - name: m\n    backends:\n";
    for (std::uint16_t port : sims) out << "      - url: http://127.0.0.1:" << port << "\n";
    return path;
  }

  TempDir dir_{"lmwarden-e2e-shared-homes"};  // first: the others use it
  RedisServer redis_;
  SimProcess a_, b_, c_;
  std::string config_path_;
  SimProcess w1_, w2_;
};

std::string words(const std::string& seed, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += seed + std::to_string(i % 89) + " ";
  return s;
}

struct Reply {
  int status = 0;
  int prompt_tokens = 0;
  int cached_tokens = 0;
};

// Turn `turn` (1, 2, …) of conversation `conv`, its whole history resent, with
// Codex's session-id header; nothing in it is shared with other conversations.
Reply chat_turn(std::uint16_t port, const std::string& conv, int turn) {
  json messages = json::array();
  messages.push_back({{"role", "user"}, {"content", words(conv, 300)}});
  for (int t = 1; t < turn; ++t) {
    messages.push_back({{"role", "assistant"}, {"content", "reply " + std::to_string(t)}});
    messages.push_back({{"role", "user"}, {"content", words(conv + "-" + std::to_string(t), 40)}});
  }
  const json body = {{"model", "m"}, {"max_tokens", 4}, {"messages", messages}};
  const auto r =
      http_request(port, "POST", "/v1/chat/completions", body.dump(), {{"session-id", conv}});
  Reply reply{.status = r.status};
  if (r.status != 200) return reply;
  const json usage = json::parse(r.body)["usage"];
  reply.prompt_tokens = usage.value("prompt_tokens", 0);
  const auto& details = usage["prompt_tokens_details"];
  if (details.is_object() && details["cached_tokens"].is_number())
    reply.cached_tokens = details["cached_tokens"].get<int>();
  return reply;
}

// The Redis key of a conversation of model m, as the wardens write it.
std::string conversation_key(const std::string& conv) {
  char key[64];
  std::snprintf(key, sizeof key, "e2e/m:c:%016llx",
                static_cast<unsigned long long>(stable_hash(conv)));
  return key;
}

int route_total(const json& card, const std::string& kind) {
  int n = 0;
  for (const auto& r : card["replicas"]) n += r.value(kind, 0);
  return n;
}

TEST(EndToEndSharedHomes, AConversationKeepsOneHomeWhicheverWardenTakesItsTurns) {
  SharedFleet fleet;
  constexpr int kConversations = 6, kTurns = 4;
  int written[2] = {0, 0};
  for (int turn = 1; turn <= kTurns; ++turn) {
    for (int c = 0; c < kConversations; ++c) {
      // Conversation c starts on warden c % 2, and its turns alternate.
      const int w = c + turn - 1;
      const std::string conv = "conv-" + std::to_string(c);
      const Reply r = chat_turn(fleet.warden(w), conv, turn);
      ASSERT_EQ(r.status, 200) << conv << " turn " << turn;
      if (turn > 1) {
        // Its history was read on this replica before: all of it but the
        // newest message comes from the cache (in blocks of 16 tokens).
        EXPECT_GT(r.cached_tokens, r.prompt_tokens / 2)
            << conv << " turn " << turn << " went where its history was not cached";
      }
      fleet.written(w, ++written[w % 2]);
    }
  }
  // Each warden started three conversations (new), and took the other three
  // up from the homes the other chose, each request sticky from then on.
  for (int w = 0; w < 2; ++w) {
    const json card = fleet.card(w);
    EXPECT_EQ(route_total(card, "new"), 3) << card.dump();
    EXPECT_EQ(route_total(card, "sticky"), kConversations * kTurns / 2 - 3) << card.dump();
    EXPECT_EQ(card["sticky_ratio"], 1.0) << card.dump();
    EXPECT_EQ(
        metric_of(fleet.warden(w), "lmwarden_shared_homes_lookups_total", {{"result", "found"}}),
        3);
    EXPECT_EQ(
        metric_of(fleet.warden(w), "lmwarden_shared_homes_lookups_total", {{"result", "absent"}}),
        3);
    EXPECT_EQ(
        metric_of(fleet.warden(w), "lmwarden_shared_homes_lookups_total", {{"result", "failed"}}),
        0);
    EXPECT_EQ(metric_of(fleet.warden(w), "lmwarden_shared_homes_connected"), 1);
  }
  // What Redis holds: one key per conversation.
  EXPECT_EQ(fleet.redis().command({"DBSIZE"}), ":6");
}

// A conversation's first requests reach both wardens at once (Claude Code
// sends two as a conversation starts, and a balancer may part them): each
// warden finds nothing in Redis and places it as new, on the replica it
// finds least loaded, and their claims settle on one home. Every later turn
// then reads all of the turn before from the cache, whichever warden takes
// it; without the claims a conversation placed apart keeps two homes, and a
// turn on the one that missed the turn before reads it again.
TEST(EndToEndSharedHomes, FirstTurnsOnBothWardensAtOnceSettleOnOneHome) {
  SharedFleet fleet;
  // A conversation only warden 0 knows: the wardens' loads differ, so placed
  // at once, some conversations go to different replicas.
  ASSERT_EQ(chat_turn(fleet.warden(0), "only-here", 1).status, 200);
  constexpr int kConversations = 8, kTurns = 4;
  for (int c = 0; c < kConversations; ++c) {
    const std::string conv = "pair-" + std::to_string(c);
    // Claims (scripts, which may write) wait while lookups are answered: so
    // both wardens find nothing and place the conversation, as when their
    // lookups cross, however the two requests fall in time.
    ASSERT_EQ(fleet.redis().command({"CLIENT", "PAUSE", "300", "WRITE"}), "+OK");
    auto there =
        std::async(std::launch::async, [&] { return chat_turn(fleet.warden(1), conv, 1); });
    ASSERT_EQ(chat_turn(fleet.warden(0), conv, 1).status, 200) << conv;
    ASSERT_EQ(there.get().status, 200) << conv;
  }
  // Every request's home was claimed, and every claim answered.
  const auto claims = [&](int w, const std::string& result) {
    return metric_of(fleet.warden(w), "lmwarden_shared_homes_claims_total", {{"result", result}});
  };
  for (int w = 0; w < 2; ++w) {
    const int requests = kConversations + (w == 0 ? 1 : 0);
    ASSERT_TRUE(reaches(fleet.warden(w), "lmwarden_shared_homes_claims_total", {}, requests))
        << "warden " << w;
    EXPECT_EQ(claims(w, "failed") + claims(w, "unusable") + claims(w, "kept"), 0) << "warden " << w;
  }
  std::printf("claims taken %g and %g, yielded %g and %g\n", claims(0, "taken"), claims(1, "taken"),
              claims(0, "yielded"), claims(1, "yielded"));
  EXPECT_GE(claims(0, "yielded") + claims(1, "yielded"), 1)
      << "no conversation was placed apart: the test shows nothing";

  for (int c = 0; c < kConversations; ++c) {
    const std::string conv = "pair-" + std::to_string(c);
    int previous_prompt = chat_turn(fleet.warden(0), conv, 1).prompt_tokens;  // (sticky)
    for (int turn = 2; turn <= kTurns; ++turn) {
      const Reply r = chat_turn(fleet.warden(c + turn), conv, turn);
      ASSERT_EQ(r.status, 200) << conv << " turn " << turn;
      // All of the turn before, but for the blocks (16 tokens) it ended in.
      EXPECT_GE(r.cached_tokens, previous_prompt - 32)
          << conv << " turn " << turn << " went where the turn before was not read";
      previous_prompt = r.prompt_tokens;
    }
  }
}

// Another warden moved a conversation (it saw the home fail, say, where this
// warden sees it healthy): its home in Redis is no longer the one this warden
// keeps. This warden's next claim is answered with the other's home, and the
// conversation follows it from the request after: the two agree again, and
// the other's turns are not read again here.
TEST(EndToEndSharedHomes, AConversationFollowsTheHomeAnotherWardenMovedItTo) {
  SharedFleet fleet;
  ASSERT_EQ(chat_turn(fleet.warden(0), "moved", 1).status, 200);
  fleet.written(0, 1);
  const json before = fleet.card(0);
  int home = -1;
  for (const auto& r : before["replicas"])
    if (r["live_conversations"] == 1) home = r["index"].get<int>();
  ASSERT_GE(home, 0) << before.dump();
  const int moved_to = (home + 1) % 3;
  const std::string to_url = before["replicas"][moved_to]["url"].get<std::string>();
  const std::string key = conversation_key("moved");
  const auto holds = [&](const std::string& value) {
    return fleet.redis().command({"EVAL", "return redis.call('GET', KEYS[1]) == ARGV[1] and 1 or 0",
                                  "1", key, value}) == ":1";
  };
  const std::string home_url = before["replicas"][home]["url"].get<std::string>();
  ASSERT_TRUE(holds("0 " + home_url));
  ASSERT_EQ(fleet.redis().command({"SET", key, "0 " + to_url, "PX", "600000"}), "+OK");

  // Still sent home (this warden had not heard), and its claim is answered.
  const Reply second = chat_turn(fleet.warden(0), "moved", 2);
  ASSERT_EQ(second.status, 200);
  EXPECT_GT(second.cached_tokens, second.prompt_tokens / 2);
  ASSERT_TRUE(
      reaches(fleet.warden(0), "lmwarden_shared_homes_claims_total", {{"result", "yielded"}}, 1));
  // Then there: its first turn on that replica reads the history once.
  const Reply third = chat_turn(fleet.warden(0), "moved", 3);
  ASSERT_EQ(third.status, 200);
  EXPECT_LT(third.cached_tokens, third.prompt_tokens / 2);
  const json after = fleet.card(0);
  EXPECT_EQ(after["replicas"][moved_to]["sticky"], 1) << after.dump();
  EXPECT_EQ(after["replicas"][moved_to]["live_conversations"], 1) << after.dump();
  EXPECT_TRUE(holds("0 " + to_url));
  // And the other warden, which moved it, serves the next turn from cache.
  const Reply fourth = chat_turn(fleet.warden(1), "moved", 4);
  ASSERT_EQ(fourth.status, 200);
  EXPECT_GE(fourth.cached_tokens, third.prompt_tokens - 32);
}

// A warden that sees a conversation's home down asks Redis before it moves
// the conversation: the home another warden moved it to is followed, rather
// than a replica of this warden's choosing (which would read the history
// once more, and then be yielded).
TEST(EndToEndSharedHomes, AHomeSeenDownIsAskedForBeforeTheConversationMoves) {
  SharedFleet fleet;
  ASSERT_EQ(chat_turn(fleet.warden(0), "down", 1).status, 200);
  fleet.written(0, 1);
  ASSERT_EQ(chat_turn(fleet.warden(1), "down", 2).status, 200);  // warden 1 learns its home
  const json before = fleet.card(1);
  int home = -1;
  for (const auto& r : before["replicas"])
    if (r["live_conversations"] == 1) home = r["index"].get<int>();
  ASSERT_GE(home, 0) << before.dump();
  const int moved_to = (home + 1) % 3;
  fleet.kill_server(home);
  const auto down = [&] { return fleet.card(1)["replicas"][home]["healthy"] == false; };
  for (int i = 0; i < 200 && !down(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(down()) << fleet.card(1).dump();
  // As the other warden would have moved it, on a request of its own.
  const std::string to_url = before["replicas"][moved_to]["url"].get<std::string>();
  ASSERT_EQ(fleet.redis().command({"SET", conversation_key("down"), "0 " + to_url, "PX", "600000"}),
            "+OK");
  const double found =
      metric_of(fleet.warden(1), "lmwarden_shared_homes_lookups_total", {{"result", "found"}});

  ASSERT_EQ(chat_turn(fleet.warden(1), "down", 3).status, 200);
  const json after = fleet.card(1);
  EXPECT_EQ(after["replicas"][moved_to]["sticky"], 1) << after.dump();
  EXPECT_EQ(after["replicas"][moved_to]["live_conversations"], 1) << after.dump();
  EXPECT_EQ(route_total(after, "rehomed"), 0) << after.dump();
  EXPECT_EQ(
      metric_of(fleet.warden(1), "lmwarden_shared_homes_lookups_total", {{"result", "found"}}),
      found + 1);
}

// The same when the warden finds the home down from the request itself (its
// connect refused, long before probes would say so): before the retry it
// asks Redis, and the retry follows the home another warden chose. The
// request's own claim of the old home would say so too, but its answer can
// come after the retry has been placed: Redis is paused here so that it
// does, and the replica moved to is the busier of the two left, where the
// retry would not go by load.
TEST(EndToEndSharedHomes, AHomeFoundDownByTheRequestIsAskedForBeforeTheRetry) {
  SharedFleet fleet;
  ASSERT_EQ(chat_turn(fleet.warden(0), "refused", 1).status, 200);
  fleet.written(0, 1);
  ASSERT_EQ(chat_turn(fleet.warden(1), "refused", 2).status, 200);
  ASSERT_EQ(chat_turn(fleet.warden(1), "filler", 1).status, 200);  // on another replica
  const json before = fleet.card(1);
  int home = -1;
  int moved_to = -1;
  for (const auto& r : before["replicas"]) {
    if (r["live_conversations"] != 1) continue;
    (r["sticky"] == 1 ? home : moved_to) = r["index"].get<int>();
  }
  ASSERT_GE(home, 0) << before.dump();
  ASSERT_GE(moved_to, 0) << before.dump();
  const int idle = 3 - home - moved_to;
  const std::string to_url = before["replicas"][moved_to]["url"].get<std::string>();
  ASSERT_EQ(
      fleet.redis().command({"SET", conversation_key("refused"), "0 " + to_url, "PX", "600000"}),
      "+OK");
  fleet.kill_server(home);  // three failed probes (3 s) before the warden's probes say so
  const auto learnt = [&] {
    return metric_of(fleet.warden(1), "lmwarden_shared_homes_lookups_total",
                     {{"result", "found"}}) +
           metric_of(fleet.warden(1), "lmwarden_shared_homes_claims_total",
                     {{"result", "yielded"}});
  };
  const double learnt_before = learnt();
  ASSERT_EQ(fleet.redis().command({"CLIENT", "PAUSE", "300", "ALL"}), "+OK");

  ASSERT_EQ(chat_turn(fleet.warden(1), "refused", 3).status, 200);
  const json after = fleet.card(1);
  EXPECT_EQ(after["replicas"][moved_to]["retried"], 1) << after.dump();
  EXPECT_EQ(after["replicas"][moved_to]["live_conversations"], 2) << after.dump();
  EXPECT_EQ(after["replicas"][idle]["live_conversations"], 0) << after.dump();
  EXPECT_GE(learnt(), learnt_before + 1);
}

// A Responses chain (store on, no session id, as the OpenAI SDK sends it)
// whose turns alternate between the wardens: each turn must reach the server
// that stored the turn before, or that server's 404 comes back.
TEST(EndToEndSharedHomes, AResponsesChainFindsItsStoredResponsesThroughEitherWarden) {
  SharedFleet fleet;
  int written[2] = {0, 0};
  for (int chain = 0; chain < 4; ++chain) {
    std::string previous;
    int input_tokens = 0;
    for (int turn = 0; turn < 4; ++turn) {
      const int w = chain + turn;
      json body = {
          {"model", "m"},
          {"input", words("chain" + std::to_string(chain) + "-" + std::to_string(turn), 30)},
          {"max_output_tokens", 4}};
      if (!previous.empty()) body["previous_response_id"] = previous;
      const auto r = http_request(fleet.warden(w), "POST", "/v1/responses", body.dump());
      ASSERT_EQ(r.status, 200) << "chain " << chain << " turn " << turn << ": " << r.body;
      const json response = json::parse(r.body);
      previous = response.value("id", "");
      ASSERT_FALSE(previous.empty());
      const int tokens = response["usage"].value("input_tokens", 0);
      EXPECT_GT(tokens, input_tokens) << "each turn reads the whole chain";
      input_tokens = tokens;
      fleet.written(w, ++written[w % 2]);
    }
  }
}

// A chained turn whose stored response no warden has written is asked about
// twice, the second time after a pause: the warden that relayed a
// non-streamed reply writes its response only at the reply's end, and the
// client's next turn may reach this warden first.
TEST(EndToEndSharedHomes, AChainedTurnNoWardenKnowsIsAskedAgainAfterAPause) {
  SharedFleet fleet;
  const json body = {{"model", "m"},
                     {"input", "and then?"},
                     {"max_output_tokens", 4},
                     {"previous_response_id", "resp_nowhere"}};
  const auto start = std::chrono::steady_clock::now();
  const auto r = http_request(fleet.warden(0), "POST", "/v1/responses", body.dump());
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 404) << r.body;  // the server's own answer
  EXPECT_EQ(
      metric_of(fleet.warden(0), "lmwarden_shared_homes_lookups_total", {{"result", "absent"}}), 2);
  EXPECT_GE(took, std::chrono::milliseconds(10));
}

TEST(EndToEndSharedHomes, WithoutRedisEachWardenPlacesAloneAndPicksUpAgainWhenItIsBack) {
  SharedFleet fleet;
  fleet.redis().stop();
  for (int c = 0; c < 3; ++c)
    ASSERT_EQ(chat_turn(fleet.warden(0), "alone-" + std::to_string(c), 1).status, 200);
  EXPECT_GE(
      metric_of(fleet.warden(0), "lmwarden_shared_homes_lookups_total", {{"result", "failed"}}), 1);
  EXPECT_EQ(metric_of(fleet.warden(0), "lmwarden_shared_homes_connected"), 0);
  EXPECT_EQ(route_total(fleet.card(0), "new"), 3);

  // Back: within the store's retry interval (1 s) a new conversation is
  // looked up and written again.
  fleet.redis().start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int c = 0;
  while (metric_of(fleet.warden(0), "lmwarden_shared_homes_lookups_total", {{"result", "absent"}}) <
         1) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the warden never used Redis again";
    ASSERT_EQ(chat_turn(fleet.warden(0), "back-" + std::to_string(c++), 1).status, 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(reaches(fleet.warden(0), "lmwarden_shared_homes_connected", {}, 1));
  // The conversation started now on one warden continues on the other.
  fleet.written(0, 1);
  const Reply next = chat_turn(fleet.warden(1), "back-" + std::to_string(c - 1), 2);
  ASSERT_EQ(next.status, 200);
  EXPECT_GT(next.cached_tokens, next.prompt_tokens / 2);
  EXPECT_EQ(route_total(fleet.card(1), "new"), 0);
}

// Redis away while conversations start: each warden places them alone, and
// some end up with a home on each warden. Once Redis is back, the first
// request on either warden settles where the conversation lives: the other
// warden's next request, its own claims having failed, asks Redis before it
// is placed and follows that home. So only the first turn after the outage
// can miss what the other warden's replica read; every turn after reads it.
TEST(EndToEndSharedHomes, WardensThatPlacedAlonePartedAgreeOnceRedisIsBack) {
  SharedFleet fleet;
  fleet.redis().stop();
  // A conversation only warden 0 knows: the wardens' loads differ, so they
  // place some of the others on different replicas.
  ASSERT_EQ(chat_turn(fleet.warden(0), "only-here", 1).status, 200);
  constexpr int kConversations = 6;
  const auto conv = [](int c) { return "parted-" + std::to_string(c); };
  int apart = 0;
  for (int c = 0; c < kConversations; ++c) {
    ASSERT_EQ(chat_turn(fleet.warden(0), conv(c), 1).status, 200);
    const Reply second = chat_turn(fleet.warden(1), conv(c), 2);
    ASSERT_EQ(second.status, 200);
    if (second.cached_tokens < second.prompt_tokens / 2) ++apart;
  }
  ASSERT_GE(apart, 1) << "no conversation was placed apart: the test shows nothing";

  fleet.redis().start();
  for (int w = 0; w < 2; ++w)
    ASSERT_TRUE(reaches(fleet.warden(w), "lmwarden_shared_homes_connected", {}, 1));
  const auto taken = [&](int w) {
    return metric_of(fleet.warden(w), "lmwarden_shared_homes_claims_total", {{"result", "taken"}});
  };
  // Turn 3 on warden 0: its claim is the first to reach Redis.
  const double taken_before = taken(0);
  for (int c = 0; c < kConversations; ++c)
    ASSERT_EQ(chat_turn(fleet.warden(0), conv(c), 3).status, 200);
  ASSERT_TRUE(reaches(fleet.warden(0), "lmwarden_shared_homes_claims_total", {{"result", "taken"}},
                      taken_before + kConversations));
  for (int c = 0; c < kConversations; ++c) {
    int previous = chat_turn(fleet.warden(0), conv(c), 3).prompt_tokens;  // (sticky, read again)
    for (int turn = 4; turn <= 5; ++turn) {
      const Reply r = chat_turn(fleet.warden(turn), conv(c), turn);
      ASSERT_EQ(r.status, 200) << conv(c) << " turn " << turn;
      EXPECT_GE(r.cached_tokens, previous - 32)
          << conv(c) << " turn " << turn << " went where the turn before was not read";
      previous = r.prompt_tokens;
    }
  }
  EXPECT_GE(
      metric_of(fleet.warden(1), "lmwarden_shared_homes_lookups_total", {{"result", "found"}}),
      kConversations);
}

// A claim Redis answers with an error (out of memory, say; here the key
// holds a hash, which the claim's GET refuses) is counted failed, but its
// conversation is not asked about again at each request, as one whose claim
// went unanswered is: Redis answers, and would refuse the lookup's round trip
// too.
TEST(EndToEndSharedHomes, AClaimRedisRefusesIsNotFollowedByLookups) {
  SharedFleet fleet;
  ASSERT_EQ(chat_turn(fleet.warden(0), "refused", 1).status, 200);
  fleet.written(0, 1);
  const std::string key = conversation_key("refused");
  ASSERT_EQ(fleet.redis().command({"DEL", key}), ":1");
  ASSERT_EQ(fleet.redis().command({"HSET", key, "f", "v"}), ":1");
  for (int turn = 2; turn <= 4; ++turn) {
    ASSERT_EQ(chat_turn(fleet.warden(0), "refused", turn).status, 200);
    ASSERT_TRUE(reaches(fleet.warden(0), "lmwarden_shared_homes_claims_total",
                        {{"result", "failed"}}, turn - 1));
  }
  EXPECT_EQ(
      metric_of(fleet.warden(0), "lmwarden_shared_homes_lookups_total", {{"result", "failed"}}), 0);
  EXPECT_EQ(metric_of(fleet.warden(0), "lmwarden_shared_homes_connected"), 1);
}

}  // namespace
}  // namespace lmwarden::testing
