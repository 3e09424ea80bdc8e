// The warden over real sockets on 127.0.0.1, in front of an in-process fake
// vLLM server: stickiness, spreading, spill, pinning, streaming, disconnects,
// retries and errors in each dialect.
#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "fake_vllm.h"
#include "hostile_client.h"
#include "http_test_client.h"
#include "metric_probe.h"
#include "running_warden.h"
#include "scratch.h"

namespace lmwarden::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string chat_body(bool stream = true) {
  return json{{"model", "m"}, {"stream", stream}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump();
}

HttpReply chat(std::uint16_t port, const std::string& session, std::vector<std::pair<std::string, std::string>> extra = {}) {
  if (!session.empty()) extra.emplace_back("session-id", session);
  return http_request(port, http::verb::post, "/v1/chat/completions", chat_body(), extra);
}

TEST(ProxyRouting, EachConversationStaysOnOneRankAcrossTurns) {
  FakeVllm fake{4};
  RunningWarden warden{make_config({{fake.port(), 4}})};
  for (int turn = 0; turn < 4; ++turn)
    for (std::string conv : {"conv-a", "conv-b", "conv-c"}) {
      auto r = chat(warden.port(), conv);
      ASSERT_EQ(r.status, 200u) << r.body;
      EXPECT_NE(r.body.find("[DONE]"), std::string::npos);
    }
  std::map<std::string, std::set<int>> ranks;
  for (const auto& s : fake.seen()) ranks[s.session].insert(s.rank);
  ASSERT_EQ(ranks.size(), 3u);
  std::set<int> homes;
  for (const auto& [conv, r] : ranks) {
    EXPECT_EQ(r.size(), 1u) << conv << " moved between ranks";
    homes.insert(*r.begin());
  }
  EXPECT_EQ(homes.size(), 3u) << "three new conversations on an idle fleet should use three ranks";
  const json card = warden.card();
  EXPECT_EQ(card["in_flight"], 0);
  int sticky = 0, fresh = 0;
  for (const auto& r : card["replicas"]) {
    sticky += r["sticky"].get<int>();
    fresh += r["new"].get<int>();
  }
  EXPECT_EQ(fresh, 3);
  EXPECT_EQ(sticky, 9);
  EXPECT_EQ(card["sticky_ratio"], 1.0);
}

TEST(ProxyRouting, BackendNamedByHostNameIsResolvedAndReached) {
  // A name, not an address: resolved, then connected to the first of its
  // addresses that accepts (localhost may list ::1 first; the fake listens
  // on 127.0.0.1 only).
  FakeVllm fake{1};
  RunningWarden warden{load_test_config(
      "listen: 127.0.0.1:0\ntimeouts:\n  connect: 2s\nmodels:\n  - name: m\n    backends:\n"
      "      - url: http://localhost:" +
      std::to_string(fake.port()) + "\n")};
  for (int turn = 0; turn < 2; ++turn) {
    auto r = chat(warden.port(), "conv-named");
    ASSERT_EQ(r.status, 200u) << r.body;
    EXPECT_NE(r.body.find("[DONE]"), std::string::npos);
  }
  EXPECT_EQ(fake.seen().size(), 2u);
}

TEST(ProxyRouting, NewConversationsSpreadOverAllRanks) {
  FakeVllm fake{4};
  RunningWarden warden{make_config({{fake.port(), 4}})};
  for (int i = 0; i < 8; ++i) ASSERT_EQ(chat(warden.port(), "spread-" + std::to_string(i)).status, 200u);
  std::map<int, int> per_rank;
  for (const auto& s : fake.seen()) ++per_rank[s.rank];
  ASSERT_EQ(per_rank.size(), 4u);
  for (auto [rank, n] : per_rank) EXPECT_EQ(n, 2) << "rank " << rank;
}

TEST(ProxyRouting, NinthConcurrentRequestOfAConversationSpills) {
  FakeVllm fake{4};
  RunningWarden warden{make_config({{fake.port(), 4}})};  // spill threshold auto = 8
  ASSERT_EQ(chat(warden.port(), "hot").status, 200u);
  const int home = fake.seen().back().rank;

  std::vector<std::unique_ptr<HttpConnection>> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(std::make_unique<HttpConnection>(warden.port()));
    held.back()->send(http::verb::post, "/v1/chat/completions", chat_body(), {{"session-id", "hot"}, {"x-fake-hold", "1"}});
  }
  ASSERT_TRUE(eventually([&] { return fake.held(home) == 8; })) << "held on home: " << fake.held(home);
  EXPECT_EQ(warden.card()["replicas"][home]["in_flight"], 8);

