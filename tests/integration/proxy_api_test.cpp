// The warden's own routes over real sockets: model names as the dashboard
// escapes them, the methods each route takes, the stats query, and how
// retries and the server's own balancing are counted.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "fake_vllm.h"
#include "http_test_client.h"
#include "running_warden.h"
#include "telemetry/prometheus.h"

namespace lmwarden::testing {
namespace {

using nlohmann::json;

std::string chat_body(const std::string& model) {
  return json{
      {"model", model}, {"stream", false}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}
      .dump();
}

// lmwarden_refused_requests_total by (model, reason).
std::map<std::pair<std::string, std::string>, double> refused(std::uint16_t port) {
  std::map<std::pair<std::string, std::string>, double> out;
  const auto text = http_request(port, http::verb::get, "/metrics").body;
  for (const auto& s : telemetry::parse_exposition(text).samples)
    if (s.name == "lmwarden_refused_requests_total") {
      const std::string* model = s.label("model");
      out[{model ? *model : "", *s.label("reason")}] += s.value;
    }
  return out;
}

// Ollama-style names ("qwen3:4b") and names with spaces reach the API as the
// dashboard sends them: one path segment, percent-escaped.
TEST(ProxyApi, AModelNameIsReadAsAnEscapedPathSegment) {
  FakeVllm fake{1};
  RunningWarden warden{load_test_config(
      "listen: 127.0.0.1:0\nadmin_token: s3cret\nmodels:\n  - name: \"qwen3:4b q+\"\n"
      "    backends:\n      - url: http://127.0.0.1:" +
      std::to_string(fake.port()) + "\n")};
  const std::string escaped = "/api/models/qwen3%3A4b%20q%2B";
  auto card = http_request(warden.port(), http::verb::get, escaped);
  ASSERT_EQ(card.status, 200u) << card.body;
  EXPECT_EQ(json::parse(card.body)["name"], "qwen3:4b q+");
  auto patched = http_request(warden.port(), http::verb::patch, escaped, R"({"spill_threshold":3})",
                              {{"Authorization", "Bearer s3cret"}});
  ASSERT_EQ(patched.status, 200u) << patched.body;
  EXPECT_EQ(json::parse(patched.body)["spill_threshold"], 3);
  // In a path '+' is itself; the unknown name is said decoded.
  auto unknown = http_request(warden.port(), http::verb::get, "/api/models/qwen3%3A4b+q+");
  EXPECT_EQ(unknown.status, 404u);
  EXPECT_EQ(json::parse(unknown.body)["error"]["message"], "unknown model qwen3:4b+q+");
}

// A route that exists answers another method with 405 and the methods it
// takes (RFC 9110 15.5.6); a path that is no route at all, with 404.
TEST(ProxyApi, AWrongMethodGets405WithTheMethodsThatWould) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  struct Case {
    http::verb method;
    std::string target;
    unsigned status;
    std::string allow;
  };
  const Case cases[] = {
      {http::verb::get, "/v1/chat/completions", 405, "POST"},
      {http::verb::put, "/v1/messages?beta=true", 405, "POST"},
      {http::verb::put, "/v1/models", 405, "GET, HEAD"},
      {http::verb::delete_, "/v1/models/m", 405, "GET, HEAD"},
      {http::verb::delete_, "/metrics", 405, "GET, HEAD"},
      {http::verb::post, "/api/stats", 405, "GET, HEAD"},
      {http::verb::post, "/api/models/m", 405, "GET, HEAD, PATCH"},
      {http::verb::delete_, "/api/models/m", 405, "GET, HEAD, PATCH"},
      {http::verb::post, "/", 405, "GET, HEAD"},  // the dashboard
      {http::verb::delete_, "/models/m", 405, "GET, HEAD"},
      {http::verb::put, "/ui/app.js", 405, "GET, HEAD"},
      {http::verb::post, "/ui/nothing.js", 404, ""},
      {http::verb::post, "/v1/nothing", 404, ""},
      {http::verb::get, "/api/nothing", 404, ""},
  };
  for (const auto& c : cases) {
    const auto r = http_request(warden.port(), c.method, c.target);
    EXPECT_EQ(r.status, c.status) << c.target;
    EXPECT_EQ(r.headers.contains("allow") ? r.headers.at("allow") : "", c.allow) << c.target;
    // What Allow names is answered: HEAD as GET, without a body.
    if (c.allow.find("HEAD") != std::string::npos) {
      EXPECT_EQ(http_request(warden.port(), http::verb::head, c.target).status, 200u) << c.target;
    }
  }
  // In the client's dialect: an Anthropic route's error is Anthropic-shaped.
  const auto anthropic = http_request(warden.port(), http::verb::get, "/v1/messages");
  EXPECT_EQ(json::parse(anthropic.body)["type"], "error") << anthropic.body;
  EXPECT_EQ(json::parse(anthropic.body)["error"]["message"], "use POST for /v1/messages");
}

// An address that is no page, asked by a browser, gets the dashboard (which
// says there is no such page) with 404; a client asking for JSON, or any
// address under /v1/, /api/ or /ui/, the JSON error.
TEST(ProxyApi, ABrowserAskingForNoPageGetsTheDashboardWith404) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  const std::pair<std::string, std::string> html{"Accept",
                                                 "text/html,application/xhtml+xml,*/*;q=0.8"};
  const auto page = http_request(warden.port(), http::verb::get, "/modles", "", {html});
  EXPECT_EQ(page.status, 404u);
  EXPECT_EQ(page.headers.at("content-type"), "text/html; charset=utf-8");
  EXPECT_FALSE(page.headers.contains("etag"));
  EXPECT_EQ(page.body, http_request(warden.port(), http::verb::get, "/").body);
  for (const std::string target : {"/v1/nothing", "/api/nothing", "/ui/nothing.js"}) {
    const auto r = http_request(warden.port(), http::verb::get, target, "", {html});
    EXPECT_EQ(r.status, 404u) << target;
    EXPECT_EQ(json::parse(r.body)["error"]["message"], "no route " + target);
  }
  const auto json_client = http_request(warden.port(), http::verb::get, "/modles");
  EXPECT_EQ(json_client.status, 404u);
  EXPECT_EQ(json::parse(json_client.body)["error"]["message"], "no route /modles");
}

