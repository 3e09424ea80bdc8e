// Telemetry over real sockets: usage accounting on relayed replies, injected
// stream usage, the warden's /metrics and /api/stats, scraping and health,
// and the run-time control and client-key guards.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "captured_log.h"
#include "fake_vllm.h"
#include "metric_probe.h"
#include "proxy/model_telemetry.h"
#include "running_warden.h"
#include "telemetry/prometheus.h"
#include "telemetry/warden_metrics.h"

namespace lmwarden::testing {
namespace {

using nlohmann::json;

std::string stream_body(bool include_usage) {
  json j = {{"model", "m"}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  if (include_usage) j["stream_options"] = {{"include_usage", true}};
  return j.dump();
}

TEST(ProxyTelemetry, StreamedUsageIsBookedAsCachedAndComputed) {
  FakeVllm fake{2};
  RunningWarden warden{make_config({{fake.port(), 2}})};
  auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(true), {{"session-id", "u1"}});
  ASSERT_EQ(r.status, 200u);
  EXPECT_NE(r.body.find("\"usage\""), std::string::npos) << "the client asked for usage and must get it";
  const std::string replica = std::to_string(fake.seen().back().rank);
  EXPECT_EQ(metric(warden.port(), "lmwarden_prompt_tokens_total", {{"replica", replica}, {"source", "cached"}}), 64);
  EXPECT_EQ(metric(warden.port(), "lmwarden_prompt_tokens_total", {{"replica", replica}, {"source", "computed"}}), 36);
  EXPECT_EQ(metric(warden.port(), "lmwarden_completion_tokens_total", {{"replica", replica}}), 2);
  EXPECT_EQ(metric(warden.port(), "lmwarden_time_to_first_byte_seconds_count", {{"model", "m"}}), 1);
}

// A stream that ends early (here its client leaves) books the usage it had
// carried: an Anthropic stream's message_start gives the prompt's.
TEST(ProxyTelemetry, AStreamWhoseClientLeftBooksTheUsageItCarried) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  HttpConnection client{warden.port()};
  client.send(http::verb::post, "/v1/messages",
              R"({"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]})",
              {{"x-fake-hold", "1"}, {"x-fake-start-usage", "1"}});
  ASSERT_EQ(client.read_header().status, 200u);
  EXPECT_NE(client.read_until("message_start").find("cache_read_input_tokens"), std::string::npos);
  client.close();
  EXPECT_TRUE(eventually([&] { return fake.aborted() == 1; }));
  EXPECT_TRUE(eventually([&] {
    return metric(warden.port(), "lmwarden_prompt_tokens_total", {{"source", "cached"}}) == 64;
  }));
  EXPECT_EQ(metric(warden.port(), "lmwarden_prompt_tokens_total", {{"source", "computed"}}), 36);
  EXPECT_EQ(metric(warden.port(), "lmwarden_unmeasured_requests_total", {}), 0);
}

// A stream that asked for no usage (and inject_stream_usage off) adds no
// tokens, and is counted as unmeasured.
TEST(ProxyTelemetry, AStreamWithoutUsageIsCountedAsUnmeasured) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(false)).status, 200u);
  EXPECT_TRUE(eventually([&] { return metric(warden.port(), "lmwarden_unmeasured_requests_total", {}) == 1; }));
  EXPECT_EQ(metric(warden.port(), "lmwarden_prompt_tokens_total", {}), 0);
  // One its client leaves before its end is no whole reply that lacked usage.
  CapturedLog log;
  {
    HttpConnection client{warden.port()};
    client.send(http::verb::post, "/v1/chat/completions", stream_body(false),
                {{"x-fake-hold", "1"}});
    ASSERT_EQ(client.read_header().status, 200u);
    client.read_until("\n\n");
  }
  EXPECT_TRUE(eventually([&] { return fake.aborted() == 1; }));
  EXPECT_TRUE(eventually([&] { return warden.card()["in_flight"] == 0; }));
  EXPECT_EQ(metric(warden.port(), "lmwarden_unmeasured_requests_total", {}), 1);
  EXPECT_EQ(log.containing("client went away; upstream request closed").size(), 1u);
  // Left while its reply was being written (a long stream it stopped
  // reading): said the same.
  {
    HttpConnection client{warden.port()};
    client.send(http::verb::post, "/v1/chat/completions", stream_body(false),
                {{"x-fake-events", "20000"}});
    ASSERT_EQ(client.read_header().status, 200u);
    client.read_until("bulk 1 ");
  }
  EXPECT_TRUE(eventually([&] { return warden.card()["in_flight"] == 0; }));
  EXPECT_EQ(log.containing("client went away; upstream request closed").size(), 2u);
  EXPECT_EQ(metric(warden.port(), "lmwarden_unmeasured_requests_total", {}), 1);
}