  HttpConnection ninth{warden.port()};
  ninth.send(http::verb::post, "/v1/chat/completions", chat_body(), {{"session-id", "hot"}, {"x-fake-hold", "1"}});
  ASSERT_TRUE(eventually([&] { return fake.held_total() == 9; }));
  const int spilled_to = fake.seen().back().rank;
  EXPECT_NE(spilled_to, home);
  fake.release();
  for (auto& c : held) EXPECT_EQ(c->read().status, 200u);
  EXPECT_EQ(ninth.read().status, 200u);

  const json card = warden.card();
  EXPECT_EQ(card["replicas"][spilled_to]["spilled_in"], 1);
  EXPECT_EQ(card["in_flight"], 0);
  // The home did not move.
  ASSERT_EQ(chat(warden.port(), "hot").status, 200u);
  EXPECT_EQ(fake.seen().back().rank, home);
}

TEST(ProxyRouting, ClientPinnedRequestReachesTheRankItNamed) {
  FakeVllm fake{4};
  RunningWarden warden{make_config({{fake.port(), 4}})};
  auto r = chat(warden.port(), "pinned-conv", {{"X-data-parallel-rank", "2"}});
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(fake.seen().back().rank, 2);
  EXPECT_EQ(warden.card()["replicas"][2]["client_pinned"], 1);

  auto bad = chat(warden.port(), "", {{"X-data-parallel-rank", "9"}});
  EXPECT_EQ(bad.status, 400u);
  EXPECT_EQ(json::parse(bad.body)["error"]["message"],
            "X-data-parallel-rank 9 is out of range: model 'm' has 4 replicas (numbered 0 to 3)");
  // A rank past any int is named as the client wrote it.
  auto huge = chat(warden.port(), "", {{"X-data-parallel-rank", "99999999999999999999"}});
  EXPECT_EQ(huge.status, 400u);
  EXPECT_NE(json::parse(huge.body)["error"]["message"].get<std::string>().find(
                "X-data-parallel-rank 99999999999999999999 is out of range"),
            std::string::npos)
      << huge.body;
}

TEST(ProxyRouting, FirstEventReachesTheClientBeforeTheReplyEnds) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  HttpConnection c{warden.port()};
  c.send(http::verb::post, "/v1/chat/completions", chat_body(), {{"x-fake-hold", "1"}});
  const auto header = c.read_header();
  EXPECT_EQ(header.status, 200u);
  EXPECT_EQ(header.header("content-type"), "text/event-stream");
  const std::string first = c.read_until("\n\n");
  EXPECT_NE(first.find("first"), std::string::npos);
  EXPECT_EQ(fake.held_total(), 1) << "the upstream reply should still be open";
  fake.release();
  const std::string rest = c.read_until("[DONE]");
  EXPECT_NE(rest.find("[DONE]"), std::string::npos);
}

