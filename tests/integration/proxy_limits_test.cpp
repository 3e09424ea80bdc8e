// limits.max_connections as an operator sees it: connections over the limit
// are closed at once, counted in /metrics, and every one of them is said in
// the log, the later ones within 10 s.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "captured_log.h"
#include "fake_vllm.h"
#include "hostile_client.h"
#include "metric_probe.h"
#include "running_warden.h"

namespace lmwarden::testing {
namespace {

using namespace std::chrono_literals;

TEST(ProxyLimits, ConnectionsOverTheLimitAreCountedAndEachIsSaid) {
  FakeVllm fake{1};
  RunningWarden warden{load_test_config(
      "listen: 127.0.0.1:0\nlimits:\n  max_connections: 3\nmodels:\n  - name: m\n    backends:\n"
      "      - url: http://127.0.0.1:" +
      std::to_string(fake.port()) + "\n")};
  CapturedLog log;
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawClient>(warden.port()));
    ASSERT_TRUE(held.back()->send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    ASSERT_TRUE(held.back()->read_response(5s)) << "connection " << i << " was not served";
  }
  const auto refused_connection = [&] {
    RawClient extra{warden.port()};
    EXPECT_TRUE(extra.wait_closed(5s)) << "a connection over the limit stayed open";
  };
  refused_connection();
  // The first is said at once.
  EXPECT_TRUE(eventually([&] { return !log.containing("connection(s) refused").empty(); }, 2s));
  EXPECT_EQ(log.containing("1 connection(s) refused: limits.max_connections (3) reached").size(),
            1u);
  // The next ones within 10 s of it, though no refusal follows them.
  for (int i = 0; i < 4; ++i) refused_connection();
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(log.containing("connection(s) refused").size(), 1u)
      << "said more often than every 10 s";
  EXPECT_TRUE(eventually(
      [&] {
        return log.containing("4 connection(s) refused: limits.max_connections (3) reached")
                   .size() == 1;
      },
      12s));

  held.pop_back();  // room for the scrape
  EXPECT_TRUE(
      eventually([&] { return metric(warden.port(), "lmwarden_connections_refused_total") == 5; }));
}

}  // namespace
}  // namespace lmwarden::testing
