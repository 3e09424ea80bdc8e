// End to end with real processes: two `lmwarden sim` servers that store
// Responses (as vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1) behind
// `lmwarden serve`. A client that chains its turns with previous_response_id
// and sends no session id (the OpenAI SDK's way) has each turn refused with
// 404 by a server that did not store the turn before; the warden sends each
// turn to the server that did.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "scratch.h"
#include "sim_test_client.h"

namespace lmwarden::testing {
namespace {

using nlohmann::json;

class StoringFleet {
 public:
  StoringFleet()
      : a_({"sim", "--listen", "127.0.0.1:0", "--served-model-name", "m", "--time-scale", "20",
            "--enable-responses-store"}),
        // vLLM's own switch, which the simulator reads too.
        b_({"sim", "--listen", "127.0.0.1:0", "--served-model-name", "m", "--time-scale", "20"},
           {.env = {{"VLLM_ENABLE_RESPONSES_API_STORE", "1"}}}),
        config_path_(write_config(dir_, a_.port(), b_.port())),
        warden_({"serve", "--config", config_path_, "--listen", "127.0.0.1:0", "--log-level",
                 "warn"}) {}

  std::uint16_t port() const { return warden_.port(); }
  json card() { return json::parse(http_request(port(), "GET", "/api/models/m").body); }

 private:
  static std::string write_config(const TempDir& dir, std::uint16_t a, std::uint16_t b) {
    const std::string path = dir.file("lmwarden.yaml");
    std::ofstream out{path};
    out << "listen: 127.0.0.1:0\nmodels:\n  - name: m\n    backends:\n"
        << "      - url: http://127.0.0.1:" << a << "\n"
        << "      - url: http://127.0.0.1:" << b << "\n";
    return path;
  }

  TempDir dir_{"lmwarden-e2e-responses"};  // first: the others use it
  SimProcess a_, b_;
  std::string config_path_;
  SimProcess warden_;
};

struct Turn {
  int status = 0;
  std::string id;  // the stored response's
  int input_tokens = 0;
  std::string body;
};

// One Responses turn, chained to `previous` when it is not empty; streamed
// or not. The id and usage come from the body, or from the stream's last
// event.
Turn respond(std::uint16_t port, const std::string& input, const std::string& previous,
             bool stream) {
  json body = {{"model", "m"}, {"input", input}, {"max_output_tokens", 4}, {"stream", stream}};
  if (!previous.empty()) body["previous_response_id"] = previous;
  const HttpResponse r = http_request(port, "POST", "/v1/responses", body.dump());
  Turn turn{.status = r.status, .body = r.body};
  if (r.status != 200) return turn;
  json response;
  if (stream) {
    // The last event that carries the response: response.completed, or
    // response.incomplete for one cut at max_output_tokens.
    for (const SseEvent& e : parse_sse(r.body))
      if (e.event == "response.completed" || e.event == "response.incomplete")
        response = json::parse(e.data)["response"];
  } else {
    response = json::parse(r.body);
  }
  if (!response.is_object()) return turn;
  turn.id = response.value("id", "");
  turn.input_tokens = response["usage"].value("input_tokens", 0);
  return turn;
}

TEST(EndToEndResponses, AChainedConversationKeepsToTheServerThatStoresIt) {
  StoringFleet fleet;
  std::vector<std::string> ids;  // of every stored response, on either server
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    Turn turn = respond(fleet.port(), "Tell me about the sea.", "", stream);
    ASSERT_EQ(turn.status, 200) << turn.body;
    ASSERT_FALSE(turn.id.empty()) << turn.body;
    ids.push_back(turn.id);
    for (int n = 2; n <= 6; ++n) {
      // A one-off request between turns, so that the least-loaded server
      // moves on: each server takes some of the anonymous requests.
      const Turn other = respond(fleet.port(), "Something else " + std::to_string(n), "", stream);
      ASSERT_EQ(other.status, 200);
      ids.push_back(other.id);
      const Turn next = respond(fleet.port(), "And then?", turn.id, stream);
      ASSERT_EQ(next.status, 200) << "turn " << n << ": " << next.body;
      EXPECT_GT(next.input_tokens, turn.input_tokens) << "the history comes from the store";
      turn = next;
      ids.push_back(turn.id);
    }
  }
  // Each one can be fetched again, from whichever server has it.
  for (const std::string& id : ids) {
    const HttpResponse r = http_request(fleet.port(), "GET", "/v1/responses/" + id);
    ASSERT_EQ(r.status, 200) << id << ": " << r.body;
    EXPECT_EQ(json::parse(r.body)["id"], id);
  }
  const HttpResponse cancel =
      http_request(fleet.port(), "POST", "/v1/responses/" + ids[0] + "/cancel");
  EXPECT_EQ(cancel.status, 400) << cancel.body;
  EXPECT_NE(cancel.body.find("Cannot cancel a synchronous response."), std::string::npos);
  const json card = fleet.card();
  int sticky = 0;
  for (const auto& r : card["replicas"]) sticky += r["sticky"].get<int>();
  // The chained turns, the fetches and the cancel.
  EXPECT_EQ(sticky, 2 * 5 + static_cast<int>(ids.size()) + 1) << card;
  // Every response is remembered: two chains of six, and ten one-offs.
  EXPECT_EQ(card["stored_responses"], 2 * 6 + 10) << card;
  const std::string metrics = http_request(fleet.port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("lmwarden_stored_responses{model=\"m\"} 22"), std::string::npos);
}

// A response the warden never saw (stored before it started, or forgotten):
// the request is placed as any other, and the server's own 404 says why.
TEST(EndToEndResponses, AnUnknownStoredResponseGetsTheServersOwnAnswer) {
  StoringFleet fleet;
  const Turn turn = respond(fleet.port(), "Hello?", "resp_never_stored", false);
  EXPECT_EQ(turn.status, 404);
  EXPECT_NE(turn.body.find("Response with id 'resp_never_stored' not found."), std::string::npos)
      << turn.body;
  EXPECT_EQ(fleet.card()["stored_responses"], 0);
}

// A response asked not to be stored (store: false, as Codex sends) is not
// remembered: nothing can chain to it.
TEST(EndToEndResponses, AResponseNotStoredIsNotRemembered) {
  StoringFleet fleet;
  json body = {{"model", "m"}, {"input", "Hi"}, {"max_output_tokens", 4}, {"store", false}};
  const HttpResponse r = http_request(fleet.port(), "POST", "/v1/responses", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(fleet.card()["stored_responses"], 0);
}

}  // namespace
}  // namespace lmwarden::testing