// A client that reads slowly: the warden's writes to it are taken in part
// (its socket buffer and the client's are full), the rest is sent when it
// reads again, and meanwhile the warden stops reading the upstream, whose
// writes are taken in part too. Every event arrives, whole and in order.
TEST(ProxyRouting, SlowReadingClientGetsTheWholeStream) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  HttpConnection c{warden.port()};
  constexpr int kEvents = 12000;  // about 12 MB: far more than the sockets hold
  c.send(http::verb::post, "/v1/chat/completions", chat_body(),
         {{"session-id", "slow-reader"}, {"x-fake-events", std::to_string(kEvents)}});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // not reading
  const HttpReply r = c.read();
  ASSERT_EQ(r.status, 200u);
  std::size_t at = r.body.find("first");
  ASSERT_NE(at, std::string::npos);
  for (int i = 0; i < kEvents; ++i) {
    at = r.body.find("\"bulk " + std::to_string(i) + " ", at);
    ASSERT_NE(at, std::string::npos) << "event " << i << " missing or out of order";
  }
  EXPECT_NE(r.body.find(" last", at), std::string::npos);
  EXPECT_TRUE(r.body.ends_with("data: [DONE]\n\n"));
  EXPECT_EQ(std::count(r.body.begin(), r.body.end(), '\n'), 2 * (kEvents + 3));
}

TEST(ProxyRouting, ClientDisconnectClosesTheUpstreamRequest) {
  FakeVllm fake{2};
  RunningWarden warden{make_config({{fake.port(), 2}})};
  {
    HttpConnection c{warden.port()};
    c.send(http::verb::post, "/v1/chat/completions", chat_body(), {{"session-id", "leaver"}, {"x-fake-hold", "1"}});
    c.read_header();
    c.read_until("\n\n");
    EXPECT_EQ(warden.card()["in_flight"], 1);
    c.close();
  }
  EXPECT_TRUE(eventually([&] { return fake.aborted() == 1; })) << "upstream request was not closed";
  EXPECT_TRUE(eventually([&] { return warden.card()["in_flight"] == 0; }));
  // The warden keeps serving.
  fake.release();
  EXPECT_EQ(chat(warden.port(), "leaver").status, 200u);
}

// A client that leaves while its request's connect waits (a server that
// drops packets) ends the request then, not when the connect timeout does.
TEST(ProxyRouting, AClientLeavingWhileItsRequestConnectsEndsTheConnect) {
  UnansweredConnects server;
  auto cfg = make_config({{server.port(), 1}});
  cfg.timeouts.connect = std::chrono::minutes(2);
  RunningWarden warden{std::move(cfg)};
  {
    HttpConnection c{warden.port()};
    c.send(http::verb::post, "/v1/chat/completions", chat_body(), {{"session-id", "impatient"}});
    ASSERT_TRUE(eventually([&] { return warden.card()["in_flight"] == 1; }));
    c.close();
  }
  EXPECT_TRUE(eventually([&] { return warden.card()["in_flight"] == 0; }, std::chrono::seconds(5)))
      << "the connect went on after the client left";
  EXPECT_TRUE(warden.card()["replicas"][0]["healthy"].get<bool>())
      << "a connect the client's leaving ended says nothing of the server";
}

TEST(ProxyRouting, RefusedUpstreamIsRetriedOnAnotherReplica) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{closed_port(), 1}, {fake.port(), 1}})};
  for (int i = 0; i < 4; ++i) {
    auto r = chat(warden.port(), "retry-" + std::to_string(i));
    ASSERT_EQ(r.status, 200u) << r.body;
  }
  EXPECT_EQ(fake.seen().size(), 4u);
  const json card = warden.card();
  EXPECT_GE(card["replicas"][0]["new"].get<int>(), 1) << "the dead server should have been tried first at least once";
  EXPECT_EQ(card["in_flight"], 0);
}

TEST(ProxyRouting, FiveHundredBeforeAnyByteIsRetriedOnce) {
  FakeVllm fake{2};
  RunningWarden warden{make_config({{fake.port(), 2}})};
  auto r = chat(warden.port(), "", {{"x-fake-status", "500"}});
  // Both attempts fail with 500; the second one is relayed as is.
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(fake.seen().size(), 2u);
  EXPECT_NE(fake.seen()[0].rank, fake.seen()[1].rank);
}

