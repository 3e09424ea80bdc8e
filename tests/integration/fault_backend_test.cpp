// Backends that fail in every way a real one can, and what the client sees:
// a server killed mid-stream, one that never answers, one that goes silent
// mid-reply, one that answers garbage or hangs up, a /metrics that lies, a
// server that restarts, and every replica down at once. After each, the
// warden's in-flight count is back to exactly 0 and it keeps serving.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/read.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "bad_server.h"
#include "captured_log.h"
#include "fake_vllm.h"
#include "running_warden.h"
#include "scratch.h"
#include "sim_test_client.h"

namespace lmwarden::testing {
namespace {

using nlohmann::json;

// A warden configuration for fault tests: fast scrapes, quick to give up.
config::Config fault_config(const std::vector<std::pair<std::uint16_t, int>>& backends,
                            const std::string& timeouts = "  first_byte: 20s\n  idle: 20s\n") {
  return make_config(backends, std::nullopt, "scrape_interval: 100ms\nunhealthy_after: 2\n", "", timeouts);
}

std::string chat_body(bool stream, int max_tokens = 16) {
  return json{{"model", "m"},
              {"stream", stream},
              {"max_tokens", max_tokens},
              {"messages", {{{"role", "user"}, {"content", "Tell me a long story about routers."}}}}}
      .dump();
}

std::string messages_body(int max_tokens) {
  return json{{"model", "m"},
              {"stream", true},
              {"max_tokens", max_tokens},
              {"messages", {{{"role", "user"}, {"content", "Tell me a long story about caches."}}}}}
      .dump();
}

HttpReply chat(std::uint16_t port, const std::string& session) {
  return http_request(port, http::verb::post, "/v1/chat/completions", chat_body(false), {{"session-id", session}});
}

int card_in_flight(RunningWarden& warden) { return warden.card()["in_flight"].get<int>(); }

// lmwarden_upstream_errors_total of one replica and kind, from /metrics.
bool metrics_count_error(RunningWarden& warden, int replica, const std::string& kind) {
  const auto text = http_request(warden.port(), http::verb::get, "/metrics").body;
  return text.find("lmwarden_upstream_errors_total{model=\"m\",replica=\"" + std::to_string(replica) +
                   "\",kind=\"" + kind + "\"} 1") != std::string::npos;
}

TEST(FaultBackend, KilledMidStreamEndsTheStreamWithAnErrorEventInTheClientsDialect) {
  struct Case {
    const char* target;
    std::string body;
    const char* error_marker;  // how an error event starts in this dialect
  };
  const std::string responses_body = json{{"model", "m"},
                                          {"stream", true},
                                          {"max_output_tokens", 4000},
                                          {"input", "Tell me a long story about queues."}}
                                         .dump();
  for (const Case& c :
       {Case{"/v1/chat/completions", chat_body(true, 4000), "data: {\"error\""},
        Case{"/v1/messages", messages_body(4000), "event: error\ndata: {"},
        // As the Responses API ends a stream that failed: a client reads events by type.
        Case{"/v1/responses", responses_body,
             "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{"
             "\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\","
             "\"message\":\"upstream http://127.0.0.1:"}}) {
    SCOPED_TRACE(c.target);
    SimProcess sim{{"sim", "--listen", "127.0.0.1:0", "--dp", "1"}};
    RunningWarden warden{fault_config({{sim.port(), 1}})};
    HttpConnection client{warden.port()};
    client.send(http::verb::post, c.target, c.body, {{"session-id", "doomed"}});
    const auto header = client.read_header();
    ASSERT_EQ(header.status, 200u);
    std::string seen = client.read_until("\n\n");
    ASSERT_FALSE(seen.empty());
    ::kill(sim.pid(), SIGKILL);
    // The stream ends (the parser sees the final chunk) instead of hanging.
    while (auto piece = client.read_some()) seen += *piece;
    EXPECT_NE(seen.find(c.error_marker), std::string::npos) << seen.substr(seen.size() > 600 ? seen.size() - 600 : 0);
    EXPECT_NE(seen.find("failed mid-reply"), std::string::npos);
    EXPECT_TRUE(eventually([&] { return card_in_flight(warden) == 0; }));
  }
}

TEST(FaultBackend, ServerThatNeverAnswersGets504AfterTheFirstByteTimeout) {
  BadServer silent{BadServer::Behaviour::kNeverAccept};
  // Probed once a minute: with fault_config's probes (every 100 ms, out after
  // two failures) a slow start could take the server out of service before
  // the request is routed, and the request would get a 503 instead.
  RunningWarden warden{make_config({{silent.port(), 1}}, std::nullopt, "scrape_interval: 60s\n", "",
                                   "  first_byte: 300ms\n  idle: 20s\n")};
  const auto start = std::chrono::steady_clock::now();
  const auto r = chat(warden.port(), "patient");
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 504u) << r.body;
  EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find("first-byte timeout"), std::string::npos);
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::seconds(10));
  EXPECT_EQ(card_in_flight(warden), 0);
  EXPECT_TRUE(metrics_count_error(warden, 0, "first_byte_timeout"));
}

