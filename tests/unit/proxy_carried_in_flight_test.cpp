// A reload that changes a model's replicas while requests run: the requests
// the replaced routing state sent are counted by the state that replaced it
// where they run, ended there when they end, and a Responses response one of
// them stores is remembered there (RoutingState::carried_to, InFlight).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/coarse_clock.h"
#include "common/hash.h"
#include "config/config_loader.h"
#include "proxy/warden.h"

namespace lmwarden::proxy {
namespace {

// Model m on the servers of these ports, each of `ranks` ranks.
std::shared_ptr<ModelSet> models(const std::vector<int>& ports, const ModelSet* previous,
                                 int ranks = 2) {
  std::string yaml = "listen: 127.0.0.1:0\nmodels:\n  - name: m\n    backends:\n";
  for (const int port : ports)
    yaml += "      - url: http://127.0.0.1:" + std::to_string(port) +
            "\n        data_parallel_size: " + std::to_string(ranks) + "\n";
  auto config = config::load_config_string(yaml, "test.yaml");
  EXPECT_TRUE(config) << config.error().message();
  return make_model_set(std::move(config).value(), previous);
}

core::Identity session(const std::string& id) {
  return {.kind = core::IdentityKind::kSession, .session_hash = stable_hash(id)};
}

core::RouteDecision route(ModelState& model, const std::string& id) {
  std::lock_guard lock{model.mutex};
  return model.router.route(session(id), coarse_steady_now());
}

int in_flight(const ModelSet& set) {
  return set.models[0]->view().in_flight;
}

TEST(CarriedInFlight, ARequestIsCountedAlongEachReloadUntilItEnds) {
  auto first = models({9001}, nullptr);
  ModelState& m = *first->models[0];
  const core::RouteDecision d = route(m, "conv");
  ASSERT_TRUE(d.ok());
  auto request = std::make_unique<InFlight>(m, d);
  auto second = models({9001, 9002}, first.get());  // a server added
  auto third = models({9003, 9001}, second.get());  // another, first in the list
  EXPECT_EQ(in_flight(*second), 1);
  ASSERT_EQ(in_flight(*third), 1);
  // On the same server and rank, whatever its index now.
  const auto now = third->models[0]->view();
  EXPECT_EQ(now.replicas[static_cast<std::size_t>(2 + d.replica)].in_flight, 1);
  request.reset();  // the request ends
  EXPECT_EQ(in_flight(*first), 0);
  EXPECT_EQ(in_flight(*second), 0);
  EXPECT_EQ(in_flight(*third), 0);
}

TEST(CarriedInFlight, AReloadThatDropsItsServerLetsGoOfIt) {
  auto first = models({9001}, nullptr);
  ModelState& m = *first->models[0];
  auto request = std::make_unique<InFlight>(m, route(m, "conv"));
  auto without = models({9002}, first.get());
  auto back = models({9001}, without.get());
  EXPECT_EQ(in_flight(*without), 0);
  EXPECT_EQ(in_flight(*back), 0);
  request.reset();
  EXPECT_EQ(in_flight(*back), 0);
  // The state after the one that dropped it routes as before.
  ModelState& now = *back->models[0];
  InFlight again{now, route(now, "conv")};
  EXPECT_EQ(in_flight(*back), 1);
}

TEST(CarriedInFlight, AResponseStoredAfterTheReloadIsRememberedByTheStateInForce) {
  auto first = models({9001}, nullptr);
  ModelState& m = *first->models[0];
  const core::RouteDecision d = route(m, "conv");
  InFlight request{m, d};
  auto second = models({9001, 9002}, first.get());
  request.stored("resp_1");
  ModelState& now = *second->models[0];
  std::lock_guard lock{now.mutex};
  EXPECT_TRUE(now.router.holds_response(stable_hash("resp_1"), coarse_steady_now()));
}

}  // namespace
}  // namespace lmwarden::proxy