TEST(ProxyRouting, ErrorsComeInTheClientsDialect) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  const auto p = warden.port();

  auto unknown = http_request(p, http::verb::post, "/v1/chat/completions", R"({"model":"nope","messages":[]})");
  EXPECT_EQ(unknown.status, 404u);
  EXPECT_EQ(json::parse(unknown.body)["error"]["type"], "not_found_error");

  auto unknown_a = http_request(p, http::verb::post, "/v1/messages?beta=true", R"({"model":"nope","messages":[]})");
  EXPECT_EQ(unknown_a.status, 404u);
  const json a = json::parse(unknown_a.body);
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "not_found_error");

  auto malformed = http_request(p, http::verb::post, "/v1/chat/completions", R"({"model":"m","messages":[)");
  EXPECT_EQ(malformed.status, 400u);
  EXPECT_TRUE(json::parse(malformed.body)["error"].contains("message"));

  auto malformed_a = http_request(p, http::verb::post, "/v1/messages", "not json");
  EXPECT_EQ(malformed_a.status, 400u);
  EXPECT_EQ(json::parse(malformed_a.body)["error"]["type"], "invalid_request_error");

  const std::string huge = R"({"model":"m","messages":[{"role":"user","content":")" + std::string(2 << 20, 'x') + "\"}]}";
  HttpConnection big{p};
  big.send(http::verb::post, "/v1/messages", huge);
  auto too_large = big.read();
  EXPECT_EQ(too_large.status, 413u);
  EXPECT_EQ(json::parse(too_large.body)["error"]["type"], "request_too_large");

  EXPECT_TRUE(fake.seen().empty()) << "no bad request should reach the upstream";
}

// vLLM (Python's json) accepts a surrogate escape without its partner; so
// does the warden, which forwards the body untouched (the unit tests check
// the session it reads from it).
TEST(ProxyRouting, ALoneSurrogateInASessionFieldIsForwarded) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  const std::string body = R"({"model":"m","prompt_cache_key":"k\ud800","messages":[]})";
  const auto reply = http_request(warden.port(), http::verb::post, "/v1/chat/completions", body);
  EXPECT_EQ(reply.status, 200u) << reply.body;
  ASSERT_EQ(fake.seen().size(), 1u);
  EXPECT_EQ(fake.seen()[0].body, body);
}

TEST(ProxyRouting, AliasRoutesToTheModelAndLocalRoutesAnswer) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions",
                        R"({"model":"m-alias","messages":[]})");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(http_request(warden.port(), http::verb::head, "/").status, 200u);
  EXPECT_EQ(http_request(warden.port(), http::verb::get, "/health").status, 200u);
  const json models = json::parse(http_request(warden.port(), http::verb::get, "/v1/models").body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "m");
  EXPECT_EQ(models["data"][1]["id"], "m-alias");
  EXPECT_EQ(fake.seen().back().forwarded_for, "127.0.0.1");
}

// A client that takes the warden for an HTTP proxy sends the absolute form
// ("POST http://host/v1/…"), which a server must accept (RFC 9112 3.2.2):
// it is routed by its path, and the backend is sent the origin form.
TEST(ProxyRouting, AnAbsoluteFormTargetIsRoutedByItsPath) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  const std::string origin = "http://127.0.0.1:" + std::to_string(warden.port());
  const auto r = http_request(warden.port(), http::verb::post, origin + "/v1/chat/completions",
                              R"({"model":"m","messages":[]})");
  EXPECT_EQ(r.status, 200u) << r.body;
  ASSERT_FALSE(fake.seen().empty());
  EXPECT_EQ(fake.seen().back().path, "/v1/chat/completions");
  EXPECT_EQ(http_request(warden.port(), http::verb::get, origin + "/health").status, 200u);
  EXPECT_EQ(http_request(warden.port(), http::verb::get, "HTTP://warden.example/v1/models").status,
            200u);
}