// Routes that only count tokens have no usage to chart: their replies are
// not "unmeasured", which would say the chart misses traffic.
TEST(ProxyTelemetry, RepliesOfRoutesThatOnlyCountAreNotUnmeasured) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  for (const std::string path : {"/v1/messages/count_tokens", "/tokenize", "/detokenize"})
    ASSERT_EQ(http_request(warden.port(), http::verb::post, path, stream_body(false)).status, 200u);
  // A chat reply without usage after them: counted, so the three were looked at.
  ASSERT_EQ(
      http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(false))
          .status,
      200u);
  EXPECT_TRUE(eventually(
      [&] { return metric(warden.port(), "lmwarden_unmeasured_requests_total", {}) >= 1; }));
  EXPECT_EQ(metric(warden.port(), "lmwarden_unmeasured_requests_total", {}), 1);
  EXPECT_EQ(fake.seen().size(), 4u);
}

TEST(ProxyTelemetry, NonStreamedUsageIsBookedToo) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  const json body = {{"model", "m"}, {"stream", false}, {"messages", json::array()}};
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", body.dump()).status, 200u);
  EXPECT_EQ(metric(warden.port(), "lmwarden_prompt_tokens_total", {{"source", "cached"}}), 64);
}

TEST(ProxyTelemetry, InjectedStreamUsageIsMeasuredAndInvisibleToTheClient) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}}, std::nullopt, "", "    inject_stream_usage: true\n")};
  auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(false));
  ASSERT_EQ(r.status, 200u);
  EXPECT_NE(fake.seen().back().body.find("\"include_usage\":true"), std::string::npos) << "upstream was not asked";
  EXPECT_EQ(r.body.find("usage"), std::string::npos) << "the client must not see the injected chunk:\n" << r.body;
  EXPECT_NE(r.body.find("[DONE]"), std::string::npos);
  EXPECT_EQ(metric(warden.port(), "lmwarden_prompt_tokens_total", {{"source", "cached"}}), 64);
}

// Usage is asked for only in a body that has no stream_options (a second
// key would be a duplicate, the client's winning in vLLM), and never in a
// /v1/responses request (which has none and reports usage on its own).
TEST(ProxyTelemetry, StreamUsageIsInjectedOnlyWhereTheBodyHasNoStreamOptions) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}}, std::nullopt, "", "    inject_stream_usage: true\n")};
  const std::string with_options =
      R"({"model":"m","stream":true,"stream_options":{"continuous_usage_stats":true},"messages":[]})";
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", with_options).status, 200u);
  EXPECT_EQ(fake.seen().back().body, with_options);
  const std::string responses = R"({"model":"m","stream":true,"input":"hi"})";
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/responses", responses).status, 200u);
  EXPECT_EQ(fake.seen().back().body, responses);
}

TEST(ProxyTelemetry, MetricsExposeEveryDocumentedName) {
  FakeVllm fake{2};
  RunningWarden warden{make_config({{fake.port(), 2}})};
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(true)).status, 200u);
  const auto reply = http_request(warden.port(), http::verb::get, "/metrics");
  EXPECT_EQ(reply.status, 200u);
  EXPECT_TRUE(reply.header("content-type").starts_with("text/plain"));
  const auto parsed = telemetry::parse_exposition(reply.body);
  EXPECT_EQ(parsed.skipped_lines, 0u);
  for (const auto& spec : telemetry::kWardenMetrics) {
    const auto* family = parsed.family(spec.name);
    ASSERT_NE(family, nullptr) << spec.name << " missing from /metrics";
    EXPECT_EQ(family->type, spec.type) << spec.name;
  }
}

TEST(ProxyTelemetry, StatsShowCachedAndComputedTokenRates) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(true)).status, 200u);
  const json stats = json::parse(http_request(warden.port(), http::verb::get, "/api/stats?model=m&window=900").body);
  EXPECT_EQ(stats["model"], "m");
  EXPECT_EQ(stats["totals"]["prompt_cached"], 192);
  EXPECT_EQ(stats["totals"]["prompt_computed"], 108);
  EXPECT_NEAR(stats["cache_hit_ratio"].get<double>(), 0.64, 1e-9);
  EXPECT_EQ(stats["series"]["t"].size(), stats["series"]["prompt_cached"].size());
  double cached_sum = 0;
  for (const auto& v : stats["series"]["prompt_cached"]) cached_sum += v.get<double>();
  EXPECT_EQ(cached_sum, 192);  // 1 s buckets: rate × 1 s = tokens
  EXPECT_EQ(http_request(warden.port(), http::verb::get, "/api/stats?model=nope").status, 404u);
}