// GET /v1/models/{id} (OpenAI's retrieve): one entry of the list, by name
// or alias, the id taken whole (a Hugging Face name has a slash in it).
TEST(ProxyApi, AModelIsRetrievedByNameOrAlias) {
  FakeVllm fake{1};
  RunningWarden warden{
      load_test_config("listen: 127.0.0.1:0\nmodels:\n  - name: Qwen/Qwen3-4B\n    aliases: [q4]\n"
                       "    backends:\n      - url: http://127.0.0.1:" +
                       std::to_string(fake.port()) + "\n")};
  const json list = json::parse(http_request(warden.port(), http::verb::get, "/v1/models").body);
  auto get = [&](const std::string& target) {
    const auto r = http_request(warden.port(), http::verb::get, target);
    EXPECT_EQ(r.status, 200u) << target << ": " << r.body;
    return r.status == 200u ? json::parse(r.body) : json();
  };
  EXPECT_EQ(get("/v1/models/Qwen/Qwen3-4B"), list["data"][0]);
  EXPECT_EQ(get("/v1/models/Qwen%2FQwen3-4B"), list["data"][0]);
  const json alias = get("/v1/models/q4");
  EXPECT_EQ(alias, list["data"][1]);
  EXPECT_EQ(alias["id"], "q4");
  EXPECT_EQ(alias["root"], "Qwen/Qwen3-4B");
  EXPECT_EQ(alias["object"], "model");

  const auto unknown = http_request(warden.port(), http::verb::get, "/v1/models/Qwen");
  EXPECT_EQ(unknown.status, 404u);
  EXPECT_EQ(json::parse(unknown.body)["error"]["message"], "no model Qwen (see GET /v1/models)");
  const std::map<std::pair<std::string, std::string>, double> expected = {
      {{"", "unknown_model"}, 1}, {{"Qwen/Qwen3-4B", "no_healthy_replica"}, 0}};
  EXPECT_EQ(refused(warden.port()), expected);
  EXPECT_TRUE(fake.seen().empty());
}