// A streamed reply's header comes at once and its first event after the
// engine's queue and prefill: that wait is the first-byte timeout's, not the
// idle timeout's (which is for the silences between events).
TEST(ProxyRouting, FirstEventOfAStreamWaitsUnderTheFirstByteTimeout) {
  FakeVllm fake{1};
  const std::string body = R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})";
  {
    RunningWarden warden{make_config({{fake.port(), 1}}, std::nullopt, "", "",
                                      "  first_byte: 5s\n  idle: 300ms\n")};
    auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions", body,
                          {{"x-fake-first-event-delay-ms", "900"}});
    ASSERT_EQ(r.status, 200u);
    const auto events = parse_sse(r.body);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().data, "[DONE]") << r.body;
    EXPECT_EQ(r.body.find("\"error\""), std::string::npos) << r.body;
  }
  {
    RunningWarden warden{make_config({{fake.port(), 1}}, std::nullopt, "", "",
                                      "  first_byte: 300ms\n  idle: 5s\n")};
    auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions", body,
                          {{"x-fake-first-event-delay-ms", "2000"}});
    ASSERT_EQ(r.status, 200u);  // the header had gone
    const auto events = parse_sse(r.body);
    ASSERT_EQ(events.size(), 1u) << r.body;
    EXPECT_NE(events[0].data.find("first-byte timeout"), std::string::npos) << r.body;
    EXPECT_EQ(json::parse(events[0].data)["error"]["code"], 504) << r.body;
    EXPECT_EQ(
        metric(warden.port(), "lmwarden_upstream_errors_total", {{"kind", "first_byte_timeout"}}),
        1);
  }
  {
    // The timeout runs from the request's sending: a header that came late
    // does not start it again (the first event came 2.8 s after the
    // request, under a first_byte of 2 s, and was relayed).
    RunningWarden warden{
        make_config({{fake.port(), 1}}, std::nullopt, "", "", "  first_byte: 2s\n  idle: 5s\n")};
    auto r =
        http_request(warden.port(), http::verb::post, "/v1/chat/completions", body,
                     {{"x-fake-header-delay-ms", "1000"}, {"x-fake-first-event-delay-ms", "1800"}});
    ASSERT_EQ(r.status, 200u);
    const auto events = parse_sse(r.body);
    ASSERT_EQ(events.size(), 1u) << r.body;
    EXPECT_NE(events[0].data.find("first-byte timeout"), std::string::npos) << r.body;
  }
}

// An upstream that drops mid-event: the warden held the open event's bytes,
// so the client has whole events only, then the error event. With
// inject_stream_usage the usage stripper holds events the same way.
TEST(ProxyRouting, AnEventTheUpstreamTearsNeverReachesTheClient) {
  for (const std::string inject : {"false", "true"}) {
    FakeVllm fake{1};
    RunningWarden warden{
        make_config({{fake.port(), 1}}, std::nullopt, "", "    inject_stream_usage: " + inject + "\n")};
    for (const auto& [path, dialect_error] :
         {std::pair{"/v1/chat/completions", "\"error\""}, std::pair{"/v1/messages", "\"type\":\"error\""}}) {
      SCOPED_TRACE(std::string(path) + " inject_stream_usage: " + inject);
      auto r = http_request(warden.port(), http::verb::post, path,
                            R"({"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]})",
                            {{"x-fake-tear", "1"}});
      ASSERT_EQ(r.status, 200u);
      const auto events = parse_sse(r.body);  // throws on an event without its blank line
      ASSERT_EQ(events.size(), 2u) << r.body;
      EXPECT_EQ(events[0].data, R"({"choices":[{"delta":{"content":"first"}}]})");
      EXPECT_NE(events[1].data.find(dialect_error), std::string::npos) << r.body;
      EXPECT_TRUE(json::accept(events[1].data)) << events[1].data;
    }
  }
}

