// The simulator's Responses store, as vLLM's with
// VLLM_ENABLE_RESPONSES_API_STORE=1: a reply is kept under its id, and a
// request naming it in `previous_response_id` is built as vLLM builds it —
// its instructions, the stored request's messages, the stored reply, then its
// input — so it costs the tokens, and finds the cache, that sending the whole
// conversation again would. GET /v1/responses/{id} gives a kept reply back
// as its client got it; POST /v1/responses/{id}/cancel refuses, as vLLM does
// for a response not run in the background. Without the store, or for an id
// not kept, 404.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/hardware_profile.h"
#include "sim/sim_server.h"
#include "sim_test_client.h"

namespace lmwarden::testing {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kModel = "sim-store-model";
constexpr std::string_view kStoreEnv = "VLLM_ENABLE_RESPONSES_API_STORE";

constexpr int cached_for(int prompt_tokens) {
  return (prompt_tokens - 1) / 16 * 16;
}

std::vector<std::string> sim_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> args{
      "sim",          "--listen", "127.0.0.1:0", "--model", std::string(kModel),
      "--time-scale", "50",       "--seed",      "5"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The environment variable is set either way, so that one exported where the
// tests run cannot turn the store on behind their back.
ProcessOptions store_env(std::string value) {
  return ProcessOptions{.env = {{std::string(kStoreEnv), std::move(value)}}};
}

Json turn(const Json& input, int max_output_tokens) {
  return Json{{"model", kModel}, {"input", input}, {"max_output_tokens", max_output_tokens}};
}

// The reply of a request that must succeed; any other status throws, which
// fails the test there.
Json post_ok(std::uint16_t port, const Json& body) {
  const HttpResponse res = http_request(port, "POST", "/v1/responses", body.dump());
  if (res.status != 200) {
    throw std::runtime_error("status " + std::to_string(res.status) + ": " + res.body);
  }
  return Json::parse(res.body);
}

std::string output_text(const Json& response) {
  return response.at("output").at(0).at("content").at(0).at("text").get<std::string>();
}

// An error in the OpenAI shape, with vLLM's err_type.
void expect_invalid_request(const HttpResponse& res, int status, const std::string& message) {
  EXPECT_EQ(res.status, status) << res.body;
  const Json error = Json::parse(res.body)["error"];
  EXPECT_EQ(error.at("message"), message);
  EXPECT_EQ(error.at("type"), "invalid_request_error");
  EXPECT_EQ(error.at("param"), nullptr);
  EXPECT_EQ(error.at("code"), status);
}

std::string not_found_message(const std::string& id) {
  return "Response with id '" + id + "' not found.";
}

void expect_not_found(std::uint16_t port, Json body, const std::string& id) {
  body["previous_response_id"] = id;
  expect_invalid_request(http_request(port, "POST", "/v1/responses", body.dump()), 404,
                         not_found_message(id));
}

HttpResponse retrieve(std::uint16_t port, const std::string& id, std::string_view query = {}) {
  return http_request(port, "GET", "/v1/responses/" + id + std::string(query));
}

HttpResponse cancel(std::uint16_t port, const std::string& id) {
  return http_request(port, "POST", "/v1/responses/" + id + "/cancel");
}

// The 404s of an id never kept: chained to, retrieved, cancelled.
void expect_unknown(std::uint16_t port, const std::string& id) {
  expect_not_found(port, turn("Continue.", 2), id);
  expect_invalid_request(retrieve(port, id), 404, not_found_message(id));
  expect_invalid_request(cancel(port, id), 404, not_found_message(id));
}

Json message(std::string_view role, std::string_view content) {
  return Json{{"role", role}, {"content", content}};
}

// Sends `whole` (the conversation in full, not kept) and checks that it is
// the prompt `chained` had, token for token: as many tokens, and every full
// block of them found in the cache the chained request filled.
void expect_same_prompt(std::uint16_t port, Json whole, const Json& chained) {
  whole["store"] = false;
  const Json usage = post_ok(port, whole)["usage"];
  const int tokens = chained.at("usage").at("input_tokens");
  EXPECT_EQ(usage.at("input_tokens"), tokens);
  EXPECT_EQ(usage.at("input_tokens_details").at("cached_tokens"), cached_for(tokens));
}

class SimResponsesStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sim_ = std::make_unique<SimProcess>(sim_args({"--enable-responses-store"}), store_env("0"));
  }
  static void TearDownTestSuite() { sim_.reset(); }
  static std::uint16_t port() { return sim_->port(); }