// A name in the file that is not UTF-8 (a Latin-1 alias): the lists that
// show it answer, with U+FFFD in its place. They ended the connection with no
// reply (nlohmann's dump threw).
TEST(ProxyApi, ANameThatIsNotUtf8IsShownWithAReplacementCharacter) {
  FakeVllm fake{1};
  RunningWarden warden{
      load_test_config("listen: 127.0.0.1:0\nmodels:\n  - name: m\n    aliases: [\"f\xe9\"]\n"
                       "    backends:\n      - url: http://127.0.0.1:" +
                       std::to_string(fake.port()) + "\n")};
  for (const char* target : {"/v1/models", "/api/models", "/api/models/m", "/api/stats"}) {
    SCOPED_TRACE(target);
    const auto r = http_request(warden.port(), http::verb::get, target);
    ASSERT_EQ(r.status, 200u) << r.body;
    EXPECT_NO_THROW((void)json::parse(r.body));
  }
  const json list = json::parse(http_request(warden.port(), http::verb::get, "/v1/models").body);
  EXPECT_EQ(list["data"][1]["id"], "f\xEF\xBF\xBD");
  const json models = json::parse(http_request(warden.port(), http::verb::get, "/api/models").body);
  EXPECT_EQ(models["models"][0]["aliases"][0], "f\xEF\xBF\xBD");
}

// With several models, a body whose "model" is missing or not a string says
// what it needs.
TEST(ProxyApi, ARequestWithoutAModelStringIsToldWhatItNeeds) {
  FakeVllm fake{1};
  const std::string url = "http://127.0.0.1:" + std::to_string(fake.port());
  RunningWarden warden{
      load_test_config("listen: 127.0.0.1:0\nmodels:\n  - name: a\n    backends: [{url: " + url +
                       "}]\n  - name: b\n    backends: [{url: " + url + "}]\n")};
  for (const std::string body : {R"({"model":5,"messages":[]})", R"({"messages":[]})"}) {
    const auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400u) << body;
    EXPECT_EQ(json::parse(r.body)["error"]["message"],
              "the request names no model: its body needs \"model\": \"NAME\" (see GET /v1/models)")
        << body;
  }
  EXPECT_TRUE(fake.seen().empty());
}

TEST(ProxyApi, StatsOfAnAliasAreItsModelsAndAWindowIsWholeSeconds) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  ASSERT_EQ(
      http_request(warden.port(), http::verb::post, "/v1/chat/completions", chat_body("m")).status,
      200u);
  auto totals = [&](const std::string& query) {
    const auto r = http_request(warden.port(), http::verb::get, "/api/stats?" + query);
    EXPECT_EQ(r.status, 200u) << query << ": " << r.body;
    return json::parse(r.body)["totals"];
  };
  const json of_model = totals("model=m");
  EXPECT_EQ(of_model["prompt_cached"], 64) << of_model;
  EXPECT_EQ(totals("model=m-alias"), of_model);
  // More digits than any integer holds: longer than any window kept.
  EXPECT_EQ(totals("window=99999999999999999999999"), totals("window=21600"));
  for (const std::string bad :
       {"0", "-5", "+90", "%2090", "90s", "1e3", "", "-99999999999999999999999"}) {
    const auto r = http_request(warden.port(), http::verb::get, "/api/stats?window=" + bad);
    EXPECT_EQ(r.status, 400u) << bad;
    EXPECT_EQ(json::parse(r.body)["error"]["message"],
              "window must be a whole number of seconds from 1")
        << bad;
  }
}