// An event too long to hold went out as it came: when the upstream tears it,
// it is ended before the error event, which stays an event of its own.
TEST(ProxyRouting, ErrorEventAfterATornLongEventIsAnEventOfItsOwn) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions",
                        R"({"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]})",
                        {{"x-fake-tear", "long"}});
  ASSERT_EQ(r.status, 200u);
  const auto events = parse_sse(r.body);  // throws on an event without its blank line
  ASSERT_EQ(events.size(), 3u) << r.body.substr(0, 300);
  EXPECT_EQ(events[1].data, std::string(70'000, 'x'));  // torn: its bytes had gone
  EXPECT_NE(events[2].data.find("\"error\""), std::string::npos) << events[2].data;
  EXPECT_TRUE(json::accept(events[2].data)) << events[2].data;
}

// A 5xx is retried only where another replica can take the retry; otherwise
// the client gets the upstream's own reply, not a 502 of the warden's.
TEST(ProxyRouting, A5xxWithNowhereElseToGoReachesTheClientAsIs) {
  FakeVllm fake{2};
  RunningWarden warden{make_config({{fake.port(), 2}}, std::nullopt, "retries: 3\n")};
  const std::string body = R"({"model":"m","stream":false,"messages":[]})";
  // Pinned to rank 1: no other replica; one attempt, the 500 as the engine sent it.
  auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions", body,
                        {{"x-fake-status", "500"}, {"X-data-parallel-rank", "1"}});
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.body, R"({"error":"fake failure"})");
  EXPECT_EQ(fake.seen().size(), 1u);
  // Unpinned, two replicas, both failing: one retry, then the second 503 as sent.
  r = http_request(warden.port(), http::verb::post, "/v1/chat/completions", body, {{"x-fake-status", "503"}});
  EXPECT_EQ(r.status, 503u);
  EXPECT_EQ(r.body, R"({"error":"fake failure"})");
  EXPECT_EQ(fake.seen().size(), 3u);
  EXPECT_EQ(metric(warden.port(), "lmwarden_upstream_errors_total", {{"kind", "status_5xx"}}), 3);
}

// HTTP/1.0 has no chunked framing: a streamed reply reaches an HTTP/1.0
// client unframed, ended by closing the connection (RFC 9112 6.1, 6.3).
TEST(ProxyRouting, Http10ClientGetsAStreamEndedByClose) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  const std::string body = R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})";
  RawClient c{warden.port()};
  ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                     "Connection: keep-alive\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\n\r\n" + body));
  ASSERT_TRUE(c.wait_closed(10s)) << "the stream must end by closing: " << c.unread().substr(0, 300);
  const std::string& all = c.unread();
  const std::size_t head_end = all.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << all.substr(0, 300);
  const std::string head = all.substr(0, head_end);
  EXPECT_EQ(raw_header(head, "transfer-encoding"), std::nullopt) << head;
  EXPECT_EQ(raw_header(head, "content-length"), std::nullopt) << head;
  EXPECT_EQ(raw_header(head, "connection"), "close") << head;
  const std::string stream = all.substr(head_end + 4);
  const auto events = parse_sse(stream);  // throws on a chunk size line or a torn event
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().data, "[DONE]");
}

// A real client's request from shared/fixtures/clients, addressed to model
// "m", without the headers the test client writes itself.
struct Capture {
  std::string path;
  json body;
  std::vector<std::pair<std::string, std::string>> headers;
};
Capture capture(const std::string& file) {
  std::ifstream in{std::string(LMWARDEN_FIXTURES) + "/clients/" + file};
  if (!in) throw std::runtime_error("fixture missing: " + file);
  json fixture = json::parse(in);
  Capture c{fixture["path"], fixture["body"], {}};
  c.body["model"] = "m";
  for (const auto& h : fixture["headers"]) {
    std::string name = h[0];
    std::string lower = name;
    for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower == "content-length" || lower == "host" || lower == "connection") continue;
    c.headers.emplace_back(name, h[1]);
  }
  return c;
}

HttpReply send(std::uint16_t port, const Capture& c) {
  return http_request(port, http::verb::post, c.path, c.body.dump(), c.headers);
}