TEST(FaultBackend, ServerThatGoesSilentMidReplyHitsTheIdleTimeout) {
  FakeVllm fake{1};
  RunningWarden warden{fault_config({{fake.port(), 1}}, "  first_byte: 20s\n  idle: 300ms\n")};
  HttpConnection client{warden.port()};
  client.send(http::verb::post, "/v1/chat/completions", chat_body(true), {{"x-fake-hold", "1"}});
  ASSERT_EQ(client.read_header().status, 200u);
  std::string seen;
  while (auto piece = client.read_some()) seen += *piece;
  EXPECT_NE(seen.find("first"), std::string::npos);
  EXPECT_NE(seen.find("went silent mid-reply"), std::string::npos) << seen;
  EXPECT_NE(seen.find("\"code\":504"), std::string::npos) << "a timeout, as 504 says it: " << seen;
  EXPECT_TRUE(eventually([&] { return fake.aborted() == 1; })) << "the silent upstream request was not closed";
  EXPECT_EQ(card_in_flight(warden), 0);
  EXPECT_TRUE(metrics_count_error(warden, 0, "idle_timeout"));
  fake.release();
  EXPECT_EQ(chat(warden.port(), "after").status, 200u);
}

// Passive health: a server whose /health passes but whose every reply is a
// 500 is ejected after eject_after_5xx of them in a row, for eject_for; its
// requests meanwhile were retried on the good one, so clients saw no error.
// eject_for is long enough to outlast the checks made while it is out,
// however slow a busy machine makes them, so that the ejection cannot end
// before the last of them.
TEST(FaultBackend, AServerAnsweringOnly5xxIsEjectedThoughItsProbesPass) {
  FakeVllm good{1};
  FakeVllm bad{1};
  bad.fail_with(500);  // its /health and /metrics still answer
  RunningWarden warden{make_config({{good.port(), 1}, {bad.port(), 1}}, std::nullopt,
                                   "scrape_interval: 100ms\neject_after_5xx: 3\neject_for: 10s\n")};
  auto card_of_bad = [&] { return warden.card()["replicas"][1]; };
  int turns = 0;
  while (bad.seen().size() < 3 && turns < 40)
    EXPECT_EQ(chat(warden.port(), "c" + std::to_string(turns++)).status, 200u) << "retried on the good one";
  ASSERT_EQ(bad.seen().size(), 3u) << "new conversations went to the bad server until it was ejected";
  // The ejection follows the good reply of the third request's retry, which
  // may reach this client first.
  EXPECT_TRUE(eventually([&] { return card_of_bad()["ejected"] == true; }, std::chrono::seconds(2)))
      << card_of_bad().dump();
  EXPECT_EQ(card_of_bad()["healthy"], false);
  // The card says why, and since when.
  const json out = card_of_bad()["out_of_service"];
  EXPECT_EQ(out["cause"], "ejected") << out;
  EXPECT_EQ(out["reason"],
            "3 server errors (5xx) in a row, each then served by another replica; out for 10 s")
      << out;
  EXPECT_TRUE(out["since"].get<std::string>().ends_with("Z")) << out;
  EXPECT_TRUE(warden.card()["replicas"][0]["out_of_service"].is_null());
  // Each 5xx is on the bad replica's card, by kind, as /metrics counts it.
  EXPECT_EQ(card_of_bad()["upstream_errors"], json({{"status_5xx", 3}}));
  EXPECT_EQ(warden.card()["replicas"][0]["upstream_errors"], json::object());
  EXPECT_EQ(warden.card()["unassigned"]["upstream_errors"], json::object());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(chat(warden.port(), "after" + std::to_string(i)).status, 200u);
  EXPECT_EQ(bad.seen().size(), 3u) << "an ejected server took new work";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // three probe rounds
  EXPECT_EQ(card_of_bad()["healthy"], false) << "its passing probes brought it back early";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(chat(warden.port(), "probed" + std::to_string(i)).status, 200u);
  EXPECT_EQ(bad.seen().size(), 3u) << "it took new work after its probes passed";

  // Mended, and its time served: it takes new conversations again. The
  // ejection ends eject_for after it began (the first request after that
  // ends it), which was before this test saw it: within 10 s from here, 15 s
  // with a margin for a slow machine. A new conversation every 100 ms or so
  // meanwhile.
  bad.fail_with(0);
  int later = 0;
  EXPECT_TRUE(eventually(
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(90));
        EXPECT_EQ(chat(warden.port(), "back" + std::to_string(later++)).status, 200u);
        return bad.seen().size() > 3;
      },
      std::chrono::seconds(15)));
  EXPECT_EQ(card_of_bad()["ejected"], false);
  EXPECT_EQ(card_of_bad()["healthy"], true);
  EXPECT_TRUE(card_of_bad()["out_of_service"].is_null());
  EXPECT_EQ(card_in_flight(warden), 0);
}