json stats(std::uint16_t port) {
  return json::parse(http_request(port, http::verb::get, "/api/stats?model=m&window=900").body);
}

// Replies whose usage never says how many prompt tokens came from the cache
// (vLLM without --enable-prompt-tokens-details): every prompt token counts as
// computed, so from the 20th such reply the stats name the model, and the log
// says why, once.
// The warden's log lines, kept while it lives.

// A client asking for a model no one serves is refused (404) and counted
// without a name; the log names it, with the names that are served, once
// per name and for the first 32 names only.
TEST(ProxyTelemetry, AModelNoOneServesIsLoggedOnceByName) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  CapturedLog log;
  const auto ask = [&](const std::string& model) {
    const json body = {{"model", model}, {"messages", json::array()}};
    EXPECT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", body.dump(),
                           {{"User-Agent", "claude-cli/2.1.332 (external, cli)"}})
                  .status,
              404u);
  };
  ask("claude-opus-4");
  ask("claude-opus-4");
  const auto named = log.containing("a client asked for model");
  ASSERT_EQ(named.size(), 1u);
  EXPECT_NE(
      named[0].find("[warning] a client asked for model \"claude-opus-4\", which is not "
                    "served here (on /v1/chat/completions, user agent \"claude-cli/2.1.332 "
                    "(external, cli)\"); served: m (also m-alias). To serve it, list it under "
                    "a model's aliases"),
      std::string::npos)
      << named[0];
  // Names are the client's to make up: past 32 of them, nothing more.
  for (int i = 0; i < 40; ++i) ask("made-up-" + std::to_string(i));
  const auto all = log.containing("a client asked for model");
  ASSERT_EQ(all.size(), 32u);
  EXPECT_NE(all.back().find("\"made-up-30\""), std::string::npos) << all.back();
  EXPECT_NE(all.back().find("only the first 32: no more are logged"), std::string::npos)
      << all.back();
  EXPECT_TRUE(fake.seen().empty());
}

constexpr std::string_view kCachedCountFlag = "--enable-prompt-tokens-details";

void ask_unstreamed(std::uint16_t port, bool cached_count, const std::string& session = "") {
  const json body = {{"model", "m"}, {"stream", false}, {"messages", json::array()}};
  std::vector<std::pair<std::string, std::string>> headers;
  if (!cached_count) headers.emplace_back("x-fake-no-cached-count", "1");
  if (!session.empty()) headers.emplace_back("session-id", session);
  ASSERT_EQ(
      http_request(port, http::verb::post, "/v1/chat/completions", body.dump(), headers).status,
      200u);
}

std::string server_url(const FakeVllm& fake) {
  return "http://127.0.0.1:" + std::to_string(fake.port());
}

// The stats name `fake`'s server of model "m", and the log has said so once.
void expect_named_once(std::uint16_t port, const CapturedLog& log, const FakeVllm& fake) {
  const json s = stats(port);
  EXPECT_EQ(s["cached_count_missing"], json::array({"m"}));
  EXPECT_EQ(s["cached_count_missing_servers"],
            json::array({{{"model", "m"}, {"url", server_url(fake)}}}));
  const auto warnings = log.containing(kCachedCountFlag);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("model=m server=" + server_url(fake) + ": 20 replies"),
            std::string::npos)
      << warnings[0];
}

TEST(ProxyTelemetry, RepliesThatNeverSayWhatWasCachedAreReportedFromTheTwentieth) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  CapturedLog log;
  for (int i = 0; i < 19; ++i) ask_unstreamed(warden.port(), false);
  EXPECT_EQ(stats(warden.port())["cached_count_missing"], json::array());
  EXPECT_TRUE(log.containing(kCachedCountFlag).empty());
  ask_unstreamed(warden.port(), false);
  expect_named_once(warden.port(), log, fake);
  for (int i = 0; i < 5; ++i) ask_unstreamed(warden.port(), false);
  EXPECT_EQ(log.containing(kCachedCountFlag).size(), 1u) << "said once";
  EXPECT_EQ(metric(warden.port(), "lmwarden_prompt_tokens_total", {{"source", "computed"}}), 2500);

  ask_unstreamed(warden.port(), true);  // one reply that says is enough: the engine does report it
  EXPECT_EQ(stats(warden.port())["cached_count_missing"], json::array());
  EXPECT_EQ(stats(warden.port())["cached_count_missing_servers"], json::array());
}