  static inline std::unique_ptr<SimProcess> sim_;
};

TEST_F(SimResponsesStoreTest, AChainedRequestIsTheWholeConversationToTheEngine) {
  Json first_body = turn("Describe the store of the Responses API in a few words.", 8);
  first_body["instructions"] = "You are terse.";
  const Json first = post_ok(port(), first_body);
  const std::string id = first.at("id");
  EXPECT_TRUE(id.starts_with("resp_")) << id;
  const int first_prompt = first.at("usage").at("input_tokens");
  ASSERT_GT(first_prompt, 16) << "at least one full block to find in the cache";

  Json second_body = turn("And what does it keep?", 4);
  second_body["previous_response_id"] = id;
  const Json second = post_ok(port(), second_body);
  const int second_prompt = second.at("usage").at("input_tokens");
  EXPECT_GT(second_prompt, first_prompt);
  EXPECT_GE(second.at("usage").at("input_tokens_details").at("cached_tokens"),
            cached_for(first_prompt))
      << "the first turn's prompt is the start of the second's";
  EXPECT_NE(second.at("id"), id);

  // The same conversation sent whole, as a client without the store sends it.
  Json whole = turn(Json::array({message("user", first_body["input"].get<std::string>()),
                                 message("assistant", output_text(first)),
                                 message("user", "And what does it keep?")}),
                    4);
  whole["instructions"] = "You are terse.";
  expect_same_prompt(port(), whole, second);
}

TEST_F(SimResponsesStoreTest, NewInstructionsGoBeforeTheStoredConversation) {
  Json first_body = turn("Name one prime number.", 5);
  first_body["instructions"] = "Answer in French.";
  const Json first = post_ok(port(), first_body);

  Json second_body = turn(Json::array({message("user", "Name another.")}), 3);
  second_body["instructions"] = "Answer in German.";
  second_body["previous_response_id"] = first.at("id");
  const Json second = post_ok(port(), second_body);

  // vLLM's order: the new instructions, the stored messages (the old
  // instructions among them), the stored reply, the new input.
  Json whole =
      turn(Json::array(
               {message("system", "Answer in French."), message("user", "Name one prime number."),
                message("assistant", output_text(first)), message("user", "Name another.")}),
           3);
  whole["instructions"] = "Answer in German.";
  expect_same_prompt(port(), whole, second);
}

// Each turn's instructions go before the conversation it continues, so in a
// chain the newest instructions come first.
TEST_F(SimResponsesStoreTest, ChainsGrowTurnByTurn) {
  Json a_body = turn("Turn one of a longer chain.", 4);
  a_body["instructions"] = "First instructions.";
  const Json a = post_ok(port(), a_body);
  Json b_body = turn("Turn two.", 4);
  b_body["instructions"] = "Second instructions.";
  b_body["previous_response_id"] = a.at("id");
  const Json b = post_ok(port(), b_body);
  Json c_body = turn("Turn three.", 4);
  c_body["previous_response_id"] = b.at("id");
  const Json c = post_ok(port(), c_body);

  Json whole =
      turn(Json::array({message("system", "First instructions."),
                        message("user", "Turn one of a longer chain."),
                        message("assistant", output_text(a)), message("user", "Turn two."),
                        message("assistant", output_text(b)), message("user", "Turn three.")}),
           4);
  whole["instructions"] = "Second instructions.";
  expect_same_prompt(port(), whole, c);
}