// Each error the warden answers itself, before any replica, is counted by
// reason, with the model when one was known.
TEST(ProxyApi, RefusalsAreCountedByModelAndReason) {
  FakeVllm fake{2};
  RunningWarden warden{make_config({{fake.port(), 2}})};
  auto post = [&](const std::string& body,
                  std::vector<std::pair<std::string, std::string>> h = {}) {
    return http_request(warden.port(), http::verb::post, "/v1/chat/completions", body, h).status;
  };
  EXPECT_EQ(post(chat_body("nope")), 404u);
  EXPECT_EQ(post(chat_body("nope")), 404u);
  EXPECT_EQ(post("{\"model\":"), 400u);
  const auto empty = http_request(warden.port(), http::verb::post, "/v1/chat/completions", "");
  EXPECT_EQ(empty.status, 400u);
  EXPECT_EQ(json::parse(empty.body)["error"]["message"],
            "invalid request body: it is empty; a JSON object is expected");
  EXPECT_EQ(post(chat_body("m"), {{"X-data-parallel-rank", "7"}}), 400u);
  EXPECT_EQ(post(chat_body("m")), 200u);  // not a refusal
  // A gzip body (its magic bytes) is named as compressed, not as bad JSON.
  const auto gz = http_request(warden.port(), http::verb::post, "/v1/chat/completions",
                               std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8),
                               {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(gz.status, 415u);
  EXPECT_EQ(json::parse(gz.body)["error"]["message"],
            "the request body is sent with Content-Encoding: gzip, which is not decoded here; send "
            "it uncompressed");
  // A value that is not UTF-8, quoted in the message, still makes a reply.
  const auto odd = http_request(warden.port(), http::verb::post, "/v1/chat/completions", "x",
                                {{"Content-Encoding", "\xff"}});
  EXPECT_EQ(odd.status, 415u);
  EXPECT_NE(json::parse(odd.body)["error"]["message"].get<std::string>().find("\xef\xbf\xbd"),
            std::string::npos)
      << "U+FFFD in place of the byte: " << odd.body;
  const std::map<std::pair<std::string, std::string>, double> expected = {
      {{"", "unknown_model"}, 2},
      {{"", "invalid_body"}, 2},
      {{"m", "unknown_rank"}, 1},
      {{"", "unsupported_encoding"}, 2},
      {{"m", "no_healthy_replica"}, 0}};  // there before any, for rate() (metrics.md)
  EXPECT_EQ(refused(warden.port()), expected);
  // The model's card has its own, those without a model on no card.
  const json of_m = {{"no_healthy_replica", 0}, {"unknown_rank", 1}};
  EXPECT_EQ(warden.card()["refused"], of_m);
  // A reload keeps them, as the counters of the process they are.
  warden.reload(make_config({{fake.port(), 2}}, 3));
  EXPECT_EQ(refused(warden.port()), expected);
  EXPECT_EQ(warden.card()["refused"], of_m);
  // Those of a model the reload removed end with its other series.
  warden.reload(
      load_test_config("listen: 127.0.0.1:0\nmodels:\n  - name: other\n    backends:\n"
                       "      - url: http://127.0.0.1:" +
                       std::to_string(fake.port()) + "\n"));
  const std::map<std::pair<std::string, std::string>, double> without_m = {
      {{"", "unknown_model"}, 2},
      {{"", "invalid_body"}, 2},
      {{"", "unsupported_encoding"}, 2},
      {{"other", "no_healthy_replica"}, 0}};
  EXPECT_EQ(refused(warden.port()), without_m);
}

// A model renamed with its old name kept as an alias keeps its conversations
// and counters (clients still sending the old name find their homes); one
// renamed without it starts afresh, and the reload says which happened.
TEST(ProxyApi, AModelRenamedWithItsOldNameAsAnAliasKeepsItsConversations) {
  FakeVllm fake{2};
  RunningWarden warden{make_config({{fake.port(), 2}})};
  auto turn = [&](const std::string& model) {
    return http_request(warden.port(), http::verb::post, "/v1/chat/completions", chat_body(model),
                        {{"session-id", "kept"}});
  };
  ASSERT_EQ(turn("m").status, 200u);
  const auto renamed = [&](const std::string& name, const std::string& aliases) {
    return load_test_config(
        "listen: 127.0.0.1:0\nmodels:\n  - name: " + name + "\n    aliases: " + aliases +
        "\n    backends:\n      - url: http://127.0.0.1:" + std::to_string(fake.port()) +
        "\n        data_parallel_size: 2\n");
  };
  // (Its other notes: the test config's limits, which a reload leaves.)
  const auto said = [](const std::vector<std::string>& notes, const std::string& what) {
    return std::ranges::any_of(notes, [&](const std::string& n) { return n.starts_with(what); });
  };
  const auto notes = warden.reload(renamed("m-new", "[m]"));
  EXPECT_TRUE(said(notes,
                   "model m renamed m-new, which keeps the old name as an alias, and its "
                   "conversations, stored responses, counters and chart"))
      << ::testing::PrintToString(notes);
  ASSERT_EQ(turn("m").status, 200u);
  json card = warden.card("m-new");
  EXPECT_EQ(card["conversations"], 1) << card;
  int sticky = 0;
  for (const auto& r : card["replicas"]) sticky += r["sticky"].get<int>();
  EXPECT_EQ(sticky, 1) << "the second turn found its home: " << card;

  const auto dropped = warden.reload(renamed("m-other", "[]"));
  EXPECT_TRUE(said(dropped, "model m-new removed, with its conversations"))
      << ::testing::PrintToString(dropped);
  EXPECT_EQ(warden.card("m-other")["conversations"], 0);
}

// A reload that changes a model's replicas keeps each conversation whose
// server and rank the model still has on that rank (its cache is there),
// whatever index the replica has now; those whose server went are placed
// again. The reload's note counts both.
TEST(ProxyApi, ConversationsKeepTheirRankWhenAReloadAddsOrRemovesAServer) {
  FakeVllm fake{2}, other{1};
  RunningWarden warden{make_config({{fake.port(), 2}})};
  const auto turn = [&](const std::string& id) {
    return http_request(warden.port(), http::verb::post, "/v1/chat/completions", chat_body("m"),
                        {{"session-id", id}});
  };
  std::map<std::string, int> rank;
  for (int i = 0; i < 6; ++i) {
    const std::string id = "conv-" + std::to_string(i);
    ASSERT_EQ(turn(id).status, 200u);
    rank[id] = fake.seen().back().rank;
  }
  // The new server first: the fake's ranks are replicas 1 and 2 now.
  const auto added = warden.reload(make_config({{other.port(), 1}, {fake.port(), 2}}));
  EXPECT_NE(std::ranges::find(added,
                              "model m: its replicas changed: 6 conversations and 0 stored "
                              "responses on servers and ranks it still has stay there; 0 "
                              "conversations on replicas it no longer has are placed again at "
                              "their next request, and 0 stored responses there are "
                              "forgotten; its counters and chart start afresh, as a replica "
                              "it keeps has a new index, or it keeps none"),
            added.end())
      << ::testing::PrintToString(added);
  EXPECT_EQ(warden.card()["conversations"], 6);
  for (const auto& [id, r] : rank) {
    const std::size_t before = fake.seen().size();
    ASSERT_EQ(turn(id).status, 200u);
    ASSERT_EQ(fake.seen().size(), before + 1) << id << " went to the new server";
    EXPECT_EQ(fake.seen().back().rank, r) << id;
  }
  json card = warden.card();
  int sticky = 0;
  for (const auto& replica : card["replicas"]) sticky += replica["sticky"].get<int>();
  EXPECT_EQ(sticky, 6) << card;
  EXPECT_EQ(card["replicas"][0]["live_conversations"], 0) << card;

  // The same servers, their URLs written with a trailing '/': the same
  // layout, so the model's conversations and counters carry on as they are.
  const auto slashed = warden.reload(load_test_config(
      "listen: 127.0.0.1:0\nmodels:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:" +
      std::to_string(other.port()) + "/\n      - url: http://127.0.0.1:" +
      std::to_string(fake.port()) + "/\n        data_parallel_size: 2\n"));
  EXPECT_FALSE(std::ranges::any_of(slashed, [](const std::string& n) {
    return n.find("replicas changed") != std::string::npos;
  })) << ::testing::PrintToString(slashed);
  card = warden.card();
  sticky = 0;
  for (const auto& replica : card["replicas"]) sticky += replica["sticky"].get<int>();
  EXPECT_EQ(sticky, 6) << "counters carried on: " << card;

  const auto removed = warden.reload(make_config({{other.port(), 1}}));
  EXPECT_TRUE(std::ranges::any_of(removed, [](const std::string& n) {
    return n.starts_with("model m: its replicas changed: 0 conversations and 0 stored responses") &&
           n.find("; 6 conversations on replicas it no longer has are placed again") !=
               std::string::npos;
  })) << ::testing::PrintToString(removed);
  EXPECT_EQ(warden.card()["conversations"], 0);
}

// The counters and the chart of a replica continue through a reload that
// changes the model's replicas when that replica keeps its index (a server
// added at the end), since /metrics labels them by index; a reload that
// moves one starts them afresh.
TEST(ProxyApi, CountersCarryOnWhenAReloadAddsAServerAtTheEnd) {
  FakeVllm fake{2}, other{1};
  RunningWarden warden{make_config({{fake.port(), 2}})};
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", chat_body("m"),
                           {{"session-id", "conv-" + std::to_string(i)}})
                  .status,
              200u);
  const json before = warden.card();
  const auto tokens = [&] {
    return json::parse(http_request(warden.port(), http::verb::get, "/api/stats?model=m&window=900")
                           .body)["totals"];
  };
  const json tokens_before = tokens();
  ASSERT_EQ(tokens_before["prompt_cached"], 4 * 64) << tokens_before;
  ASSERT_EQ(warden.routed()["new"], 4);

  const auto added = warden.reload(make_config({{fake.port(), 2}, {other.port(), 1}}));
  EXPECT_TRUE(std::ranges::any_of(added, [](const std::string& n) {
    return n.starts_with("model m: its replicas changed: 4 conversations") &&
           n.ends_with(
               "; the counters and chart of the replicas it keeps carry on, as each "
               "keeps its index");
  })) << ::testing::PrintToString(added);
  json card = warden.card();
  ASSERT_EQ(card["replicas"].size(), 3u);
  EXPECT_EQ(card["since"], before["since"]);
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(card["replicas"][r]["new"], before["replicas"][r]["new"]) << card;
  EXPECT_EQ(card["replicas"][2]["new"], 0);
  EXPECT_EQ(tokens(), tokens_before);
  EXPECT_EQ(warden.routed()["new"], 4);
  // Counting goes on where it was.
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", chat_body("m"),
                         {{"session-id", "conv-0"}})
                .status,
            200u);
  EXPECT_EQ(tokens()["prompt_cached"], 5 * 64);
  EXPECT_EQ(warden.routed()["sticky"], 1);

  // The new server first: the fake's ranks are replicas 1 and 2, so their
  // series would continue under another replica's label.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // `since` has whole seconds
  const auto moved = warden.reload(make_config({{other.port(), 1}, {fake.port(), 2}}));
  EXPECT_TRUE(std::ranges::any_of(moved, [](const std::string& n) {
    return n.ends_with(
        "; its counters and chart start afresh, as a replica it keeps has a new "
        "index, or it keeps none");
  })) << ::testing::PrintToString(moved);
  EXPECT_EQ(tokens()["prompt_cached"], 0);
  EXPECT_GT(warden.card()["since"].get<std::string>(), before["since"].get<std::string>());
  double requests = 0;
  for (const auto& [route, n] : warden.routed()) requests += n;
  EXPECT_EQ(requests, 0);
  EXPECT_EQ(warden.card()["conversations"], 4) << "the conversations stay all the same";
}