// vLLM's embedding replies carry prompt_tokens alone, whatever the flag: they
// are charted as computed but say nothing about how the server was started.
TEST(ProxyTelemetry, EmbeddingRepliesAreNoSignOfAServerStartedWithoutTheFlag) {
  FakeVllm fake{1};
  fake.omit_cached_count(true);
  RunningWarden warden{make_config({{fake.port(), 1}})};
  CapturedLog log;
  // ("stream": false: the fake answers in JSON only to a body that says so.)
  const json body = {{"model", "m"}, {"input", "a line to embed"}, {"stream", false}};
  for (int i = 0; i < 25; ++i)
    ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/embeddings", body.dump()).status,
              200u);
  EXPECT_EQ(stats(warden.port())["cached_count_missing_servers"], json::array());
  EXPECT_TRUE(log.containing(kCachedCountFlag).empty());
  EXPECT_EQ(metric(warden.port(), "lmwarden_prompt_tokens_total", {{"source", "computed"}}), 2500)
      << "their prompts are still charted";
  for (std::uint64_t i = 0; i < proxy::CachedCountCheck::kExpectedWithin; ++i)
    ask_unstreamed(warden.port(), false);
  expect_named_once(warden.port(), log, fake);
}

// The flag is a server's: one started without it among servers with it is
// named, though the model's other replies all give a count.
TEST(ProxyTelemetry, TheServerWhoseRepliesNeverSayWhatWasCachedIsNamedAmongOthersThatDo) {
  FakeVllm bare{1}, counting{1};
  bare.omit_cached_count(true);
  RunningWarden warden{make_config({{bare.port(), 1}, {counting.port(), 1}})};
  CapturedLog log;
  // New conversations go to either server, by load; enough of them reach the bare one.
  int sent = 0;
  while (bare.seen().size() < proxy::CachedCountCheck::kExpectedWithin && sent < 400)
    ask_unstreamed(warden.port(), true, "conversation-" + std::to_string(sent++));
  ASSERT_EQ(bare.seen().size(), proxy::CachedCountCheck::kExpectedWithin);
  ASSERT_GT(counting.seen().size(), 0u) << "both servers answered";
  expect_named_once(warden.port(), log, bare);
  EXPECT_GT(metric(warden.port(), "lmwarden_prompt_tokens_total", {{"source", "cached"}}), 0)
      << "the other server's";
}

// A missing count is also what the flag gives when nothing came from the
// cache: while the engine's own counters say so, the server is not named.
TEST(ProxyTelemetry, AServerWhoseEngineCachedNothingIsNotNamedUntilItsCountersShowAHit) {
  FakeVllm fake{1};
  fake.omit_cached_count(true);
  fake.set_engine(0, 0, 0, 0.1, 100, 0);
  RunningWarden warden{make_config({{fake.port(), 1}}), /*scrape=*/true};
  CapturedLog log;
  ASSERT_TRUE(eventually(
      [&] { return !warden.card()["replicas"][0]["kv_used"].is_null(); }));  // the baseline
  fake.set_engine(0, 0, 0, 0.1, 2600, 0);  // prompts read, none from the cache
  ASSERT_TRUE(eventually([&] { return warden.card()["replicas"][0]["prefix_hit_rate"] == 0.0; }));
  for (int i = 0; i < 25; ++i) ask_unstreamed(warden.port(), true);
  EXPECT_EQ(stats(warden.port())["cached_count_missing_servers"], json::array());
  EXPECT_TRUE(log.containing(kCachedCountFlag).empty());

  fake.set_engine(0, 0, 0, 0.1, 2700, 64);  // now the engine served some from its cache
  ASSERT_TRUE(eventually([&] {
    const json rate = warden.card()["replicas"][0]["prefix_hit_rate"];
    return rate.is_number() && rate.get<double>() > 0.0;
  }));
  EXPECT_EQ(stats(warden.port())["cached_count_missing_servers"],
            json::array({{{"model", "m"}, {"url", server_url(fake)}}}));
  ask_unstreamed(warden.port(), true);  // the reply that now says it in the log
  expect_named_once(warden.port(), log, fake);
}