// A request chained to a stored Responses response goes where it is stored,
// and nowhere else: another server would not find the response. When that
// server fails, its own reply is the answer, not a retry elsewhere.
TEST(FaultBackend, AChainedResponsesRequestIsNotRetriedElsewhere) {
  FakeVllm one{1};
  FakeVllm two{1};
  RunningWarden warden{make_config({{one.port(), 1}, {two.port(), 1}})};
  auto responses = [&](const std::string& body, const std::string& id) {
    return http_request(warden.port(), http::verb::post, "/v1/responses", body,
                        {{"x-fake-response-id", id}});
  };
  const auto first = responses(R"({"model":"m","input":"hi","stream":false})", "resp_1");
  ASSERT_EQ(first.status, 200u) << first.body;
  FakeVllm& stored = one.seen().size() == 1 ? one : two;
  FakeVllm& other = &stored == &one ? two : one;
  const std::string chained = R"({"model":"m","input":"more","previous_response_id":"resp_1"})";
  for (int turn = 0; turn < 3; ++turn) {  // each goes there, whichever is less loaded
    ASSERT_EQ(responses(chained, "resp_next").status, 200u);
    ASSERT_EQ(chat(warden.port(), "between" + std::to_string(turn)).status, 200u);
  }
  auto responses_seen = [](FakeVllm& fake) {
    return std::ranges::count(fake.seen(), std::string("/v1/responses"), &FakeVllm::Seen::path);
  };
  EXPECT_EQ(responses_seen(stored), 4);
  EXPECT_EQ(responses_seen(other), 0);
  stored.fail_with(500);
  const std::size_t seen_elsewhere = other.seen().size();
  const auto failed = responses(chained, "resp_never");
  EXPECT_EQ(failed.status, 500u) << failed.body;
  EXPECT_EQ(other.seen().size(), seen_elsewhere) << "retried where the response is not";
  // A request that continues no stored response is still retried.
  EXPECT_EQ(chat(warden.port(), "plain").status, 200u);
  EXPECT_EQ(warden.card()["stored_responses"], 2) << "resp_1 and resp_next";
  EXPECT_EQ(card_in_flight(warden), 0);
}

// A request that every replica answers with a 500 (a prompt the engines all
// refuse) is the request's fault, not theirs: it ejects nobody.
TEST(FaultBackend, ARequestEveryReplicaFailsEjectsNoReplica) {
  FakeVllm one{1};
  FakeVllm two{1};
  one.fail_with(500);
  two.fail_with(500);
  RunningWarden warden{make_config({{one.port(), 1}, {two.port(), 1}}, std::nullopt,
                                   "scrape_interval: 100ms\neject_after_5xx: 2\n")};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(chat(warden.port(), "bad" + std::to_string(i)).status, 500u);
  EXPECT_EQ(one.seen().size() + two.seen().size(), 12u) << "each request tried on both";
  for (int replica = 0; replica < 2; ++replica) {
    const json r = warden.card()["replicas"][replica];
    EXPECT_EQ(r["ejected"], false) << r.dump();
    EXPECT_EQ(r["healthy"], true) << r.dump();
  }
}