TEST_F(SimResponsesStoreTest, AnUnknownIdIsNotFound) {
  expect_unknown(port(), "resp_0123456789abcdef");
  expect_unknown(port(), "not-a-response-id");
  expect_not_found(port(), turn("Continue, please.", 2), "");
}

TEST_F(SimResponsesStoreTest, ARetrieveGivesTheReplyBackAsItsClientGotIt) {
  const Json reply = post_ok(port(), turn("Keep this reply to read it again.", 6));
  const HttpResponse got = retrieve(port(), reply.at("id"));
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.headers.at("content-type"), "application/json");
  EXPECT_EQ(Json::parse(got.body), reply);
}

TEST_F(SimResponsesStoreTest, ARetrieveGivesAStreamedReplyBackAsItsLastEvent) {
  Json body = turn("Stream a reply to read it again.", 6);
  body["stream"] = true;
  const HttpResponse streamed = http_request(port(), "POST", "/v1/responses", body.dump());
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const auto events = parse_sse(streamed.body);
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().event == "response.completed" ||
              events.back().event == "response.incomplete")
      << events.back().event;
  const Json last = Json::parse(events.back().data).at("response");
  const HttpResponse got = retrieve(port(), last.at("id"));
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(Json::parse(got.body), last);
}

// `stream=true` replays a background response's events in vLLM; the
// simulator keeps none. An unknown id is still a 404 first, as vLLM looks
// the id up before it streams.
TEST_F(SimResponsesStoreTest, ARetrieveWithStreamTrueIsRefused) {
  const Json reply = post_ok(port(), turn("A reply that cannot be replayed.", 3));
  const std::string id = reply.at("id");
  for (const std::string_view query :
       {"?stream=true", "?stream=1", "?starting_after=2&stream=True"}) {
    SCOPED_TRACE(query);
    const HttpResponse res = retrieve(port(), id, query);
    EXPECT_EQ(res.status, 400) << res.body;
    const Json error = Json::parse(res.body)["error"];
    EXPECT_EQ(error.at("type"), "invalid_request_error");
    EXPECT_NE(error.at("message").get<std::string>().find("background mode is not simulated"),
              std::string::npos)
        << error.at("message");
  }
  expect_invalid_request(retrieve(port(), "resp_0123456789abcdef", "?stream=true"), 404,
                         not_found_message("resp_0123456789abcdef"));

  const HttpResponse plain = retrieve(port(), id, "?stream=false&starting_after=0");
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(Json::parse(plain.body), reply);
  // Values FastAPI's validation refuses, which vLLM answers 400.
  EXPECT_EQ(retrieve(port(), id, "?stream=maybe").status, 400);
  EXPECT_EQ(retrieve(port(), id, "?starting_after=first").status, 400);
}

TEST_F(SimResponsesStoreTest, AKeptResponseCannotBeCancelled) {
  const Json reply = post_ok(port(), turn("A reply that finished long ago.", 3));
  expect_invalid_request(cancel(port(), reply.at("id")), 400,
                         "Cannot cancel a synchronous response.");
  // Refused, so nothing changed.
  const HttpResponse got = retrieve(port(), reply.at("id"));
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(Json::parse(got.body), reply);
}

TEST_F(SimResponsesStoreTest, ARequestChainedAfterARetrieveContinuesTheConversation) {
  const Json first_body = turn("Read me back, then continue from me.", 6);
  const Json first = post_ok(port(), first_body);
  ASSERT_EQ(retrieve(port(), first.at("id")).status, 200);
  EXPECT_EQ(cancel(port(), first.at("id")).status, 400);

  Json second_body = turn("Go on.", 3);
  second_body["previous_response_id"] = first.at("id");
  const Json second = post_ok(port(), second_body);
  Json whole =
      turn(Json::array({message("user", first_body["input"].get<std::string>()),
                        message("assistant", output_text(first)), message("user", "Go on.")}),
           3);
  expect_same_prompt(port(), whole, second);
}