// A server that fails its probes stays out of service through a reload that
// changes the model's replicas: a fresh routing state would take it for
// healthy until its probes failed again, and send it new conversations.
TEST(ProxyApi, AServerDownStaysOutThroughAReloadThatChangesTheReplicas) {
  FakeVllm up{1}, down{1}, added{1};
  // Engines in /metrics, or the probes of the servers up fail too.
  for (FakeVllm* fake : {&up, &down, &added}) fake->set_engine(0, 0, 0, 0, 0, 0);
  down.set_healthy(false);
  const std::string probes = "scrape_interval: 100ms\nunhealthy_after: 2\n";
  RunningWarden warden{make_config({{up.port(), 1}, {down.port(), 1}}, std::nullopt, probes), true};
  ASSERT_TRUE(eventually([&] { return warden.card()["replicas"][1]["healthy"] == false; }));

  warden.reload(
      make_config({{down.port(), 1}, {added.port(), 1}, {up.port(), 1}}, std::nullopt, probes));
  EXPECT_EQ(warden.card()["replicas"][0]["healthy"], false);
  for (int i = 0; i < 6; ++i)
    ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", chat_body("m"),
                           {{"session-id", "after-" + std::to_string(i)}})
                  .status,
              200u);
  EXPECT_TRUE(down.seen().empty()) << down.seen().size() << " requests reached the server down";
  EXPECT_EQ(up.seen().size() + added.seen().size(), 6u);

  // A rank it gains is out of service with it.
  warden.reload(
      make_config({{down.port(), 2}, {added.port(), 1}, {up.port(), 1}}, std::nullopt, probes));
  const json card = warden.card();
  EXPECT_EQ(card["replicas"][0]["healthy"], false) << card;
  EXPECT_EQ(card["replicas"][1]["healthy"], false) << card;
  EXPECT_EQ(card["replicas"][2]["healthy"], true) << card;
}