std::int64_t unix_now() {
  return std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A reply's tokens are booked when it ends, at the second of its first byte
// and spread from there; until then the stats say which seconds can still grow.
TEST(ProxyTelemetry, StatsSayFromWhichSecondRepliesUnderWayStillAddTokens) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  const json idle = stats(warden.port());
  EXPECT_EQ(idle["open_requests"], 0);
  // Nothing under way: only the current second (less the coarse clock's lag).
  EXPECT_LE(idle["settled_until"].get<std::int64_t>(), idle["now"].get<std::int64_t>());
  EXPECT_GE(idle["settled_until"].get<std::int64_t>(), idle["now"].get<std::int64_t>() - 1);

  const std::int64_t before = unix_now();
  HttpConnection client{warden.port()};
  client.send(http::verb::post, "/v1/chat/completions", stream_body(true), {{"x-fake-hold", "1"}});
  ASSERT_EQ(client.read_header().status, 200u);
  EXPECT_NE(client.read_until("first").find("first"), std::string::npos);
  json held;
  ASSERT_TRUE(eventually([&] {
    held = stats(warden.port());
    return held["now"].get<std::int64_t>() >= before + 3;
  }));
  EXPECT_EQ(held["open_requests"], 1);
  EXPECT_GE(held["settled_until"].get<std::int64_t>(), before - 1);  // a coarse stamp may lag a tick
  EXPECT_LE(held["settled_until"].get<std::int64_t>(), before + 1);
  EXPECT_EQ(held["totals"]["prompt_cached"], 0) << "nothing is booked before the reply ends";

  fake.release();
  std::string rest;
  while (auto piece = client.read_some()) rest += *piece;
  EXPECT_NE(rest.find("[DONE]"), std::string::npos);
  json after;
  ASSERT_TRUE(eventually([&] {
    after = stats(warden.port());
    return after["open_requests"] == 0;
  }));
  EXPECT_GE(after["settled_until"].get<std::int64_t>(), after["now"].get<std::int64_t>() - 1);
  EXPECT_EQ(after["totals"]["prompt_cached"], 64);
  // Its prompt tokens are in the second of its first byte, which had been held open.
  const auto& t = after["series"]["t"];
  double cached_from_hold = 0;
  for (std::size_t i = 0; i < t.size(); ++i)
    if (t[i].get<std::int64_t>() <= held["settled_until"].get<std::int64_t>())
      cached_from_hold += after["series"]["prompt_cached"][i].get<double>();
  EXPECT_EQ(cached_from_hold, 64);
}

TEST(ProxyTelemetry, AReplyWhoseClientLeftNoLongerHoldsTheStatsOpen) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  {
    HttpConnection client{warden.port()};
    client.send(http::verb::post, "/v1/chat/completions", stream_body(true), {{"x-fake-hold", "1"}});
    ASSERT_EQ(client.read_header().status, 200u);
    client.read_until("first");
    ASSERT_TRUE(eventually([&] { return stats(warden.port())["open_requests"] == 1; }));
    client.close();
  }
  EXPECT_TRUE(eventually([&] { return fake.aborted() == 1; }));
  EXPECT_TRUE(eventually([&] { return stats(warden.port())["open_requests"] == 0; }));
}