// As FastAPI routes: each route has one method, and an id is one path
// segment, percent-decoded.
TEST_F(SimResponsesStoreTest, TheRoutesOfAKeptResponse) {
  const std::string id = post_ok(port(), turn("Route me.", 2)).at("id");
  EXPECT_EQ(http_request(port(), "POST", "/v1/responses/" + id).status, 405);
  EXPECT_EQ(http_request(port(), "DELETE", "/v1/responses/" + id).status, 405);
  EXPECT_EQ(http_request(port(), "GET", "/v1/responses/" + id + "/cancel").status, 405);
  for (const std::string& path :
       std::vector<std::string>{"/v1/responses/a/b", "/v1/responses/a%2Fb", "/v1/responses//cancel",
                                "/v1/responses/" + id + "/cancel/x"}) {
    SCOPED_TRACE(path);
    const HttpResponse res = http_request(port(), "GET", path);
    EXPECT_EQ(res.status, 404);
    EXPECT_EQ(Json::parse(res.body).at("detail"), "Not Found");
  }
  ASSERT_TRUE(id.starts_with("resp_"));
  EXPECT_EQ(retrieve(port(), "resp%5F" + id.substr(5)).status, 200);
}

TEST_F(SimResponsesStoreTest, APreviousResponseIdThatIsNoStringIsRefused) {
  Json body = turn("Continue, please.", 2);
  body["previous_response_id"] = 7;
  EXPECT_EQ(http_request(port(), "POST", "/v1/responses", body.dump()).status, 400);
  body["previous_response_id"] = nullptr;  // None: a new conversation
  post_ok(port(), body);
  body.erase("previous_response_id");
  body["store"] = "yes";
  EXPECT_EQ(http_request(port(), "POST", "/v1/responses", body.dump()).status, 400);
}

TEST_F(SimResponsesStoreTest, StoreFalseOrNullIsNotKept) {
  Json body = turn("Do not keep this one.", 3);
  body["store"] = false;
  const Json unkept = post_ok(port(), body);
  expect_not_found(port(), turn("Continue.", 2), unkept.at("id"));

  body["store"] = nullptr;  // vLLM's Optional[bool]: None is falsy
  const Json unkept_null = post_ok(port(), body);
  expect_not_found(port(), turn("Continue.", 2), unkept_null.at("id"));

  body["store"] = true;
  const Json kept = post_ok(port(), body);
  Json next = turn("Continue.", 2);
  next["previous_response_id"] = kept.at("id");
  post_ok(port(), next);
}

// A repeated key counts by its last occurrence, as Python's json (vLLM's
// reader, and the warden's) reads it.
TEST_F(SimResponsesStoreTest, ARepeatedKeyCountsByItsLast) {
  auto post = [&](const Json& body, std::string_view first_occurrence) {
    std::string text = body.dump();
    text.insert(1, std::string(first_occurrence) + ",");
    return http_request(port(), "POST", "/v1/responses", text);
  };
  Json body = turn("Keep this one after all.", 3);
  body["store"] = false;
  const HttpResponse unkept = post(body, R"("store":true)");
  ASSERT_EQ(unkept.status, 200) << unkept.body;
  expect_not_found(port(), turn("Continue.", 2), Json::parse(unkept.body).at("id"));

  body["store"] = true;
  const HttpResponse kept = post(body, R"("store":false)");
  ASSERT_EQ(kept.status, 200) << kept.body;
  Json next = turn("Continue.", 2);
  next["previous_response_id"] = Json::parse(kept.body).at("id");
  const HttpResponse chained = post(next, R"("previous_response_id":"resp_unknown")");
  EXPECT_EQ(chained.status, 200) << chained.body;
}

