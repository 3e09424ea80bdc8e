// End to end with real processes: `lmwarden sim` (4 simulated ranks) behind
// `lmwarden serve`. A conversation's second turn is served from the prefix
// cache of the rank that read the first turn when affinity is on; with
// affinity off, vLLM's balancer sends it to whichever rank is least busy, which
// has never seen it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sim_test_client.h"

namespace lmwarden::testing {
namespace {

using nlohmann::json;

class Fleet {
 public:
  Fleet()
      // vLLM's own spellings of --dp and --model, as an operator may type them.
      : sim_({"sim", "--listen", "127.0.0.1:0", "--data-parallel-size", "4", "--served-model-name",
              "qwen3-4b", "--time-scale", "5"}),
        config_path_(write_config(sim_.port())),
        warden_({"serve", "--config", config_path_, "--listen", "127.0.0.1:0", "--log-level", "warn"}) {}
  ~Fleet() { std::remove(config_path_.c_str()); }

  std::uint16_t port() const { return warden_.port(); }

  json card() { return json::parse(http_request(port(), "GET", "/api/models/qwen3-4b").body); }
  void set_affinity(bool on) {
    const auto r = http_request(port(), "PATCH", "/api/models/qwen3-4b", json{{"affinity", on}}.dump(),
                                {{"Authorization", "Bearer e2e-token"}});
    ASSERT_EQ(r.status, 200) << r.body;
  }

 private:
  static std::string write_config(std::uint16_t sim_port) {
    ::setenv("LMWARDEN_E2E_ADMIN", "e2e-token", 1);
    char path[] = "/tmp/lmwarden-e2e-XXXXXX.yaml";
    const int fd = ::mkstemps(path, 5);
    if (fd < 0) throw std::runtime_error("mkstemps failed");
    ::close(fd);
    std::ofstream out{path};
    out << "listen: 127.0.0.1:0\nadmin_token_env: LMWARDEN_E2E_ADMIN\nmodels:\n  - name: qwen3-4b\n"
           "    backends:\n      - url: http://127.0.0.1:" << sim_port << "\n        data_parallel_size: 4\n";
    return path;
  }

  SimProcess sim_;
  std::string config_path_;
  SimProcess warden_;
};

std::string long_text(const std::string& seed, int words) {
  std::string s;
  for (int i = 0; i < words; ++i) s += seed + std::to_string(i % 97) + " ";
  return s;
}

json turn_messages(const std::string& conv, int turns) {
  json messages = json::array();
  messages.push_back({{"role", "system"}, {"content", long_text("system", 600)}});
  messages.push_back({{"role", "user"}, {"content", long_text(conv, 400)}});
  for (int t = 1; t < turns; ++t) {
    messages.push_back({{"role", "assistant"}, {"content", "reply " + std::to_string(t)}});
    messages.push_back({{"role", "user"}, {"content", long_text(conv + "-turn" + std::to_string(t), 50)}});
  }
  return messages;
}

// One non-streamed turn; returns usage.prompt_tokens_details.cached_tokens (0 when null).
int cached_tokens(std::uint16_t port, const std::string& conv, int turn) {
  const json body = {{"model", "qwen3-4b"}, {"max_tokens", 4}, {"messages", turn_messages(conv, turn)}};
  const auto r = http_request(port, "POST", "/v1/chat/completions", body.dump(), {{"session-id", conv}});
  EXPECT_EQ(r.status, 200) << r.body;
  const json usage = json::parse(r.body)["usage"];
  const auto& details = usage["prompt_tokens_details"];
  return details.is_object() && details["cached_tokens"].is_number() ? details["cached_tokens"].get<int>() : 0;
}

// Keeps rank 0 busy: a long streamed reply pinned there, open until destroyed.
class BusyRank0 {
 public:
  explicit BusyRank0(std::uint16_t port) : c_(port) {
    const json body = {{"model", "qwen3-4b"}, {"max_tokens", 4000}, {"stream", true},
                       {"messages", {{{"role", "user"}, {"content", "keep busy"}}}}};
    c_.send_request("POST", "/v1/chat/completions", body.dump(), {{"X-data-parallel-rank", "0"}});
    EXPECT_TRUE(c_.read_until([](const std::string& raw) { return raw.find("data: ") != std::string::npos; }));
  }
  ~BusyRank0() { c_.close(); }

 private:
  Connection c_;
};

TEST(EndToEnd, SecondTurnIsServedFromTheSameRanksCacheWithAffinity) {
  Fleet fleet;
  EXPECT_EQ(cached_tokens(fleet.port(), "conv-on", 1), 0) << "a new conversation has nothing cached";
  const json after_first = fleet.card();
  int home = -1;
  for (const auto& r : after_first["replicas"])
    if (r["new"] == 1) home = r["index"];
  ASSERT_GE(home, 0);
  {
    BusyRank0 busy{fleet.port()};  // the least busy rank is now never rank 0
    const int cached = cached_tokens(fleet.port(), "conv-on", 2);
    EXPECT_GT(cached, 1000) << "turn 2 should reuse turn 1's prefix";
  }
  const json card = fleet.card();
  EXPECT_EQ(card["replicas"][home]["sticky"], 1);
}

TEST(EndToEnd, WithAffinityOffVllmsBalancerSendsTheTurnWhereNothingIsCached) {
  Fleet fleet;
  fleet.set_affinity(false);
  // Idle ranks tie and vLLM's balancer takes the lowest: turn 1 runs on rank 0.
  EXPECT_EQ(cached_tokens(fleet.port(), "conv-off", 1), 0);
  BusyRank0 busy{fleet.port()};
  // Rank 0 is now the busiest, so turn 2 lands on another rank and is prefilled again.
  EXPECT_EQ(cached_tokens(fleet.port(), "conv-off", 2), 0);
  fleet.set_affinity(true);
}

}  // namespace
}  // namespace lmwarden::testing
