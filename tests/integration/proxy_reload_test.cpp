// A reload that changes a model's replicas while requests run: those
// requests are counted where they run, by the card and /metrics and by the
// routing of the requests that come after the reload.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fake_vllm.h"
#include "http_test_client.h"
#include "running_warden.h"
#include "telemetry/prometheus.h"

namespace lmwarden::testing {
namespace {

using nlohmann::json;

// lmwarden_in_flight of one model, summed over its series.
double in_flight_metric(std::uint16_t port) {
  double sum = 0;
  const auto text = http_request(port, http::verb::get, "/metrics").body;
  for (const auto& s : telemetry::parse_exposition(text).samples)
    if (s.name == "lmwarden_in_flight") sum += s.value;
  return sum;
}

// A reload that changes a model's replicas starts its routing afresh, but
// the requests it had sent still run: they are counted in flight on the
// replica of the same server and rank, until they end. One on a server the
// model no longer has is not, nor, once a reload has let go of it, when a
// later one brings its server back.
TEST(ProxyReload, RequestsStillRunningAfterAChangeOfReplicasAreCountedWhereTheyRun) {
  FakeVllm fake{2}, other{1};
  RunningWarden warden{make_config({{fake.port(), 2}})};
  const std::string held =
      json{{"model", "m"}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}
          .dump();
  HttpConnection stream{warden.port()};
  stream.send(http::verb::post, "/v1/chat/completions", held,
              {{"session-id", "long"}, {"x-fake-hold", "1"}});
  ASSERT_EQ(stream.read_header().status, 200u);
  stream.read_until("\n\n");
  const int rank = fake.seen().back().rank;

  warden.reload(make_config({{fake.port(), 2}, {other.port(), 1}}));  // one server more
  json card = warden.card();
  ASSERT_EQ(card["replicas"].size(), 3u);
  EXPECT_EQ(card["in_flight"], 1) << card;
  EXPECT_EQ(card["replicas"][rank]["in_flight"], 1) << card;
  EXPECT_EQ(in_flight_metric(warden.port()), 1);
  EXPECT_EQ(json::parse(http_request(warden.port(), http::verb::get, "/api/models")
                            .body)["models"][0]["in_flight"],
            1);

  // Renamed (the old name an alias), with one server less: still counted.
  const auto notes = warden.reload(load_test_config(
      "listen: 127.0.0.1:0\nmodels:\n  - name: m2\n    aliases: [m]\n    backends:\n"
      "      - url: http://127.0.0.1:" +
      std::to_string(fake.port()) + "\n        data_parallel_size: 2\n"));
  EXPECT_NE(std::ranges::find(notes,
                              "model m renamed m2, which keeps the old name as an alias; its "
                              "replicas changed: 1 conversations and 0 stored responses on "
                              "servers and ranks it still has stay there; 0 conversations on "
                              "replicas it no longer has are placed again at their next "
                              "request, and 0 stored responses there are forgotten; the "
                              "counters and chart of the replicas it keeps carry on, as each "
                              "keeps its index"),
            notes.end())
      << ::testing::PrintToString(notes);
  EXPECT_EQ(warden.card("m2")["replicas"][rank]["in_flight"], 1);

  const auto m2 = [&](const std::vector<std::uint16_t>& ports) {
    std::string yaml = "listen: 127.0.0.1:0\nmodels:\n  - name: m2\n    backends:\n";
    for (const std::uint16_t port : ports)
      yaml += "      - url: http://127.0.0.1:" + std::to_string(port) +
              (port == fake.port() ? "\n        data_parallel_size: 2\n" : "\n");
    return load_test_config(yaml);
  };
  warden.reload(m2({other.port()}));  // its server gone from the model
  EXPECT_EQ(warden.card("m2")["in_flight"], 0);
  warden.reload(m2({fake.port()}));  // and back: let go of
  EXPECT_EQ(warden.card("m2")["in_flight"], 0);

  fake.release();
  EXPECT_NE(stream.read_until("[DONE]").find("[DONE]"), std::string::npos);
  EXPECT_TRUE(eventually([&] { return warden.card("m2")["in_flight"] == 0; }));
  EXPECT_EQ(in_flight_metric(warden.port()), 0);
}

// The same for a request sent without a rank (affinity off: the server's
// balancer picks it): counted while the model still has its server.
TEST(ProxyReload, RequestsWithoutARankAreCountedAfterAChangeOfReplicasWhileTheirServerStays) {
  FakeVllm fake{2}, other{1};
  const std::string off = "    affinity: false\n";
  RunningWarden warden{make_config({{fake.port(), 2}}, std::nullopt, "", off)};
  const std::string held =
      json{{"model", "m"}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}
          .dump();
  HttpConnection stream{warden.port()};
  stream.send(http::verb::post, "/v1/chat/completions", held, {{"x-fake-hold", "1"}});
  ASSERT_EQ(stream.read_header().status, 200u);
  stream.read_until("\n\n");
  warden.reload(make_config({{fake.port(), 2}, {other.port(), 1}}, std::nullopt, "", off));
  EXPECT_EQ(warden.card()["in_flight"], 1);
  EXPECT_EQ(warden.card()["unassigned"]["in_flight"], 1);
  warden.reload(make_config({{other.port(), 1}}, std::nullopt, "", off));
  EXPECT_EQ(warden.card()["in_flight"], 0) << "its server is no longer the model's";
  fake.release();
  EXPECT_NE(stream.read_until("[DONE]").find("[DONE]"), std::string::npos);
}

// A home busy with a stream begun before the reload spills after it, as it
// would have without the reload: the new router counts the stream.
TEST(ProxyReload, AHomeBusyWithARequestBegunBeforeAReloadSpillsAfterIt) {
  FakeVllm a{1}, b{1}, c{1};
  RunningWarden warden{make_config({{a.port(), 1}, {b.port(), 1}}, /*spill=*/1)};
  const auto turn = [&](bool hold) {
    return json{{"model", "m"},
                {"stream", true},
                {"messages", {{{"role", "user"}, {"content", hold ? "long" : "short"}}}}}
        .dump();
  };
  HttpConnection stream{warden.port()};
  stream.send(http::verb::post, "/v1/chat/completions", turn(true),
              {{"session-id", "conv"}, {"x-fake-hold", "1"}});
  ASSERT_EQ(stream.read_header().status, 200u);
  stream.read_until("\n\n");
  FakeVllm& home = a.seen().empty() ? b : a;

  warden.reload(make_config({{a.port(), 1}, {b.port(), 1}, {c.port(), 1}}, /*spill=*/1));
  ASSERT_EQ(warden.card()["in_flight"], 1);
  const auto next = http_request(warden.port(), http::verb::post, "/v1/chat/completions",
                                 turn(false), {{"session-id", "conv"}});
  EXPECT_EQ(next.status, 200u);
  EXPECT_EQ(home.seen().size(), 1u) << "its home had spill_threshold requests in flight";
  EXPECT_EQ(warden.routed()["spilled"], 1);

  home.release();
  EXPECT_NE(stream.read_until("[DONE]").find("[DONE]"), std::string::npos);
  EXPECT_TRUE(eventually([&] { return warden.card()["in_flight"] == 0; }));
  // Let go of by the new router too: the next turn goes home.
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", turn(false),
                         {{"session-id", "conv"}})
                .status,
            200u);
  EXPECT_EQ(home.seen().size(), 2u);
  EXPECT_EQ(warden.routed()["sticky"], 1);
}

}  // namespace
}  // namespace lmwarden::testing