// Real client captures: Claude Code 2.x carries its session in a header, so
// its turn and its title side request land on the same rank; every turn of the
// same session sticks.
TEST(ProxyRouting, RealClaudeCodeRequestsStickToOneRank) {
  FakeVllm fake{4};
  RunningWarden warden{make_config({{fake.port(), 4}})};
  const Capture turn = capture("claude-code-2.1.332_messages_turn2.json");
  // Load other ranks first so the conversation's placement is not trivially rank 0.
  ASSERT_EQ(chat(warden.port(), "other-1").status, 200u);
  for (int i = 0; i < 3; ++i) {
    auto r = send(warden.port(), turn);
    ASSERT_EQ(r.status, 200u) << r.body;
  }
  std::set<int> ranks;
  for (const auto& s : fake.seen())
    if (s.path == "/v1/messages?beta=true") ranks.insert(s.rank);
  EXPECT_EQ(ranks.size(), 1u);
}

// vLLM's /v1/responses does not read X-data-parallel-rank, so Codex's turns
// go to a multi-rank server without one, counted as the server balancer's;
// a model whose servers do pin them (unranked_routes: []) pins them.
TEST(ProxyRouting, CodexResponsesGoWithoutARankWhereTheServerIgnoresIt) {
  const Capture turn = capture("codex-0.171.0_responses_tool-followup.json");
  ASSERT_EQ(turn.path, "/v1/responses");
  for (const bool pinned : {false, true}) {
    SCOPED_TRACE(pinned ? "unranked_routes: []" : "by default");
    FakeVllm fake{2};
    RunningWarden warden{make_config({{fake.port(), 2}}, std::nullopt, "",
                                     pinned ? "    unranked_routes: []\n" : "")};
    for (int i = 0; i < 3; ++i) {
      auto r = send(warden.port(), turn);
      ASSERT_EQ(r.status, 200u) << r.body;
    }
    ASSERT_EQ(chat(warden.port(), "a-chat").status, 200u);
    std::multiset<int> ranks;
    std::set<std::string> sessions;
    for (const auto& s : fake.seen()) {
      if (s.path != "/v1/responses") {
        EXPECT_GE(s.rank, 0) << "chat is pinned either way";
        continue;
      }
      ranks.insert(s.rank);
      sessions.insert(s.session);
    }
    ASSERT_EQ(ranks.size(), 3u);
    EXPECT_EQ(sessions.size(), 1u) << "the capture carries one session-id";
    const json card = warden.card();
    EXPECT_EQ(card["unranked_routes"], pinned ? json::array() : json::array({"/v1/responses"}));
    if (pinned) {
      EXPECT_EQ(ranks.count(*ranks.begin()), 3u) << "every turn on the one rank";
      EXPECT_GE(*ranks.begin(), 0);
      EXPECT_EQ(card["unassigned"]["sticky"], 0) << card;
    } else {
      EXPECT_EQ(ranks.count(-1), 3u) << "no rank header on any turn";
      EXPECT_EQ(card["unassigned"]["new"], 1) << card;
      EXPECT_EQ(card["unassigned"]["sticky"], 2) << card;
      EXPECT_EQ(card["unassigned"]["in_flight"], 0) << card;
    }
    // The model has a multi-rank server: its "unassigned" in-flight series is
    // there when idle too, at 0.
    const std::string text = http_request(warden.port(), http::verb::get, "/metrics").body;
    EXPECT_NE(text.find("lmwarden_in_flight{model=\"m\",replica=\"unassigned\"} 0\n"),
              std::string::npos)
        << text;
  }
}