// One replica on a server that is no vLLM: probed once a minute, so that it
// stays in service for the test.
config::Config single_config(std::uint16_t port) {
  return make_config({{port, 1}}, std::nullopt, "scrape_interval: 60s\n");
}

TEST(FaultBackend, AReplyEndedByTheServersCloseIsRelayedWhole) {
  // HTTP/1.1 lets a reply with neither a length nor chunks end at the close.
  const std::string body =
      R"({"id":"r","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}})";
  BadServer server{
      BadServer::Behaviour::kReply,
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + body};
  RunningWarden warden{single_config(server.port())};
  const auto r = chat(warden.port(), "until-close");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, body);
  EXPECT_EQ(card_in_flight(warden), 0);
  EXPECT_EQ(chat(warden.port(), "again").body, body) << "the closed connection is not reused";
}

// Interim replies (RFC 9110 §15.2) are not the reply: the final one after
// them is relayed, and only it. An endless run of them is a bad reply.
TEST(FaultBackend, InterimRepliesAreDroppedAndTheFinalOneRelayed) {
  const std::string body = R"({"id":"r","object":"chat.completion","choices":[]})";
  BadServer server{BadServer::Behaviour::kReply,
                   "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>; "
                   "rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                   "Content-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body};
  RunningWarden warden{single_config(server.port())};
  const auto r = chat(warden.port(), "interim");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, body);
  EXPECT_EQ(r.headers.count("link"), 0u) << "a header of the interim reply";

  std::string endless;
  for (int i = 0; i < 9; ++i) endless += "HTTP/1.1 100 Continue\r\n\r\n";
  endless += "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  BadServer chatty{BadServer::Behaviour::kReply, endless};
  RunningWarden other{single_config(chatty.port())};
  const auto bad = chat(other.port(), "endless");
  EXPECT_EQ(bad.status, 502u) << bad.body;
  EXPECT_NE(bad.body.find("bad reply from"), std::string::npos) << bad.body;
  EXPECT_EQ(card_in_flight(other), 0);
}

// The server's reset comes right behind its last bytes, while the relay's
// read waits, so that epoll reports both at once: the client still learns
// of the failure within a second or so, not when the idle timeout (20 s
// here) runs out.
TEST(FaultBackend, AResetRightAfterTheLastBytesEndsTheStreamAtOnce) {
  const std::string event = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
  const std::string chunk = "2f\r\n" + event + "\r\n";
  ASSERT_EQ(event.size(), 0x2fU);
  BadServer server{BadServer::Behaviour::kReplyThenReset,
                   "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n" + chunk,
                   chunk};
  RunningWarden warden{fault_config({{server.port(), 1}})};
  HttpConnection client{warden.port()};
  const auto start = std::chrono::steady_clock::now();
  client.send(http::verb::post, "/v1/chat/completions", chat_body(true), {{"session-id", "reset"}});
  ASSERT_EQ(client.read_header().status, 200u);
  std::string seen;
  while (auto piece = client.read_some()) seen += *piece;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  const auto first = seen.find(event);
  ASSERT_NE(first, std::string::npos) << seen;
  EXPECT_NE(seen.find(event, first + 1), std::string::npos) << "the last bytes were lost:\n" << seen;
  EXPECT_NE(seen.find("failed mid-reply"), std::string::npos) << seen;
  EXPECT_TRUE(eventually([&] { return card_in_flight(warden) == 0; }));
  EXPECT_TRUE(metrics_count_error(warden, 0, "reset"));
}

// A server may answer before it has read the whole request, and close: an
// nginx in front of vLLM refusing a body over its client_max_body_size does.
// Its close with the body unread resets the connection while the warden is
// still sending; the answer, which came before the reset, is the reply.
TEST(FaultBackend, AnAnswerSentBeforeTheWholeBodyWasReadIsRelayed) {
  const std::string page = "<html><body>413 Request Entity Too Large</body></html>";
  BadServer server{BadServer::Behaviour::kReply,
                   "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: text/html\r\n"
                   "Content-Length: " +
                       std::to_string(page.size()) + "\r\nConnection: close\r\n\r\n" + page};
  auto cfg = single_config(server.port());
  cfg.limits.max_body_bytes = 32 << 20;
  RunningWarden warden{std::move(cfg)};
  // Far more than the socket buffers hold, so the reset meets the send.
  const std::string body =
      json{{"model", "m"},
           {"messages", {{{"role", "user"}, {"content", std::string(24 << 20, 'x')}}}}}
          .dump();
  const auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions", body,
                              {{"session-id", "early-answer"}});
  EXPECT_EQ(r.status, 413u) << r.body;
  EXPECT_EQ(r.body, page);
  EXPECT_EQ(server.accepted(), 1) << "an answer is not a failure to retry";
  EXPECT_TRUE(eventually([&] { return card_in_flight(warden) == 0; }));
  EXPECT_FALSE(metrics_count_error(warden, 0, "reset"));
}

