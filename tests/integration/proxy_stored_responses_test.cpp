// Responses the servers store (Responses' `store`), over real sockets in
// front of in-process fake vLLM servers: where a stored response's own routes
// go, when the warden learns where a response is stored, and which model a
// stored response belongs to. (Chains across servers, with the simulator's
// store: e2e_responses_test.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "fake_vllm.h"
#include "http_test_client.h"
#include "metric_probe.h"
#include "running_warden.h"

namespace lmwarden::testing {
namespace {

using nlohmann::json;

// A streamed chat turn: the fake server then reports no usage, so it books
// no tokens.
constexpr const char* kStreamedChat =
    R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})";

// A stored response's own routes (GET /v1/responses/{id}, POST
// /v1/responses/{id}/cancel) carry no model and no body: they go where the
// response is stored, counted as sticky, and their replies, which hold the
// response again, book no tokens a second time.
TEST(ProxyRouting, AStoredResponsesOwnRoutesGoWhereItIsStored) {
  FakeVllm one{1}, two{1};
  RunningWarden warden{make_config({{one.port(), 1}, {two.port(), 1}})};
  const auto made = http_request(warden.port(), http::verb::post, "/v1/responses",
                                 R"({"model":"m","input":"hi","stream":false})",
                                 {{"x-fake-response-id", "resp_1"}});
  ASSERT_EQ(made.status, 200u) << made.body;
  FakeVllm& stored = one.seen().size() == 1 ? one : two;
  FakeVllm& other = &stored == &one ? two : one;
  int between = 0;
  for (const std::string target : {"/v1/responses/resp_1", "/v1/responses/resp_1?include=x"}) {
    for (int i = 0; i < 2; ++i) {
      // The same reply as when it was made, usage included.
      const auto r = http_request(warden.port(), http::verb::get, target, "",
                                  {{"x-fake-response-id", "resp_1"}});
      EXPECT_EQ(r.status, 200u) << r.body;
      ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/chat/completions", kStreamedChat,
                             {{"session-id", "between" + std::to_string(between++)}})
                    .status,
                200u);
    }
  }
  // Escaped as a client may escape it, the id is the same; a body, which
  // the route does not read, is not refused for not being JSON.
  const auto cancel =
      http_request(warden.port(), http::verb::post, "/v1/responses/resp%5f1/cancel", "not json");
  EXPECT_EQ(cancel.status, 200u) << cancel.body;
  std::vector<std::string> there;
  for (const auto& s : stored.seen())
    if (s.path.starts_with("/v1/responses/")) there.push_back(s.path);
  EXPECT_EQ(there,
            (std::vector<std::string>{
                "/v1/responses/resp_1", "/v1/responses/resp_1", "/v1/responses/resp_1?include=x",
                "/v1/responses/resp_1?include=x", "/v1/responses/resp%5f1/cancel"}));
  for (const auto& s : other.seen()) EXPECT_FALSE(s.path.starts_with("/v1/responses")) << s.path;
  const json card = warden.card();
  int sticky = 0;
  for (const auto& r : card["replicas"]) sticky += r["sticky"].get<int>();
  EXPECT_EQ(sticky, 5) << card;
  EXPECT_EQ(metric(warden.port(), "lmwarden_prompt_tokens_total", {{"source", "cached"}}), 64)
      << "counted once, when the response was made";
  // Other methods and shapes are no route of the warden's.
  EXPECT_EQ(http_request(warden.port(), http::verb::delete_, "/v1/responses/resp_1").status, 405u);
  EXPECT_EQ(http_request(warden.port(), http::verb::get, "/v1/responses/resp_1/x").status, 404u);
  EXPECT_EQ(http_request(warden.port(), http::verb::get, "/v1/responses/").status, 404u);
}