TEST_F(SimResponsesStoreTest, StreamedRepliesAreKeptAndCanChain) {
  Json first_body = turn("Stream the first turn of this conversation.", 6);
  first_body["stream"] = true;
  const HttpResponse first = http_request(port(), "POST", "/v1/responses", first_body.dump());
  ASSERT_EQ(first.status, 200) << first.body;
  const auto events = parse_sse(first.body);
  ASSERT_GE(events.size(), 2u);
  ASSERT_EQ(events.front().event, "response.created");
  const std::string id = Json::parse(events.front().data)["response"]["id"];
  const Json last = Json::parse(events.back().data)["response"];
  EXPECT_EQ(last.at("id"), id);
  const int first_prompt = last.at("usage").at("input_tokens");

  Json second_body = turn("Stream the second.", 3);
  second_body["stream"] = true;
  second_body["previous_response_id"] = id;
  const HttpResponse second = http_request(port(), "POST", "/v1/responses", second_body.dump());
  ASSERT_EQ(second.status, 200) << second.body;
  const auto second_events = parse_sse(second.body);
  ASSERT_FALSE(second_events.empty());
  const Json second_last = Json::parse(second_events.back().data)["response"];
  EXPECT_GT(second_last.at("usage").at("input_tokens"), first_prompt);
  EXPECT_GE(second_last.at("usage").at("input_tokens_details").at("cached_tokens"),
            cached_for(first_prompt));

  Json third = turn("Now without streaming.", 2);
  third["previous_response_id"] = second_last.at("id");
  EXPECT_GT(post_ok(port(), third)["usage"]["input_tokens"],
            second_last.at("usage").at("input_tokens"));
}

// As vLLM without VLLM_ENABLE_RESPONSES_API_STORE: `store: true` (the
// default) is quietly not honoured, so no id can be continued or retrieved.
TEST(SimResponsesWithoutStore, EveryIdIsUnknown) {
  SimProcess sim(sim_args(), store_env("0"));
  const Json first = post_ok(sim.port(), turn("Keep this, if you can.", 3));
  expect_unknown(sim.port(), first.at("id"));
}

TEST(SimResponsesStoreEnvironment, VllmsVariableTurnsTheStoreOn) {
  for (const std::string value : {"1", "TRUE"}) {
    SCOPED_TRACE(value);
    SimProcess sim(sim_args(), store_env(value));
    const Json first = post_ok(sim.port(), turn("Keep this one.", 3));
    Json next = turn("Continue.", 2);
    next["previous_response_id"] = first.at("id");
    post_ok(sim.port(), next);
  }
}

TEST(SimResponsesStoreEnvironment, AValueVllmCannotReadStopsTheStart) {
  // vLLM reads it with int() and fails to start on anything else.
  EXPECT_THROW(SimProcess(sim_args(), store_env("yes")), std::runtime_error);
}

// The limit, in process: past it the oldest response goes, while a kept
// response that continued it still holds the whole conversation.
TEST(SimResponsesStoreLimit, TheOldestGoesAndChainsStayWhole) {
  sim::SimOptions options;
  options.model = std::string(kModel);
  options.time_scale = 50;
  options.engine =
      engine::EngineConfig::from_profile(*engine::find_hardware_profile(engine::kDefaultProfile));
  options.responses_store = true;
  options.responses_store_limit = 2;
  sim::SimServer server(options);
  const std::uint16_t port = server.listen("127.0.0.1:0").port;
  server.start();

  const Json a = post_ok(port, turn("The oldest turn.", 3));
  Json b_body = turn("Its successor.", 3);
  b_body["previous_response_id"] = a.at("id");
  const Json b = post_ok(port, b_body);
  const Json c = post_ok(port, turn("Another conversation.", 3));  // a goes

  expect_not_found(port, turn("Continue.", 2), a.at("id"));
  Json after_b = turn("Continue.", 2);
  after_b["previous_response_id"] = b.at("id");
  after_b["store"] = false;  // keeps b and c as they are
  const Json continued = post_ok(port, after_b);
  Json whole =
      turn(Json::array({message("user", "The oldest turn."), message("assistant", output_text(a)),
                        message("user", "Its successor."), message("assistant", output_text(b)),
                        message("user", "Continue.")}),
           2);
  expect_same_prompt(port, whole, continued);
  Json after_c = turn("Continue.", 2);
  after_c["previous_response_id"] = c.at("id");
  post_ok(port, after_c);
  server.stop();
}

}  // namespace
}  // namespace lmwarden::testing