TEST(ProxyTelemetry, ScraperFillsTheCardFromEngineMetrics) {
  FakeVllm fake{2};
  fake.set_engine(0, 3, 1, 0.25, 1000, 600);
  fake.set_engine(1, 0, 0, 0.5, 0, 0);
  RunningWarden warden{make_config({{fake.port(), 2}}, std::nullopt, "scrape_interval: 100ms\n"), true};
  ASSERT_TRUE(eventually([&] { return !warden.card()["replicas"][0]["running"].is_null(); }));
  fake.set_engine(0, 3, 1, 0.25, 2000, 1400);  // Δqueries 1000, Δhits 800 since the first scrape
  ASSERT_TRUE(eventually([&] { return !warden.card()["replicas"][0]["prefix_hit_rate"].is_null(); }));
  const json card = warden.card();
  EXPECT_EQ(card["replicas"][0]["running"], 3);
  EXPECT_EQ(card["replicas"][0]["waiting"], 1);
  EXPECT_DOUBLE_EQ(card["replicas"][0]["kv_used"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(card["replicas"][1]["kv_used"].get<double>(), 0.5);
  EXPECT_NEAR(card["replicas"][0]["prefix_hit_rate"].get<double>(), 0.8, 1e-9);
  EXPECT_EQ(metric(warden.port(), "lmwarden_replica_running", {{"replica", "0"}}), 3);
}

// Two probes a round (/health, /metrics) over one kept connection, however
// many rounds: the server sees one client port.
TEST(ProxyTelemetry, ScraperKeepsOneConnectionToEachServer) {
  FakeVllm a{1}, b{1};
  RunningWarden warden{make_config({{a.port(), 1}, {b.port(), 1}}, std::nullopt, "scrape_interval: 100ms\n"), true};
  ASSERT_TRUE(eventually([&] { return a.probe_ports().size() >= 10 && b.probe_ports().size() >= 10; }));
  for (FakeVllm* server : {&a, &b}) {
    const auto ports = server->probe_ports();
    EXPECT_EQ(std::set<std::uint16_t>(ports.begin(), ports.end()).size(), 1U)
        << ports.size() << " probes";
  }
}

// Each reload asks the control thread to start the new configuration's
// probe loops; reloads that come faster than that thread takes the asks
// (a deploy tool's burst) must still leave one loop per server, not one per
// ask: two would probe twice per round and count each failed round twice.
TEST(ProxyTelemetry, ABurstOfReloadsLeavesOneProbeLoopPerServer) {
  FakeVllm fake{1};
  const auto config = [&] {
    return make_config({{fake.port(), 1}}, std::nullopt, "scrape_interval: 100ms\n");
  };
  RunningWarden warden{config(), true};
  for (int i = 0; i < 50; ++i) warden.reload(config());
  // The loops of the configurations the burst replaced end after their round,
  // however long the control thread takes to get there: wait for ten probes
  // in a row from one connection (about a second at this interval; a loop
  // per ask would probe 50 times as often, from 50 connections, for good).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::size_t probes = 0;
  std::set<std::uint16_t> since;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::size_t before = fake.probe_ports().size();
    ASSERT_TRUE(eventually([&] { return fake.probe_ports().size() >= before + 10; }));
    const auto ports = fake.probe_ports();
    probes = ports.size() - before;
    since = {ports.begin() + static_cast<std::ptrdiff_t>(before), ports.end()};
    if (since.size() == 1) break;
  }
  EXPECT_EQ(since.size(), 1U) << "the last " << probes << " probes came from " << since.size()
                              << " connections";
}

// How many samples of a warden metric have labels that all match.
int metric_count(std::uint16_t port, const std::string& name,
                 const std::map<std::string, std::string>& labels) {
  const auto parsed =
      telemetry::parse_exposition(http_request(port, http::verb::get, "/metrics").body);
  return static_cast<int>(std::ranges::count_if(parsed.samples, [&](const auto& s) {
    return s.name == name && std::ranges::all_of(labels, [&](const auto& l) {
             const std::string* value = s.label(l.first);
             return value != nullptr && *value == l.second;
           });
  }));
}

TEST(ProxyTelemetry, UnhealthyServerLosesItsConversationsAndComesBack) {
  FakeVllm a{1}, b{1};
  a.set_engine(0, 0, 0, 0, 0, 0);
  b.set_engine(0, 0, 0, 0, 0, 0);
  RunningWarden warden{make_config({{a.port(), 1}, {b.port(), 1}}, std::nullopt,
                                   "scrape_interval: 100ms\nunhealthy_after: 2\n"),
                       true};
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(false), {{"session-id", "c"}}).status, 200u);
  FakeVllm& home = a.seen().empty() ? b : a;
  FakeVllm& other = a.seen().empty() ? a : b;
  const int home_index = a.seen().empty() ? 1 : 0;
  ASSERT_TRUE(eventually([&] { return warden.card()["replicas"][home_index]["running"] == 0; }));
  home.set_healthy(false);
  ASSERT_TRUE(eventually([&] { return warden.card()["replicas"][home_index]["healthy"] == false; }));
  // Out of service, the engine's last figures are shown as unknown, not as news.
  const json out = warden.card()["replicas"][home_index];
  EXPECT_TRUE(out["running"].is_null()) << out;
  EXPECT_TRUE(out["waiting"].is_null()) << out;
  EXPECT_TRUE(out["kv_used"].is_null()) << out;
  EXPECT_EQ(metric_count(warden.port(), "lmwarden_replica_running",
                         {{"replica", std::to_string(home_index)}}),
            0);
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(false), {{"session-id", "c"}}).status, 200u);
  EXPECT_EQ(other.seen().size(), 1u) << "the conversation should have re-homed";
  EXPECT_EQ(warden.card()["replicas"][1 - home_index]["rehomed"], 1);
  home.set_healthy(true);
  ASSERT_TRUE(eventually([&] { return warden.card()["replicas"][home_index]["healthy"] == true; }));
  // Back in service: a new conversation lands on the less loaded (recovered) replica.
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(false), {{"session-id", "new"}}).status, 200u);
  EXPECT_EQ(home.seen().size(), 2u);
}