// A reload sets affinity and spill_threshold to the file's values, so it
// says when that undoes a PATCH; not when the file itself changed them, nor
// when the file now says what the PATCH did.
TEST(ProxyApi, AReloadSaysWhichRunTimeChangesItUndoes) {
  ::setenv("LMWARDEN_TEST_ADMIN", "s3cret", 1);
  FakeVllm fake{1};
  const auto config = [&](const std::string& model_extra) {
    return make_config({{fake.port(), 1}}, std::nullopt, "admin_token_env: LMWARDEN_TEST_ADMIN\n",
                       model_extra);
  };
  RunningWarden warden{config("")};
  const auto patch = [&](const std::string& body) {
    ASSERT_EQ(http_request(warden.port(), http::verb::patch, "/api/models/m", body,
                           {{"Authorization", "Bearer s3cret"}})
                  .status,
              200u);
  };
  const auto mentions_patch = [](const std::vector<std::string>& notes) {
    return std::ranges::any_of(
        notes, [](const std::string& n) { return n.find("PATCH had") != std::string::npos; });
  };
  patch(R"({"spill_threshold":4})");
  auto notes = warden.reload(config(""));
  EXPECT_NE(std::ranges::find(notes,
                              "model m: spill_threshold back to the file's auto (a PATCH "
                              "had set 4)"),
            notes.end())
      << ::testing::PrintToString(notes);
  EXPECT_EQ(warden.card()["spill_threshold_auto"], true);

  notes = warden.reload(config("    affinity: false\n"));  // the file's own change
  EXPECT_FALSE(mentions_patch(notes)) << ::testing::PrintToString(notes);
  patch(R"({"affinity":true,"spill_threshold":5})");
  // Affinity undone; the spill threshold now the file's too.
  notes = warden.reload(config("    affinity: false\n    spill_threshold: 5\n"));
  EXPECT_NE(std::ranges::find(notes,
                              "model m: affinity back to the file's false (a PATCH had set "
                              "true)"),
            notes.end())
      << ::testing::PrintToString(notes);
  EXPECT_EQ(
      std::ranges::count_if(
          notes, [](const std::string& n) { return n.find("PATCH had") != std::string::npos; }),
      1);
  ::unsetenv("LMWARDEN_TEST_ADMIN");
}