TEST(FaultBackend, AReplyShorterThanItsLengthIsCutShortAndCounted) {
  BadServer server{
      BadServer::Behaviour::kReply,
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
      "{\"choices\":"};
  RunningWarden warden{single_config(server.port())};
  HttpConnection client{warden.port()};
  client.send(http::verb::post, "/v1/chat/completions", chat_body(false),
              {{"session-id", "short"}});
  // The head has gone with its length, so the client learns of the failure
  // as a body that ends early: the connection closes after what came.
  std::string seen;
  beast::error_code ec;
  asio::read(client.socket(), asio::dynamic_buffer(seen), ec);
  EXPECT_EQ(ec, asio::error::eof) << ec.message();
  ASSERT_NE(seen.find("\r\n\r\n"), std::string::npos) << seen;
  EXPECT_EQ(seen.substr(seen.find("\r\n\r\n") + 4), "{\"choices\":");
  EXPECT_NE(seen.find("Content-Length: 100"), std::string::npos) << seen;
  EXPECT_TRUE(eventually([&] { return card_in_flight(warden) == 0; }));
  EXPECT_TRUE(metrics_count_error(warden, 0, "reset"));
}

TEST(FaultBackend, APooledConnectionTheServerClosedIsReplacedWithoutAnError) {
  // The reply keeps the connection alive, as far as its header says, and the
  // server closes it anyway (as one does when its keep-alive timeout
  // passes). The warden's next request on that pooled connection finds the
  // close before any reply byte and goes again on a fresh connection.
  const std::string body = R"({"id":"r","object":"chat.completion","choices":[]})";
  BadServer server{BadServer::Behaviour::kReply,
                   "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body};
  RunningWarden warden{single_config(server.port())};
  for (int i = 0; i < 3; ++i) {
    const auto r = chat(warden.port(), "pooled");
    ASSERT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(r.body, body);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the close reaches the pool
  }
  EXPECT_FALSE(metrics_count_error(warden, 0, "reset"));
  EXPECT_FALSE(metrics_count_error(warden, 0, "protocol"));
  EXPECT_EQ(card_in_flight(warden), 0);
}

// A server that had the request on a pooled connection for a while and then
// closed it without a reply may have worked on it: the request is not sent
// to it again on a fresh connection (only a close that comes at once, as an
// idle connection's does, is taken for that), and the client hears of the
// failure, since `retries` finds no other replica here.
TEST(FaultBackend, ARequestAPooledConnectionHeldAndThenClosedIsNotSentAgain) {
  const std::string body = R"({"id":"r","object":"chat.completion","choices":[]})";
  BadServer server{BadServer::Behaviour::kHoldTheSecondThenClose,
                   "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body};
  // One I/O thread, whose pool keeps the connection for the second request.
  RunningWarden warden{
      make_config({{server.port(), 1}}, std::nullopt, "threads: 1\nscrape_interval: 60s\n")};
  ASSERT_EQ(chat(warden.port(), "held").status, 200u);
  const auto r = chat(warden.port(), "held");
  EXPECT_EQ(r.status, 502u) << r.body;
  EXPECT_NE(r.body.find("closed the connection without a reply"), std::string::npos) << r.body;
  EXPECT_EQ(server.requests(), 2) << "the held request was sent again";
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_TRUE(metrics_count_error(warden, 0, "protocol"));
  EXPECT_EQ(card_in_flight(warden), 0);
}

TEST(FaultBackend, GarbageOrAHangUpBeforeAnyByteIsRetriedOnTheOtherReplica) {
  for (auto behaviour : {BadServer::Behaviour::kGarbage, BadServer::Behaviour::kCloseAtOnce}) {
    SCOPED_TRACE(behaviour == BadServer::Behaviour::kGarbage ? "garbage" : "close at once");
    BadServer bad{behaviour};
    FakeVllm good{1};
    RunningWarden warden{fault_config({{bad.port(), 1}, {good.port(), 1}})};
    for (int i = 0; i < 4; ++i) {
      const auto r = chat(warden.port(), "conv-" + std::to_string(i));
      ASSERT_EQ(r.status, 200u) << r.body;
    }
    EXPECT_EQ(good.seen().size(), 4u);
    EXPECT_GE(bad.accepted(), 1) << "the bad server should have been tried";
    EXPECT_EQ(card_in_flight(warden), 0);
  }
}

TEST(FaultBackend, EveryReplicaAnsweringGarbageIs502) {
  BadServer a{BadServer::Behaviour::kGarbage};
  BadServer b{BadServer::Behaviour::kCloseAtOnce};
  RunningWarden warden{fault_config({{a.port(), 1}, {b.port(), 1}})};
  const auto r = chat(warden.port(), "unlucky");
  EXPECT_EQ(r.status, 502u) << r.body;
  EXPECT_TRUE(json::parse(r.body)["error"].contains("message"));
  EXPECT_EQ(a.accepted() + b.accepted() >= 2, true);
  EXPECT_EQ(card_in_flight(warden), 0);
}

TEST(FaultBackend, GarbageMetricsTakeTheServerOutUntilTheyAreRightAgain) {
  FakeVllm fake{2};
  fake.set_engine(0, 0, 0, 0.1, 10, 5);
  fake.set_engine(1, 0, 0, 0.1, 10, 5);
  RunningWarden warden{fault_config({{fake.port(), 2}}), /*scrape=*/true};
  ASSERT_TRUE(eventually([&] { return !warden.card()["replicas"][0]["kv_used"].is_null(); }));
  ASSERT_EQ(chat(warden.port(), "before").status, 200u);
  fake.garbage_metrics(true);
  EXPECT_TRUE(eventually([&] { return warden.card()["replicas"][0]["healthy"] == false; }));
  const json out = warden.card();
  for (const json& replica : out["replicas"]) {  // both ranks of the server
    EXPECT_EQ(replica["out_of_service"]["cause"], "unhealthy") << replica;
    EXPECT_EQ(replica["out_of_service"]["reason"],
              "2 failed probes in a row: /metrics has no vLLM samples")
        << replica;
  }
  const auto down = chat(warden.port(), "during");
  EXPECT_EQ(down.status, 503u) << down.body;
  fake.garbage_metrics(false);
  EXPECT_TRUE(eventually([&] { return warden.card()["replicas"][0]["healthy"] == true; }));
  EXPECT_EQ(chat(warden.port(), "after").status, 200u);
  EXPECT_EQ(card_in_flight(warden), 0);
}

// A server whose /metrics serves two models: this model's replicas carry its
// own requests, not both models' (they were summed before).
TEST(FaultBackend, AServerOfTwoModelsLoadsEachWithItsOwnRequests) {
  FakeVllm fake{2};
  fake.set_engine(0, 3, 0, 0.1, 10, 5);
  fake.set_engine(1, 1, 0, 0.1, 10, 5);
  fake.serve_other_model("other", 5);
  RunningWarden warden{fault_config({{fake.port(), 2}}), /*scrape=*/true};
  ASSERT_TRUE(eventually([&] { return !warden.card()["replicas"][0]["running"].is_null(); }));
  const json card = warden.card();
  EXPECT_EQ(card["replicas"][0]["running"], 3) << card;
  EXPECT_EQ(card["replicas"][1]["running"], 1) << card;
}

// A server whose /v1/models does not list the model's names refuses every
// request for them (404) while its probes pass: said once, with what it
// lists, and read again after it failed a round (a restart, which may
// change its names).
TEST(FaultBackend, AServerThatDoesNotListTheModelsNamesIsNamedWithWhatItLists) {
  FakeVllm fake{1};
  fake.set_engine(0, 0, 0, 0, 0, 0);
  fake.list_models({"Qwen/Qwen3-8B"});
  CapturedLog log;
  RunningWarden warden{fault_config({{fake.port(), 1}}), /*scrape=*/true};
  const std::string line =
      "model=m backend=http://127.0.0.1:" + std::to_string(fake.port()) +
      ": its /v1/models lists Qwen/Qwen3-8B and not m, m-alias; vLLM refuses a "
      "request that names a model it does not list (404): set the model's "
      "name to the one vLLM serves, or add it to the server's "
      "--served-model-name";
  ASSERT_TRUE(eventually([&] { return log.containing(line).size() == 1; }))
      << fake.models_asked() << " asked; "
      << fmt::format("{}", fmt::join(log.containing("model=m"), "\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // five good rounds
  EXPECT_EQ(log.containing("/v1/models").size(), 1u);
  EXPECT_EQ(fake.models_asked(), 1);

  fake.list_models({"m", "m-alias"});
  fake.set_healthy(false);
  ASSERT_TRUE(eventually([&] { return warden.card()["replicas"][0]["healthy"] == false; }));
  fake.set_healthy(true);
  EXPECT_TRUE(eventually([&] {
    return log.containing("its /v1/models now lists the model's name and aliases").size() == 1;
  }));
  EXPECT_EQ(fake.models_asked(), 2);
}

TEST(FaultBackend, AServerThatRefusesConnectionsHasNoRankTriedAgain) {
  // Two ranks behind one address, and a server of one rank. With the first
  // server gone, a request routed to either of its ranks is retried on the
  // other server, not on the rank beside it (which refuses just the same).
  // No scraper here: nothing else knows the server is gone.
  auto gone = std::make_unique<FakeVllm>(2);
  FakeVllm good{1};
  RunningWarden warden{fault_config({{gone->port(), 2}, {good.port(), 1}})};
  gone.reset();
  for (int i = 0; i < 6; ++i) {
    const auto r = chat(warden.port(), "conv-" + std::to_string(i));
    ASSERT_EQ(r.status, 200u) << "conversation " << i << ": " << r.body;
  }
  EXPECT_EQ(good.seen().size(), 6u);
  EXPECT_EQ(card_in_flight(warden), 0);
}

TEST(FaultBackend, AServerThatRefusesAConnectionTakesNoNewWorkUntilAProbeSucceeds) {
  // Probes a minute apart: the scraper cannot be what takes the server out.
  auto gone = std::make_unique<FakeVllm>(1);
  FakeVllm good{1};
  gone->set_engine(0, 0, 0, 0.5, 0, 0);
  good.set_engine(0, 0, 0, 0.5, 0, 0);
  RunningWarden warden{make_config({{gone->port(), 1}, {good.port(), 1}}, std::nullopt,
                                   "scrape_interval: 60s\nunhealthy_after: 2\n"),
                       /*scrape=*/true};
  ASSERT_TRUE(eventually([&] {  // the first probes read both engines
    const json c = warden.card();
    return !c["replicas"][0]["kv_used"].is_null() && !c["replicas"][1]["kv_used"].is_null();
  }));
  gone.reset();
  for (int i = 0; i < 8; ++i) {
    const auto r = chat(warden.port(), "conv-" + std::to_string(i));
    ASSERT_EQ(r.status, 200u) << "conversation " << i << ": " << r.body;
  }
  // New conversations spread over both replicas until one was refused; from
  // then on the server is out, so exactly one connect failed.
  EXPECT_TRUE(metrics_count_error(warden, 0, "connect"))
      << http_request(warden.port(), http::verb::get, "/metrics").body;
  const json card = warden.card();
  EXPECT_EQ(card["replicas"][0]["healthy"], false);
  EXPECT_EQ(card["replicas"][0]["out_of_service"]["cause"], "unhealthy") << card;
  const std::string reason = card["replicas"][0]["out_of_service"]["reason"].get<std::string>();
  EXPECT_NE(reason.find("Connection refused"), std::string::npos) << reason;
  EXPECT_EQ(card["replicas"][1]["healthy"], true);
  EXPECT_TRUE(card["replicas"][1]["out_of_service"].is_null()) << card;
  EXPECT_EQ(good.seen().size(), 8u);
  EXPECT_EQ(card["in_flight"], 0);
  // The dead engine's last figures are gone with it, not shown as current.
  EXPECT_TRUE(card["replicas"][0]["kv_used"].is_null()) << card;
  EXPECT_EQ(card["replicas"][1]["kv_used"], 0.5) << card;
  const std::string metrics = http_request(warden.port(), http::verb::get, "/metrics").body;
  EXPECT_EQ(metrics.find("lmwarden_replica_kv_cache_usage{model=\"m\",replica=\"0\"}"),
            std::string::npos);
  EXPECT_NE(metrics.find("lmwarden_replica_kv_cache_usage{model=\"m\",replica=\"1\"}"),
            std::string::npos);
}

// A reload that moves the replicas (a server added at the front: their
// counters start again) keeps why each is out, as it keeps their health: the
// ejection of one, by replica, and the refused connection of another, by
// server. Probes a minute apart: none brings either back meanwhile.
TEST(FaultBackend, AReloadThatMovesTheReplicasKeepsWhyEachIsOut) {
  FakeVllm bad{1};
  bad.fail_with(500);
  auto gone = std::make_unique<FakeVllm>(1);
  const std::uint16_t gone_port = gone->port();
  FakeVllm good{1};
  const std::string top = "retries: 2\nscrape_interval: 60s\neject_after_5xx: 3\neject_for: 60s\n";
  RunningWarden warden{
      make_config({{bad.port(), 1}, {gone_port, 1}, {good.port(), 1}}, std::nullopt, top),
      /*scrape=*/true};
  gone.reset();
  int turns = 0;
  auto out = [&](const json& card, int i) { return card["replicas"][i]["out_of_service"]; };
  while ((out(warden.card(), 0).is_null() || out(warden.card(), 1).is_null()) && turns < 40)
    ASSERT_EQ(chat(warden.port(), "c" + std::to_string(turns++)).status, 200u);
  const json before = warden.card();
  ASSERT_EQ(out(before, 0)["cause"], "ejected") << before;
  ASSERT_EQ(out(before, 1)["cause"], "unhealthy") << before;

  FakeVllm added{1};
  warden.reload(make_config({{added.port(), 1}, {bad.port(), 1}, {gone_port, 1}, {good.port(), 1}},
                            std::nullopt, top));
  const json after = warden.card();
  EXPECT_EQ(after["replicas"][1]["url"], before["replicas"][0]["url"]) << after;
  ASSERT_GT(before["replicas"][0]["new"], 0) << before;
  EXPECT_EQ(after["replicas"][1]["new"], 0) << "its counters should have started again: " << after;
  EXPECT_EQ(out(after, 1), out(before, 0)) << after;
  EXPECT_EQ(out(after, 2), out(before, 1)) << after;
  EXPECT_TRUE(out(after, 0).is_null() && out(after, 3).is_null()) << after;
}

TEST(FaultBackend, AllReplicasDownIs503ThenARestartedServerIsRebaselined) {
  auto sim = std::make_unique<SimProcess>(std::vector<std::string>{"sim", "--listen", "127.0.0.1:0", "--dp", "2"});
  const std::uint16_t port = sim->port();
  RunningWarden warden{fault_config({{port, 2}}), /*scrape=*/true};
  // Two turns of one conversation: the second reads its prefix from the cache.
  ASSERT_EQ(chat(warden.port(), "survivor").status, 200u);
  ASSERT_EQ(chat(warden.port(), "survivor").status, 200u);
  auto hit_rates_known = [&] {
    const json card = warden.card();
    for (const auto& r : card["replicas"])
      if (!r["prefix_hit_rate"].is_null()) return true;
    return false;
  };
  ASSERT_TRUE(eventually(hit_rates_known));

  ::kill(sim->pid(), SIGKILL);
  sim.reset();
  EXPECT_TRUE(eventually([&] { return chat(warden.port(), "meanwhile").status == 503u; }))
      << "with the only server down, requests should get 503 at once";
  EXPECT_EQ(card_in_flight(warden), 0);

  // The server comes back on the same port with its counters at zero.
  sim = std::make_unique<SimProcess>(
      std::vector<std::string>{"sim", "--listen", "127.0.0.1:" + std::to_string(port), "--dp", "2"});
  EXPECT_TRUE(eventually([&] { return chat(warden.port(), "survivor").status == 200u; }))
      << "the warden should take the server back without a restart";
  ASSERT_EQ(chat(warden.port(), "survivor").status, 200u);
  // Scrapes after the restart: hit rates stay rates (no negative deltas from
  // the counters going back to zero).
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const json card = warden.card();
  for (const auto& r : card["replicas"]) {
    if (r["prefix_hit_rate"].is_null()) continue;
    EXPECT_GE(r["prefix_hit_rate"].get<double>(), 0.0);
    EXPECT_LE(r["prefix_hit_rate"].get<double>(), 1.0);
  }
  EXPECT_TRUE(hit_rates_known());
  EXPECT_EQ(card["in_flight"], 0);
}

}  // namespace
}  // namespace lmwarden::testing