// A streamed reply that stores its response names it in its first event
// (response.created): the warden remembers where from then on, not only once
// the reply ends, so that its place is known (and told to other wardens)
// long before a client could chain to it.
TEST(ProxyRouting, AStreamedStoredResponseIsRememberedFromItsFirstEvent) {
  FakeVllm one{1}, two{1};
  RunningWarden warden{make_config({{one.port(), 1}, {two.port(), 1}})};
  std::atomic<unsigned> status{0};
  std::thread client([&] {
    status = http_request(warden.port(), http::verb::post, "/v1/responses",
                          R"({"model":"m","input":"hi","stream":true})",
                          {{"x-fake-response-id", "resp_s"}, {"x-fake-hold", "1"}})
                 .status;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (one.held_total() + two.held_total() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // The first event has left; the reply is held open.
  double remembered = 0;
  while ((remembered = metric(warden.port(), "lmwarden_stored_responses")) == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(remembered, 1) << "not remembered while the reply was still streaming";
  EXPECT_EQ(one.held_total() + two.held_total(), 1);
  one.release();
  two.release();
  client.join();
  EXPECT_EQ(status, 200u);
  EXPECT_EQ(metric(warden.port(), "lmwarden_stored_responses"), 1);
}

// With several models, a stored response's routes go to the model that
// remembers it; one that no model remembers is answered here.
TEST(ProxyRouting, AStoredResponseFindsItsModelAmongSeveral) {
  FakeVllm first{1}, second{1};
  const std::string yaml =
      "listen: 127.0.0.1:0\nmodels:\n"
      "  - name: m\n    backends:\n      - url: http://127.0.0.1:" +
      std::to_string(first.port()) +
      "\n  - name: n\n    backends:\n      - url: http://127.0.0.1:" +
      std::to_string(second.port()) + "\n";
  RunningWarden warden{load_test_config(yaml)};
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/responses",
                         R"({"model":"n","input":"hi","stream":false})",
                         {{"x-fake-response-id", "resp_n"}})
                .status,
            200u);
  EXPECT_EQ(http_request(warden.port(), http::verb::get, "/v1/responses/resp_n").status, 200u);
  EXPECT_EQ(second.seen().size(), 2u);
  EXPECT_EQ(first.seen().size(), 0u);
  const auto unknown = http_request(warden.port(), http::verb::get, "/v1/responses/resp_zz");
  EXPECT_EQ(unknown.status, 404u);
  EXPECT_NE(unknown.body.find("Response with id 'resp_zz' not found"), std::string::npos)
      << unknown.body;
  EXPECT_EQ(json::parse(unknown.body)["error"]["type"], "invalid_request_error") << unknown.body;
  EXPECT_EQ(
      metric(warden.port(), "lmwarden_refused_requests_total", {{"reason", "unknown_response"}}),
      1);
}

// Two models of one server, the first with client keys: a stored response
// of the first is the first's, whatever model a body on its routes names, so
// a client without a key cannot read or cancel it by naming the second.
TEST(ProxyRouting, AStoredResponseAsksForTheKeysOfTheModelThatMadeIt) {
  ::setenv("LMWARDEN_TEST_STORED_KEY", "stored-key", 1);
  FakeVllm server{1};
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  RunningWarden warden{load_test_config(
      "listen: 127.0.0.1:0\nmodels:\n"
      "  - name: keyed\n    api_keys_env: [LMWARDEN_TEST_STORED_KEY]\n    backends:\n"
      "      - url: " +
      url +
      "\n"
      "  - name: open\n    backends:\n      - url: " +
      url + "\n")};
  ASSERT_EQ(http_request(warden.port(), http::verb::post, "/v1/responses",
                         R"({"model":"keyed","input":"hi","stream":false})",
                         {{"x-fake-response-id", "resp_k"}, {"Authorization", "Bearer stored-key"}})
                .status,
            200u);
  EXPECT_EQ(http_request(warden.port(), http::verb::get, "/v1/responses/resp_k").status, 401u);
  EXPECT_EQ(
      http_request(warden.port(), http::verb::get, "/v1/responses/resp_k", R"({"model":"open"})")
          .status,
      401u);
  EXPECT_EQ(http_request(warden.port(), http::verb::post, "/v1/responses/resp_k/cancel",
                         R"({"model":"open"})")
                .status,
            401u);
  EXPECT_EQ(server.seen().size(), 1u) << "none of the three reached the server";
  EXPECT_EQ(http_request(warden.port(), http::verb::get, "/v1/responses/resp_k",
                         R"({"model":"open"})", {{"x-api-key", "stored-key"}})
                .status,
            200u);
}

}  // namespace
}  // namespace lmwarden::testing