// A reload hands each server's count of failed probes over: reloads more
// often than `unhealthy_after` rounds (a deploy tool's, a config loop's) must
// not keep a dead server in service for as long as they go on.
TEST(ProxyTelemetry, ReloadsMoreOftenThanTheProbesDoNotKeepADeadServerInService) {
  FakeVllm a{1}, b{1};
  a.set_engine(0, 0, 0, 0, 0, 0);
  b.set_engine(0, 0, 0, 0, 0, 0);
  b.set_healthy(false);
  const auto config = [&] {
    return make_config({{a.port(), 1}, {b.port(), 1}}, std::nullopt,
                       "scrape_interval: 300ms\nunhealthy_after: 3\n");
  };
  RunningWarden warden{config(), true};
  bool out = false;
  for (int i = 0; i < 40 && !out; ++i) {  // 6 s: the server fails every probe meanwhile
    warden.reload(config());
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    out = warden.card()["replicas"][1]["healthy"] == false;
  }
  EXPECT_TRUE(out) << "still in service after 40 reloads";
  EXPECT_EQ(warden.card()["replicas"][0]["healthy"], true);
}

// Every request refused while a model is down would flood the log: one line
// per 10 s, with the count since the last.
TEST(ProxyTelemetry, AModelWithNoHealthyReplicaIsLoggedOnceNotPerRequest) {
  FakeVllm fake{1};
  fake.set_healthy(false);
  RunningWarden warden{
      make_config({{fake.port(), 1}}, std::nullopt, "scrape_interval: 100ms\nunhealthy_after: 1\n"),
      true};
  ASSERT_TRUE(eventually([&] { return warden.card()["replicas"][0]["healthy"] == false; }));
  EXPECT_EQ(warden.card()["refused"], json({{"no_healthy_replica", 0}}));
  CapturedLog log;
  for (int i = 0; i < 30; ++i)
    ASSERT_EQ(
        http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(false))
            .status,
        503u);
  EXPECT_EQ(metric(warden.port(), "lmwarden_refused_requests_total",
                   {{"model", "m"}, {"reason", "no_healthy_replica"}}),
            30);
  EXPECT_EQ(warden.card()["refused"], json({{"no_healthy_replica", 30}}));
  const auto lines = log.containing("no healthy replica");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(
                "model=m no healthy replica: answered 503 (1 request(s) since the last such line)"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("[error]"), std::string::npos) << lines[0];
}

TEST(ProxyTelemetry, HangingMetricsDoNotDelayProxiedRequests) {
  FakeVllm fake{1};
  fake.hang_metrics(true);
  RunningWarden warden{make_config({{fake.port(), 1}}, std::nullopt, "scrape_interval: 100ms\n"), true};
  ASSERT_TRUE(eventually([&] { return fake.metrics_hanging() >= 1; }));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(false)).status, 200u);
  EXPECT_GE(fake.metrics_hanging(), 1) << "the scrape should still be hanging while requests were served";
}

// A token written in the file is the one in force: admin_token_env keeps its
// default beside it, and its variable, set too, opens nothing.
TEST(ProxyTelemetry, ALiteralAdminTokenIsTheOneInForce) {
  ::setenv("LMWARDEN_ADMIN_TOKEN", "from-the-environment", 1);
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}}, std::nullopt, "admin_token: in-the-file\n")};
  const std::string body = R"({"affinity":false})";
  const auto patch = [&](const std::string& token) {
    return http_request(warden.port(), http::verb::patch, "/api/models/m", body,
                        {{"Authorization", "Bearer " + token}})
        .status;
  };
  EXPECT_EQ(patch("from-the-environment"), 403u);
  EXPECT_EQ(patch("in-the-file"), 200u);
  ::unsetenv("LMWARDEN_ADMIN_TOKEN");
}

