// shared_homes with no Redis listening, or one that answers nothing: requests
// are placed by this warden alone, as without the section, and /metrics, a
// reload and a stop say what happens.
// (With a real Redis and two wardens: e2e_shared_homes_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fake_vllm.h"
#include "http_test_client.h"
#include "running_warden.h"
#include "scratch.h"
#include "silent_redis.h"
#include "telemetry/prometheus.h"

namespace lmwarden::testing {
namespace {

config::Config sharing_config(std::uint16_t backend, std::uint16_t redis,
                              const std::string& prefix = "t/") {
  return make_config({{backend, 2}}, std::nullopt,
                     "shared_homes:\n  redis: redis://127.0.0.1:" + std::to_string(redis) +
                         "\n  key_prefix: \"" + prefix + "\"\n");
}

std::map<std::string, double> shared_homes_metrics(std::uint16_t port) {
  const auto parsed =
      telemetry::parse_exposition(http_request(port, http::verb::get, "/metrics").body);
  std::map<std::string, double> out;
  for (const auto& s : parsed.samples) {
    if (!s.name.starts_with("lmwarden_shared_homes_")) continue;
    const std::string* result = s.label("result");
    out[s.name + (result ? "{" + *result + "}" : "")] = s.value;
  }
  return out;
}

TEST(ProxySharedHomes, WithRedisAbsentRequestsArePlacedByThisWardenAlone) {
  FakeVllm fake{2};
  const std::uint16_t redis = closed_port();
  RunningWarden warden{sharing_config(fake.port(), redis)};
  const auto body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  for (int turn = 0; turn < 3; ++turn) {
    const auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions", body,
                                {{"session-id", "alone"}});
    ASSERT_EQ(r.status, 200u) << r.body;
  }
  // Its first turn asked and was placed as new; the others were known here.
  const nlohmann::json card = warden.card();
  int fresh = 0, sticky = 0;
  for (const auto& r : card["replicas"]) {
    fresh += r["new"].get<int>();
    sticky += r["sticky"].get<int>();
  }
  EXPECT_EQ(fresh, 1) << card;
  EXPECT_EQ(sticky, 2) << card;
  const auto m = shared_homes_metrics(warden.port());
  EXPECT_EQ(m.at("lmwarden_shared_homes_lookups_total{failed}"), 1);
  EXPECT_EQ(m.at("lmwarden_shared_homes_lookups_total{found}"), 0);
  EXPECT_EQ(m.at("lmwarden_shared_homes_lookups_total{absent}"), 0);
  EXPECT_EQ(m.at("lmwarden_shared_homes_connected"), 0);
  // Each request told its home, and none reached Redis.
  const auto tries_to_tell = [&] {
    const auto now = shared_homes_metrics(warden.port());
    return now.at("lmwarden_shared_homes_writes_total{failed}") +
           now.at("lmwarden_shared_homes_writes_total{dropped}");
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (tries_to_tell() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(tries_to_tell(), 3);
  EXPECT_EQ(shared_homes_metrics(warden.port()).at("lmwarden_shared_homes_writes_total{sent}"), 0);
  // Each of those writes was a claim, and each failed.
  while (shared_homes_metrics(warden.port()).at("lmwarden_shared_homes_claims_total{failed}") < 3 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto after = shared_homes_metrics(warden.port());
  EXPECT_EQ(after.at("lmwarden_shared_homes_claims_total{failed}"), 3);
  for (const char* result : {"taken", "yielded", "kept", "unusable", "unchecked"})
    EXPECT_EQ(after.at(std::string("lmwarden_shared_homes_claims_total{") + result + "}"), 0);
  // /api/models says the same, for the dashboard.
  const auto api =
      nlohmann::json::parse(http_request(warden.port(), http::verb::get, "/api/models").body);
  const auto& shared = api["shared_homes"];
  EXPECT_EQ(shared["redis"], "redis://127.0.0.1:" + std::to_string(redis) + "/0") << api;
  EXPECT_EQ(shared["connected"], false);
  EXPECT_EQ(shared["lookups"]["failed"], 1);
  EXPECT_EQ(shared["lookups"]["found"], 0);
  EXPECT_EQ(shared["claims"]["failed"], 3);
  EXPECT_EQ(shared["claims"]["kept"], 0);
  EXPECT_EQ(shared["claims"]["unchecked"], 0);
  EXPECT_EQ(shared["writes"]["failed"].get<int>() + shared["writes"]["dropped"].get<int>(), 3);
}

// A request gives up on its lookup after shared_homes.timeout, and may end
// while the store still holds that lookup (queued behind an unanswered write,
// or sent and unanswered). A stop then must hand the failed answer to the
// request's I/O context before that context goes (a use after free, which
// ASan reports, when the store was stopped after the contexts).
TEST(ProxySharedHomes, AStopWhileTheStoreHoldsTheLookupOfARequestThatEndedIsClean) {
  SilentRedis redis{SilentRedis::Ping::kAlways};
  FakeVllm fake{2};
  config::Config cfg =
      make_config({{fake.port(), 2}}, std::nullopt,
                  "shared_homes:\n  redis: redis://127.0.0.1:" + std::to_string(redis.port()) +
                      "\n  timeout: 300ms\n");
  const auto body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  {
    RunningWarden warden{std::move(cfg)};
    ASSERT_TRUE(eventually([&] {
      return shared_homes_metrics(warden.port()).at("lmwarden_shared_homes_connected") == 1;
    }));
    // The first asks (unanswered), then claims its new home (unanswered:
    // the store waits 300 ms for it); the second's lookup comes after it.
    for (const char* conversation : {"first", "second"}) {
      const auto r = http_request(warden.port(), http::verb::post, "/v1/chat/completions", body,
                                  {{"session-id", conversation}});
      ASSERT_EQ(r.status, 200u) << r.body;
    }
    const auto m = shared_homes_metrics(warden.port());
    EXPECT_EQ(m.at("lmwarden_shared_homes_lookups_total{failed}"), 2) << "both gave up";
    EXPECT_EQ(m.at("lmwarden_shared_homes_lookups_total{found}") +
                  m.at("lmwarden_shared_homes_lookups_total{absent}"),
              0);
  }  // stopped here, the second lookup still held
  EXPECT_GE(redis.seen("GET"), 1) << "the store sent a lookup";
}

TEST(ProxySharedHomes, AnonymousAndPinnedRequestsAskNothing) {
  FakeVllm fake{2};
  RunningWarden warden{sharing_config(fake.port(), closed_port())};
  const auto body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", body).status,
            200u);
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", body,
                         {{"X-data-parallel-rank", "1"}, {"session-id", "pinned"}})
                .status,
            200u);
  const auto m = shared_homes_metrics(warden.port());
  EXPECT_EQ(m.at("lmwarden_shared_homes_lookups_total{failed}"), 0);
  EXPECT_EQ(m.at("lmwarden_shared_homes_writes_total{failed}"), 0);
}

TEST(ProxySharedHomes, WithoutTheSectionItsFamiliesHaveNoSamples) {
  FakeVllm fake{1};
  RunningWarden warden{make_config({{fake.port(), 1}})};
  const auto text = http_request(warden.port(), http::verb::get, "/metrics").body;
  EXPECT_NE(text.find("# TYPE lmwarden_shared_homes_lookups_total counter"), std::string::npos);
  EXPECT_TRUE(shared_homes_metrics(warden.port()).empty());
  const auto api =
      nlohmann::json::parse(http_request(warden.port(), http::verb::get, "/api/models").body);
  EXPECT_FALSE(api.contains("shared_homes")) << api;
}

TEST(ProxySharedHomes, AReloadThatChangesTheSectionSaysItWaitsForARestart) {
  FakeVllm fake{2};
  const std::uint16_t redis = closed_port();
  RunningWarden warden{sharing_config(fake.port(), redis)};
  const auto said = [](const std::vector<std::string>& notes) {
    return std::ranges::any_of(notes, [](const std::string& n) {
      return n == "shared_homes changed; it takes effect at the next restart";
    });
  };
  EXPECT_FALSE(said(warden.reload(sharing_config(fake.port(), redis))));
  EXPECT_TRUE(said(warden.reload(sharing_config(fake.port(), redis, "other/"))));
  EXPECT_TRUE(said(warden.reload(make_config({{fake.port(), 2}}))));
  // Still sharing, as at the start.
  EXPECT_FALSE(shared_homes_metrics(warden.port()).empty());
}

}  // namespace
}  // namespace lmwarden::testing