// Codex on its chat wire API sends no session id: each turn anonymous by
// default. With `opening` among the sources, its turns (the capture grown by
// a turn each time, as the client resends its history) keep to one rank.
TEST(ProxyRouting, AClientWithoutAnIdKeepsToARankByItsOpening) {
  for (const bool opening : {false, true}) {
    SCOPED_TRACE(opening ? "with opening" : "by default");
    FakeVllm fake{4};
    RunningWarden warden{
        make_config({{fake.port(), 4}}, std::nullopt, "",
                    opening ? "    session_sources: [header:session-id, opening]\n" : "")};
    Capture turn = capture("codex-0.63.0_chat-completions.json");
    for (int i = 0; i < 4; ++i) {
      // Another conversation between turns, so that least-loaded moves on.
      ASSERT_EQ(chat(warden.port(), "other-" + std::to_string(i)).status, 200u);
      auto r = send(warden.port(), turn);
      ASSERT_EQ(r.status, 200u) << r.body;
      turn.body["messages"].push_back({{"role", "assistant"}, {"content", "Step done."}});
      turn.body["messages"].push_back({{"role", "user"}, {"content", "Go on."}});
    }
    std::set<int> ranks;
    for (const auto& s : fake.seen())
      if (s.session.empty()) ranks.insert(s.rank);
    const json card = warden.card();
    int sticky = 0, fresh = 0, anonymous = 0;
    for (const auto& r : card["replicas"]) {
      sticky += r["sticky"].get<int>();
      fresh += r["new"].get<int>();
      anonymous += r["anonymous"].get<int>();
    }
    if (opening) {
      EXPECT_EQ(card["session_sources"], json::array({"header:session-id", "opening"}));
    } else {
      ASSERT_EQ(card["session_sources"].size(), 11u) << card;
      EXPECT_EQ(card["session_sources"][0], "header:x-claude-code-session-id");
    }
    if (opening) {
      EXPECT_EQ(ranks.size(), 1u) << "every turn on its home";
      EXPECT_EQ(anonymous, 0) << card;
      EXPECT_EQ(fresh, 4 + 1) << card;  // the four others and the Codex conversation
      EXPECT_EQ(sticky, 3) << card;
    } else {
      EXPECT_GT(ranks.size(), 1u) << "each turn placed on its own";
      EXPECT_EQ(anonymous, 4) << card;
    }
  }
}

// Each model reads the session from its own sources, and one pass over the
// body serves them all: a body field that is one model's session id is
// nothing to the other model.
TEST(ProxyRouting, EachModelReadsTheSessionFromItsOwnSources) {
  FakeVllm plain{4}, tagged{4};
  const std::string yaml =
      "listen: 127.0.0.1:0\nmodels:\n"
      "  - name: m\n    backends:\n      - url: http://127.0.0.1:" + std::to_string(plain.port()) +
      "\n        data_parallel_size: 4\n"
      "  - name: tagged\n    session_sources: [body:user]\n    backends:\n"
      "      - url: http://127.0.0.1:" + std::to_string(tagged.port()) + "\n        data_parallel_size: 4\n";
  auto cfg = config::load_config_string(yaml, "test.yaml");
  ASSERT_TRUE(cfg) << cfg.error().message();
  RunningWarden warden{std::move(cfg).value()};
  auto send = [&](const std::string& model, const std::string& user) {
    const json body{{"model", model}, {"user", user}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    return http_request(warden.port(), http::verb::post, "/v1/chat/completions", body.dump()).status;
  };
  for (int turn = 0; turn < 3; ++turn)
    for (std::string user : {"u1", "u2", "u3"}) {
      ASSERT_EQ(send("tagged", user), 200u);
      ASSERT_EQ(send("m", user), 200u);
    }
  auto totals = [](const json& card) {
    std::map<std::string, int> n;
    for (const auto& r : card["replicas"])
      for (const char* kind : {"new", "sticky", "anonymous"}) n[kind] += r[kind].get<int>();
    return n;
  };
  const auto by_user = totals(warden.card("tagged"));
  EXPECT_EQ(by_user.at("new"), 3);
  EXPECT_EQ(by_user.at("sticky"), 6);
  EXPECT_EQ(by_user.at("anonymous"), 0);
  const auto plain_totals = totals(warden.card("m"));
  EXPECT_EQ(plain_totals.at("anonymous"), 9);
  EXPECT_EQ(plain_totals.at("new"), 0);
  EXPECT_EQ(tagged.seen().size(), 9u);
  EXPECT_EQ(plain.seen().size(), 9u);
}

}  // namespace
}  // namespace lmwarden::testing