// A retry is not a spill: a conversation whose home answers 500 is served
// by the retry elsewhere, counted there as `retried`, and every other route
// counts each client request once.
TEST(ProxyApi, ARetryIsCountedAsRetriedAndNotAsASpill) {
  FakeVllm a{1}, b{1};
  RunningWarden warden{make_config({{a.port(), 1}, {b.port(), 1}})};
  auto turn = [&] {
    return http_request(warden.port(), http::verb::post, "/v1/chat/completions", chat_body("m"),
                        {{"session-id", "conv"}});
  };
  ASSERT_EQ(turn().status, 200u);
  FakeVllm& home = a.seen().empty() ? b : a;
  home.fail_with(500);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(turn().status, 200u);
  auto by_route = warden.routed();
  EXPECT_EQ(by_route["new"], 1);
  EXPECT_EQ(by_route["sticky"], 3);  // each turn tried its home first
  EXPECT_EQ(by_route["retried"], 3);
  EXPECT_EQ(by_route["spilled"], 0);
  const json card = warden.card();
  EXPECT_EQ(card["sticky_ratio"], 1.0) << card;  // a retry moves nothing
  int retried = 0;
  for (const auto& r : card["replicas"]) retried += r["retried"].get<int>();
  EXPECT_EQ(retried, 3);
}

// With affinity off, a server with ranks balances for itself; its requests
// are counted under replica "unassigned", as their tokens and in-flight are.
TEST(ProxyApi, RequestsTheServerBalancesAreCountedUnassigned) {
  FakeVllm fake{2};
  RunningWarden warden{make_config({{fake.port(), 2}}, std::nullopt, "", "    affinity: false\n")};
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", chat_body("m"))
                  .status,
              200u);
  const auto text = http_request(warden.port(), http::verb::get, "/metrics").body;
  double unassigned = 0;
  for (const auto& s : telemetry::parse_exposition(text).samples)
    if (s.name == "lmwarden_requests_total" && *s.label("replica") == "unassigned" &&
        *s.label("route") == "balanced")
      unassigned += s.value;
  EXPECT_EQ(unassigned, 2) << text;
  // The card has them too, apart from its replicas.
  const json card = warden.card();
  EXPECT_EQ(card["unassigned"]["balanced"], 2) << card;
  EXPECT_EQ(card["unassigned"]["in_flight"], 0) << card;
  for (const auto& r : card["replicas"]) EXPECT_EQ(r["balanced"], 0) << card;
}

}  // namespace
}  // namespace lmwarden::testing