TEST(ProxyTelemetry, AdminApiNeedsTheRightToken) {
  ::setenv("LMWARDEN_TEST_ADMIN", "s3cret", 1);
  FakeVllm fake{2};
  RunningWarden warden{make_config({{fake.port(), 2}}, std::nullopt, "admin_token_env: LMWARDEN_TEST_ADMIN\n")};
  const std::string body = R"({"affinity":false,"spill_threshold":3})";
  CapturedLog log;
  EXPECT_EQ(http_request(warden.port(), http::verb::patch, "/api/models/m", body).status, 401u);
  EXPECT_EQ(http_request(warden.port(), http::verb::patch, "/api/models/m", body, {{"Authorization", "Bearer wrong"}}).status, 403u);
  EXPECT_EQ(warden.card()["affinity"], true);
  // Refusals are logged, one line a second at most.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(http_request(warden.port(), http::verb::patch, "/api/models/m", body,
                         {{"Authorization", "Bearer wrong"}})
                .status,
            403u);
  EXPECT_EQ(
      log.containing("PATCH from 127.0.0.1 refused: missing Authorization: Bearer <admin token>")
          .size(),
      1u);
  EXPECT_EQ(log.containing("PATCH from 127.0.0.1 refused: wrong admin token (1 more refused since "
                           "the last such line)")
                .size(),
            1u);
  EXPECT_EQ(log.containing("refused:").size(), 2u);
  auto ok = http_request(warden.port(), http::verb::patch, "/api/models/m", body, {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(ok.status, 200u);
  const json card = warden.card();
  EXPECT_EQ(card["affinity"], false);
  EXPECT_EQ(card["spill_threshold"], 3);
  EXPECT_EQ(card["spill_threshold_auto"], false);
  auto bad = http_request(warden.port(), http::verb::patch, "/api/models/m", R"({"spill_threshold":0})",
                          {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(bad.status, 400u);
  auto back = http_request(warden.port(), http::verb::patch, "/api/models/m",
                           R"({"spill_threshold":"auto"})", {{"Authorization", "bearer s3cret"}});
  EXPECT_EQ(back.status, 200u) << "the scheme's name is case-insensitive: " << back.body;
  EXPECT_EQ(json::parse(back.body)["spill_threshold_auto"], true);
  // Refusals say what was wrong, and quote no more of the body than needed.
  auto said = [&](const std::string& patch) {
    const auto r = http_request(warden.port(), http::verb::patch, "/api/models/m", patch,
                                {{"Authorization", "Bearer s3cret"}});
    EXPECT_EQ(r.status, 400u) << patch.substr(0, 80);
    return json::parse(r.body)["error"]["message"].get<std::string>();
  };
  EXPECT_EQ(said(R"({"spill_threshold":1000001})"),
            "spill_threshold must be an integer from 1 to 1000000 or \"auto\"");
  EXPECT_EQ(said(R"({"affinity":true} trailing)"), "body is not valid JSON");
  EXPECT_EQ(said("[1]"), "body must be a JSON object");
  const std::string unknown = said("{\"" + std::string(100'000, 'k') + "\":1}");
  EXPECT_LT(unknown.size(), 200u);
  EXPECT_TRUE(unknown.starts_with("unknown field 'kkkk")) << unknown;
  // Cut inside a two-byte character (the 64th byte its first): still a reply.
  EXPECT_TRUE(
      said("{\"" + std::string(63, 'a') + "\xc3\xa9\":1}").starts_with("unknown field 'aaa"));
  EXPECT_EQ(warden.card()["spill_threshold_auto"], true) << "a refused PATCH changes nothing";
  // A reload that takes the token away says so, as the start does.
  ::unsetenv("LMWARDEN_TEST_NO_ADMIN");
  const auto notes = warden.reload(
      make_config({{fake.port(), 2}}, std::nullopt, "admin_token_env: LMWARDEN_TEST_NO_ADMIN\n"));
  EXPECT_NE(std::ranges::find(notes,
                              "run-time control (PATCH /api/models/NAME, the dashboard's "
                              "controls) is off: the environment variable "
                              "LMWARDEN_TEST_NO_ADMIN is not set"),
            notes.end())
      << ::testing::PrintToString(notes);
  // And that it undid the PATCH still in force (affinity; spill_threshold
  // was set back to auto by a PATCH already).
  EXPECT_NE(std::ranges::find(notes,
                              "model m: affinity back to the file's true (a PATCH had "
                              "set false)"),
            notes.end())
      << ::testing::PrintToString(notes);
  EXPECT_EQ(warden.card()["affinity"], true);
  EXPECT_EQ(http_request(warden.port(), http::verb::patch, "/api/models/m", "{}",
                         {{"Authorization", "Bearer s3cret"}})
                .status,
            403u);
}

TEST(ProxyTelemetry, ClientApiKeysAreEnforcedInTheClientsDialect) {
  ::setenv("LMWARDEN_TEST_CLIENT_KEY", "client-key", 1);
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}}, std::nullopt, "",
                                   "    api_keys_env: [LMWARDEN_TEST_CLIENT_KEY]\n")};
  auto denied = http_request(warden.port(), http::verb::post, "/v1/messages", R"({"model":"m","messages":[]})");
  EXPECT_EQ(denied.status, 401u);
  EXPECT_EQ(json::parse(denied.body)["error"]["type"], "authentication_error");
  EXPECT_EQ(http_request(warden.port(), http::verb::post, "/v1/messages", R"({"model":"m","messages":[]})",
                         {{"x-api-key", "client-key"}}).status, 200u);
  EXPECT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", stream_body(false),
                         {{"Authorization", "Bearer client-key"}}).status, 200u);
  EXPECT_EQ(fake.seen().size(), 2u);
  EXPECT_EQ(metric(warden.port(), "lmwarden_refused_requests_total",
                   {{"model", "m"}, {"reason", "unauthorized"}}),
            1);
}

}  // namespace
}  // namespace lmwarden::testing
