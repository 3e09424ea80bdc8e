// `lmwarden sim` over real sockets: every route, streaming and not, field by
// field; rank pinning; the internal balancer; /metrics; disconnects; the real
// client captures. One simulator process (2 ranks, time-scaled) serves the
// suite; each test uses its own prompt text so caches do not interfere.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "sim_test_client.h"

namespace lmwarden::testing {
namespace {

using Json = nlohmann::json;
using Headers = std::vector<std::pair<std::string, std::string>>;

constexpr std::string_view kModel = "sim-test-model";

// name{labels} → value, labels kept verbatim (the simulator writes them sorted).
std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

std::string series(std::string_view name, int engine) {
  return std::string(name) + "{engine=\"" + std::to_string(engine) + "\",model_name=\"" +
         std::string(kModel) + "\"}";
}

class SimServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sim_ = std::make_unique<SimProcess>(
        std::vector<std::string>{"sim", "--listen", "127.0.0.1:0", "--dp", "2", "--model",
                                 std::string(kModel), "--time-scale", "50", "--seed", "3"});
  }
  static void TearDownTestSuite() {
    const int status = sim_->terminate();
    EXPECT_TRUE(WIFEXITED(status)) << "killed by a signal: " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
    sim_.reset();
  }

  static std::uint16_t port() { return sim_->port(); }

  static HttpResponse post(std::string_view target, const Json& body, const Headers& headers = {}) {
    return http_request(port(), "POST", target, body.dump(), headers);
  }

  static std::map<std::string, double> metrics() {
    const HttpResponse res = http_request(port(), "GET", "/metrics");
    EXPECT_EQ(res.status, 200);
    return parse_metrics(res.body);
  }

  static Json chat_body(const std::string& text, int max_tokens) {
    return Json{{"model", kModel},
                {"messages",
                 {{{"role", "system"}, {"content", "You are a careful engineer."}},
                  {{"role", "user"}, {"content", text}}}},
                {"max_tokens", max_tokens}};
  }

  static Json messages_body(const std::string& text, int max_tokens) {
    return Json{
        {"model", kModel},
        {"system", "You are a careful engineer."},
        {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", text}}}}}}},
        {"max_tokens", max_tokens}};
  }

  static inline std::unique_ptr<SimProcess> sim_;
};

constexpr int cached_for(int prompt_tokens) {
  return (prompt_tokens - 1) / 16 * 16;
}

TEST_F(SimServerTest, ChatCompletionReportsUsageAndCachedTokensOnTheSameRank) {
  const Json body =
      chat_body("Explain how the prefix cache works for chat turn one, in detail.", 8);
  const HttpResponse first = post("/v1/chat/completions", body, {{"X-data-parallel-rank", "0"}});
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.headers.at("content-type"), "application/json");
  const Json a = Json::parse(first.body);
  EXPECT_TRUE(a["id"].get<std::string>().starts_with("chatcmpl-"));
  EXPECT_EQ(a["object"], "chat.completion");
  EXPECT_EQ(a["model"], kModel);
  EXPECT_TRUE(a["created"].is_number_integer());
  ASSERT_EQ(a["choices"].size(), 1u);
  EXPECT_EQ(a["choices"][0]["index"], 0);
  EXPECT_EQ(a["choices"][0]["message"]["role"], "assistant");
  EXPECT_FALSE(a["choices"][0]["message"]["content"].get<std::string>().empty());
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  const int prompt = a["usage"]["prompt_tokens"];
  EXPECT_GT(prompt, 16);
  EXPECT_EQ(a["usage"]["completion_tokens"], 8);
  EXPECT_EQ(a["usage"]["total_tokens"], prompt + 8);
  EXPECT_TRUE(a["usage"]["prompt_tokens_details"].is_null()) << "nothing cached yet";

  const Json b =
      Json::parse(post("/v1/chat/completions", body, {{"x-data-parallel-rank", "0"}}).body);
  EXPECT_EQ(b["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], cached_for(prompt));
  EXPECT_EQ(b["choices"][0]["message"]["content"], a["choices"][0]["message"]["content"])
      << "output is deterministic";
  EXPECT_NE(b["id"], a["id"]);

  const Json c =
      Json::parse(post("/v1/chat/completions", body, {{"X-data-parallel-rank", "1"}}).body);
  EXPECT_TRUE(c["usage"]["prompt_tokens_details"].is_null()) << "rank 1 never saw this prompt";
}

TEST_F(SimServerTest, ALongReplySentBackAsHistoryIsCachedToItsLastFullBlock) {
  constexpr int kReply = 1500;
  Json body = chat_body("Write a long design note about the request router, turn one.", kReply);
  const Headers rank0{{"X-data-parallel-rank", "0"}};
  const HttpResponse first = post("/v1/chat/completions", body, rank0);
  ASSERT_EQ(first.status, 200) << first.body;
  const Json a = Json::parse(first.body);
  ASSERT_EQ(a["usage"]["completion_tokens"], kReply);
  const int prompt = a["usage"]["prompt_tokens"];

  body["messages"].push_back(
      {{"role", "assistant"}, {"content", a["choices"][0]["message"]["content"]}});
  body["messages"].push_back({{"role", "user"}, {"content", "Now shorten it."}});
  body["max_tokens"] = 4;
  const Json b = Json::parse(post("/v1/chat/completions", body, rank0).body);
  // The turn-one prompt and every generated token but the last have KV; the
  // reply's last block may end in the message's closing text, so one block
  // of slack.
  const int computed = prompt + kReply - 1;
  EXPECT_GE(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            computed / 16 * 16 - 16)
      << "prompt " << prompt << ", reply " << kReply;
}

TEST_F(SimServerTest, ChatCompletionStreamsChunksThenUsageThenDone) {
  Json body = chat_body("Stream a short answer about chunked prefill and budgets, please.", 6);
  const std::string expected =
      Json::parse(post("/v1/chat/completions", body, {{"X-data-parallel-rank", "1"}})
                      .body)["choices"][0]["message"]["content"];
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const HttpResponse res = post("/v1/chat/completions", body, {{"X-data-parallel-rank", "1"}});
  ASSERT_EQ(res.status, 200);
  EXPECT_TRUE(res.headers.at("content-type").starts_with("text/event-stream"));
  const auto events = parse_sse(res.body);
  ASSERT_GE(events.size(), 9u);  // role + 6 tokens + usage + [DONE]
  for (const auto& ev : events)
    EXPECT_TRUE(ev.event.empty()) << "OpenAI streams have no event lines";
  EXPECT_EQ(events.back().data, "[DONE]");

  const Json first = Json::parse(events[0].data);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));

  std::string text;
  for (std::size_t i = 1; i + 2 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i].data);
    EXPECT_EQ(chunk["id"], first["id"]);
    text += chunk["choices"][0]["delta"]["content"].get<std::string>();
    const bool last = i + 3 == events.size();
    EXPECT_EQ(chunk["choices"][0]["finish_reason"].is_null(), !last);
    if (last) {
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
    }
  }
  EXPECT_EQ(text, expected);

  const Json usage_chunk = Json::parse(events[events.size() - 2].data);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 6);
  const int prompt = usage_chunk["usage"]["prompt_tokens"];
  EXPECT_EQ(usage_chunk["usage"]["total_tokens"], prompt + 6);
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"], cached_for(prompt));
}

TEST_F(SimServerTest, ChatStreamWithoutStreamOptionsHasNoUsageChunk) {
  Json body = chat_body("No usage chunk for this one unless it was asked for.", 4);
  body["stream"] = true;
  const HttpResponse res = post("/v1/chat/completions", body);
  ASSERT_EQ(res.status, 200);
  const auto events = parse_sse(res.body);
  ASSERT_EQ(events.size(), 6u);  // role + 4 tokens + [DONE]
  EXPECT_EQ(events.back().data, "[DONE]");
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i].data);
    EXPECT_FALSE(chunk.contains("usage"));
    EXPECT_EQ(chunk["choices"].size(), 1u);
  }
}

TEST_F(SimServerTest, CompletionsAnswerTextStreamedAndNot) {
  const Json body{{"model", kModel}, {"prompt", "Once upon a time in a data center far away"}};
  const HttpResponse res = post("/v1/completions", body, {{"X-data-parallel-rank", "0"}});
  ASSERT_EQ(res.status, 200) << res.body;
  const Json j = Json::parse(res.body);
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("cmpl-"));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["usage"]["completion_tokens"], 16) << "the completions default max_tokens";
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const std::string text = j["choices"][0]["text"];

  Json streamed = body;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const auto events =
      parse_sse(post("/v1/completions", streamed, {{"X-data-parallel-rank", "0"}}).body);
  ASSERT_EQ(events.size(), 18u);  // 16 tokens + usage + [DONE]
  std::string joined;
  for (std::size_t i = 0; i < 16; ++i) {
    const Json c = Json::parse(events[i].data);
    EXPECT_EQ(c["object"], "text_completion");
    joined += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(joined, text);
  const Json usage = Json::parse(events[16].data);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], j["usage"]["prompt_tokens"]);
  EXPECT_EQ(events[17].data, "[DONE]");

  const Json ids{{"model", kModel}, {"prompt", {1, 2, 3, 4, 5}}, {"max_tokens", 2}};
  const Json by_ids = Json::parse(post("/v1/completions", ids).body);
  EXPECT_EQ(by_ids["usage"]["prompt_tokens"], 5);
}

TEST_F(SimServerTest, AnthropicMessagesReportCacheReadsSeparately) {
  const Json body =
      messages_body("Tell me about the Anthropic route of the simulator, turn one.", 5);
  const HttpResponse first = post("/v1/messages", body, {{"X-data-parallel-rank", "1"}});
  ASSERT_EQ(first.status, 200) << first.body;
  const Json a = Json::parse(first.body);
  EXPECT_EQ(a["type"], "message");
  EXPECT_EQ(a["role"], "assistant");
  EXPECT_EQ(a["model"], kModel);
  ASSERT_EQ(a["content"].size(), 1u);
  EXPECT_EQ(a["content"][0]["type"], "text");
  EXPECT_FALSE(a["content"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(a["stop_reason"], "max_tokens");
  EXPECT_TRUE(a["stop_sequence"].is_null());
  EXPECT_EQ(a["usage"]["output_tokens"], 5);
  // The template's opening turn may already be cached from other tests.
  const int prompt =
      a["usage"]["input_tokens"].get<int>() + a["usage"]["cache_read_input_tokens"].get<int>();
  EXPECT_LT(a["usage"]["cache_read_input_tokens"].get<int>(), cached_for(prompt));

  const Json b =
      Json::parse(post("/v1/messages?beta=true", body, {{"X-data-parallel-rank", "1"}}).body);
  EXPECT_EQ(b["usage"]["cache_read_input_tokens"], cached_for(prompt));
  EXPECT_EQ(b["usage"]["input_tokens"], prompt - cached_for(prompt));

  const Json count = Json::parse(
      post("/v1/messages/count_tokens",
           Json{{"model", kModel}, {"system", body["system"]}, {"messages", body["messages"]}})
          .body);
  EXPECT_EQ(count["input_tokens"], prompt);
}

TEST_F(SimServerTest, AnthropicStreamSendsTheEventSequence) {
  Json body = messages_body("Stream over the Anthropic route, with named events please.", 4);
  post("/v1/messages", body, {{"X-data-parallel-rank", "0"}});  // warm rank 0's cache
  body["stream"] = true;
  const HttpResponse res = post("/v1/messages?beta=true", body, {{"X-data-parallel-rank", "0"}});
  ASSERT_EQ(res.status, 200);
  const auto events = parse_sse(res.body);
  std::vector<std::string> names;
  for (const auto& ev : events) {
    names.push_back(ev.event);
    EXPECT_EQ(Json::parse(ev.data)["type"], ev.event) << "event name matches data.type";
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "message_start", "content_block_start", "content_block_delta",
                       "content_block_delta", "content_block_delta", "content_block_delta",
                       "content_block_stop", "message_delta", "message_stop"}));
  const Json start = Json::parse(events[0].data)["message"];
  EXPECT_EQ(start["role"], "assistant");
  EXPECT_TRUE(start["content"].empty());
  const int cached = start["usage"]["cache_read_input_tokens"];
  EXPECT_GT(cached, 0);
  const int input = start["usage"]["input_tokens"];
  EXPECT_EQ(Json::parse(events[1].data)["content_block"]["type"], "text");
  EXPECT_EQ(Json::parse(events[2].data)["delta"]["type"], "text_delta");
  const Json delta = Json::parse(events[7].data);
  EXPECT_EQ(delta["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(delta["usage"]["output_tokens"], 4);
  EXPECT_EQ(delta["usage"]["input_tokens"], input);
  EXPECT_EQ(delta["usage"]["cache_read_input_tokens"], cached);
}

TEST_F(SimServerTest, ResponsesApiAnswersStreamedAndNot) {
  const Json body{{"model", kModel},
                  {"instructions", "You are a coding agent."},
                  {"input", "Summarise the Responses route in one sentence."},
                  {"max_output_tokens", 3}};
  const Json r = Json::parse(post("/v1/responses", body).body);
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["output"][0]["content"][0]["type"], "output_text");
  EXPECT_EQ(r["usage"]["output_tokens"], 3);

  Json streamed = body;
  streamed["stream"] = true;
  const auto events = parse_sse(post("/v1/responses", streamed).body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().event, "response.created");
  EXPECT_EQ(events.back().event, "response.incomplete");
  int deltas = 0;
  for (const auto& ev : events) deltas += ev.event == "response.output_text.delta";
  EXPECT_EQ(deltas, 3);
}

TEST_F(SimServerTest, InfoRoutes) {
  const HttpResponse models = http_request(port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  const Json m = Json::parse(models.body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], kModel);
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["max_model_len"], 32768);
  EXPECT_EQ(http_request(port(), "GET", "/health").status, 200);
  EXPECT_TRUE(Json::parse(http_request(port(), "GET", "/version").body).contains("version"));
  EXPECT_EQ(http_request(port(), "GET", "/nope").status, 404);
  EXPECT_EQ(http_request(port(), "GET", "/v1/chat/completions").status, 405);
}

TEST_F(SimServerTest, RankPinningRefusesUnknownRanksAndIgnoresNonIntegers) {
  const Json body = chat_body("Pinned request text.", 2);
  const HttpResponse bad = post("/v1/chat/completions", body, {{"X-data-parallel-rank", "2"}});
  EXPECT_EQ(bad.status, 400);
  const Json err = Json::parse(bad.body);
  EXPECT_EQ(err["error"]["code"], 400);
  EXPECT_EQ(err["error"]["type"], "BadRequestError");
  EXPECT_FALSE(err["error"]["message"].get<std::string>().empty());
  EXPECT_EQ(post("/v1/chat/completions", body, {{"X-data-parallel-rank", "-1"}}).status, 400);
  const HttpResponse huge =
      post("/v1/chat/completions", body, {{"X-data-parallel-rank", "99999999999999999999"}});
  EXPECT_EQ(huge.status, 400) << "an integer past 64 bits is out of range, not ignored";
  EXPECT_EQ(Json::parse(huge.body)["error"]["message"],
            "data_parallel_rank 99999999999999999999 is out of range [0, 2).")
      << "the rank as it was sent";

  const HttpResponse anthropic =
      post("/v1/messages", messages_body("x", 2), {{"X-data-parallel-rank", "9"}});
  EXPECT_EQ(anthropic.status, 400);
  EXPECT_EQ(Json::parse(anthropic.body)["type"], "error");
  EXPECT_EQ(Json::parse(anthropic.body)["error"]["type"], "invalid_request_error");

  EXPECT_EQ(post("/v1/chat/completions", body, {{"X-data-parallel-rank", "abc"}}).status, 200);
  EXPECT_EQ(http_request(port(), "POST", "/v1/chat/completions", "{not json").status, 400);

  // As in vLLM, /v1/responses does not read the header at all.
  const Json responses{{"model", kModel}, {"input", "Unpinned."}, {"max_output_tokens", 2}};
  EXPECT_EQ(post("/v1/responses", responses, {{"X-data-parallel-rank", "9"}}).status, 200);
}

// An output cap that is not a whole number of at least 1 is refused, as
// vLLM's request validation does, rather than read as "up to the context"
// (minutes of engine time); the Messages API requires one.
TEST_F(SimServerTest, AnOutputCapThatIsNoWholeNumberIsRefused) {
  for (const Json& bad : {Json(0), Json(-1), Json(1.5), Json("5"), Json(true)}) {
    SCOPED_TRACE(bad.dump());
    Json chat = chat_body("Capped.", 2);
    chat["max_tokens"] = bad;
    const HttpResponse r = post("/v1/chat/completions", chat);
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(Json::parse(r.body)["error"]["message"],
              "'max_tokens' must be a whole number of at least 1, got " + bad.dump());
    Json messages = messages_body("Capped.", 2);
    messages["max_tokens"] = bad;
    EXPECT_EQ(post("/v1/messages", messages).status, 400);
  }
  Json uncapped = messages_body("Capped.", 2);
  uncapped.erase("max_tokens");
  const HttpResponse r = post("/v1/messages", uncapped);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Json::parse(r.body)["error"]["message"], "'max_tokens' is required");
  Json null_cap = chat_body("Capped.", 2);
  null_cap["max_tokens"] = nullptr;
  null_cap["max_completion_tokens"] = 3;
  const HttpResponse capped = post("/v1/chat/completions", null_cap);
  ASSERT_EQ(capped.status, 200) << capped.body;
  EXPECT_EQ(Json::parse(capped.body)["usage"]["completion_tokens"], 3);
}

// Two simulators with the same seed give their first replies different ids,
// as vLLM's random ones are: a client or log that keys on ids must not
// see one reply for another.
TEST(SimServerIds, TwoSimulatorsWithOneSeedDoNotShareResponseIds) {
  auto first_id = [] {
    SimProcess sim({"sim", "--listen", "127.0.0.1:0", "--seed", "3", "--time-scale", "50"});
    const Json body{{"model", kModel},
                    {"max_tokens", 1},
                    {"messages", {{{"role", "user"}, {"content", "id?"}}}}};
    const HttpResponse r = http_request(sim.port(), "POST", "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return Json::parse(r.body)["id"].get<std::string>();
  };
  const std::string a = first_id();
  const std::string b = first_id();
  EXPECT_TRUE(a.starts_with("chatcmpl-")) << a;
  EXPECT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);
}

// vLLM's /tokenize and /detokenize: the counts a chat completion's usage
// gives, and generated text back from its ids.
TEST_F(SimServerTest, TokenizeCountsAsTheCompletionDoesAndDetokenizeGivesOutputBack) {
  const Json chat = chat_body("Count me, please.", 4);
  const HttpResponse done = post("/v1/chat/completions", chat);
  ASSERT_EQ(done.status, 200) << done.body;
  const Json completion = Json::parse(done.body);
  const HttpResponse counted =
      post("/tokenize", Json{{"model", kModel}, {"messages", chat["messages"]}});
  ASSERT_EQ(counted.status, 200) << counted.body;
  const Json tokens = Json::parse(counted.body);
  EXPECT_EQ(tokens["count"], completion["usage"]["prompt_tokens"]);
  EXPECT_EQ(tokens["tokens"].size(), tokens["count"].get<std::size_t>());
  EXPECT_EQ(tokens["max_model_len"], 32768);

  const Json plain = Json::parse(post("/tokenize", Json{{"prompt", "a b c"}}).body);
  EXPECT_GT(plain["count"].get<int>(), 0);
  EXPECT_EQ(post("/tokenize", Json{{"text", "a"}}).status, 400);
  EXPECT_EQ(http_request(port(), "GET", "/tokenize").status, 405);

  // The reply's text, tokenized and detokenized, is the reply's text.
  const std::string reply = completion["choices"][0]["message"]["content"];
  const Json ids = Json::parse(post("/tokenize", Json{{"prompt", reply}}).body)["tokens"];
  const HttpResponse back = post("/detokenize", Json{{"tokens", ids}});
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(Json::parse(back.body)["prompt"], reply);
  EXPECT_EQ(post("/detokenize", Json{{"tokens", {-1}}}).status, 400);
}

TEST_F(SimServerTest, InternalBalancerSpreadsUnpinnedLoadAndMetricsMove) {
  const auto before = metrics();
  std::vector<std::thread> clients;
  std::vector<int> statuses(6, 0);
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([&, i] {
      Json body =
          chat_body("Concurrent request number " + std::to_string(i) + " for the balancer.", 40);
      body["stream"] = true;
      try {
        statuses[static_cast<std::size_t>(i)] = post("/v1/chat/completions", body).status;
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (auto& t : clients) t.join();
  for (int s : statuses) EXPECT_EQ(s, 200);
  const auto after = metrics();

  auto delta = [&](const std::string& key) { return after.at(key) - before.at(key); };
  double total = 0;
  for (int r = 0; r < 2; ++r) {
    const std::string ok = "vllm:request_success_total{engine=\"" + std::to_string(r) +
                           "\",finished_reason=\"length\",model_name=\"" + std::string(kModel) +
                           "\"}";
    EXPECT_GE(delta(ok), 1.0) << "rank " << r << " got none of the unpinned requests";
    total += delta(ok);
    EXPECT_GT(delta(series("vllm:prompt_tokens_total", r)), 0.0);
    EXPECT_GE(delta(series("vllm:generation_tokens_total", r)), 40.0);
    EXPECT_GT(delta(series("vllm:prefix_cache_queries_total", r)), 0.0);
    EXPECT_GE(delta(series("vllm:time_to_first_token_seconds_count", r)), 1.0);
  }
  EXPECT_EQ(total, 6.0);
  EXPECT_EQ(after.at(series("vllm:num_requests_running", 0)), 0.0);
  EXPECT_EQ(
      after.count("vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\","
                  "enable_prefix_caching=\"True\",engine=\"1\",gpu_memory_utilization=\"0.9\","
                  "num_gpu_blocks=\"2503\",prefix_caching_hash_algo=\"builtin\"}"),
      1u);
}

TEST_F(SimServerTest, MetricsTextHasVllmFamiliesAndLabels) {
  const std::string text = http_request(port(), "GET", "/metrics").body;
  for (std::string_view family :
       {"vllm:num_requests_running gauge", "vllm:num_requests_waiting gauge",
        "vllm:kv_cache_usage_perc gauge", "vllm:prefix_cache_queries counter",
        "vllm:prefix_cache_hits counter", "vllm:prompt_tokens counter",
        "vllm:generation_tokens counter", "vllm:num_preemptions counter",
        "vllm:request_success counter", "vllm:time_to_first_token_seconds histogram",
        "vllm:cache_config_info gauge"}) {
    EXPECT_NE(text.find("# TYPE " + std::string(family) + "\n"), std::string::npos) << family;
  }
  // POSIX extended syntax (gtest's regex on Linux), matched whole.
  const auto sample =
      ::testing::MatchesRegex(R"([a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-z_]+="[^"]*",?)*\})? -?[0-9.e+inf]+)");
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line[0] == '#') continue;
    EXPECT_THAT(line, sample);
  }
}

TEST_F(SimServerTest, ADisconnectedClientsRequestIsAbortedAndItsBlocksFreed) {
  for (bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streaming" : "not streaming");
    const auto before = metrics();
    const std::string aborted =
        "vllm:request_success_total{engine=\"1\",finished_reason=\"abort\","
        "model_name=\"" +
        std::string(kModel) + "\"}";
    Json body = chat_body("A long answer that the client will not wait for.", 0);
    body.erase("max_tokens");  // up to the context length: minutes of engine time
    body["stream"] = stream;
    {
      Connection c(port());
      c.send_request("POST", "/v1/chat/completions", body.dump(), {{"X-data-parallel-rank", "1"}});
      if (stream) {
        ASSERT_TRUE(c.read_until(
            [](const std::string& raw) { return raw.find("data: ") != std::string::npos; }));
      } else {
        // Wait until the request is running on rank 1, then leave.
        bool running = false;
        for (int i = 0; i < 200 && !running; ++i) {
          running = metrics().at(series("vllm:num_requests_running", 1)) > 0;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        ASSERT_TRUE(running);
      }
      EXPECT_GT(metrics().at(series("vllm:kv_cache_usage_perc", 1)), 0.0);
    }  // closes the socket
    bool freed = false;
    for (int i = 0; i < 200 && !freed; ++i) {
      const auto m = metrics();
      freed = m.at(series("vllm:num_requests_running", 1)) == 0 &&
              m.at(series("vllm:kv_cache_usage_perc", 1)) == 0 &&
              m.at(aborted) == before.at(aborted) + 1;
      if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    EXPECT_TRUE(freed) << "the request kept running after its client left";
  }
}

TEST_F(SimServerTest, RealClientRequestsAreAccepted) {
  const std::filesystem::path dir = std::filesystem::path(LMWARDEN_FIXTURES) / "clients";
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().filename().string());
    const Json capture = Json::parse(std::ifstream(entry.path()));
    Headers headers;
    for (const auto& h : capture["headers"]) {
      std::string name = h[0];
      for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (name == "host" || name == "content-length" || name == "connection" ||
          name == "content-type" || name == "accept-encoding") {
        continue;
      }
      headers.emplace_back(h[0], h[1]);
    }
    Connection c(port());
    c.send_request(capture["method"].get<std::string>(), capture["path"].get<std::string>(),
                   capture["body"].dump(), headers);
    // The captures stream with large max_tokens: read the start, then leave.
    ASSERT_TRUE(c.read_until([](const std::string& raw) {
      return raw.find("delta") != std::string::npos || raw.find("\"error\"") != std::string::npos;
    })) << c.raw();
    HttpResponse res = Connection::parse(c.raw());
    EXPECT_EQ(res.status, 200) << c.raw().substr(0, 500);
    EXPECT_TRUE(res.headers["content-type"].starts_with("text/event-stream"));
    ++seen;
  }
  EXPECT_GE(seen, 6);
}

// As vLLM started without --enable-prompt-tokens-details: the prefix cache
// still serves the repeated prompt (its counters say so), but no reply says
// how much of the prompt it served.
TEST(SimWithoutPromptTokensDetails, UsageNeverSaysHowMuchOfThePromptWasCached) {
  SimProcess sim{{"sim", "--listen", "127.0.0.1:0", "--model", std::string(kModel),
                  "--time-scale", "50", "--no-enable-prompt-tokens-details"}};
  auto post = [&](std::string_view target, const Json& body) {
    const HttpResponse res = http_request(sim.port(), "POST", target, body.dump(), {});
    EXPECT_EQ(res.status, 200) << res.body;
    return res;
  };
  const Json chat = {{"model", kModel},
                     {"messages", {{{"role", "user"}, {"content", "The same prompt, twice over."}}}},
                     {"max_tokens", 4}};
  post("/v1/chat/completions", chat);
  const Json again = Json::parse(post("/v1/chat/completions", chat).body);
  EXPECT_TRUE(again["usage"]["prompt_tokens_details"].is_null()) << again["usage"];
  const auto metrics = parse_metrics(http_request(sim.port(), "GET", "/metrics").body);
  const std::string hits = "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"" +
                           std::string(kModel) + "\"}";
  ASSERT_TRUE(metrics.contains(hits));
  EXPECT_GT(metrics.at(hits), 0) << "the second turn was served from the cache";

  const Json messages = {
      {"model", kModel},
      {"messages", {{{"role", "user"}, {"content", "Another prompt, sent twice to /v1/messages."}}}},
      {"max_tokens", 4}};
  post("/v1/messages", messages);
  const Json whole = Json::parse(post("/v1/messages", messages).body);
  EXPECT_FALSE(whole["usage"].contains("cache_read_input_tokens")) << whole["usage"];
  const Json count = Json::parse(post("/v1/messages/count_tokens", messages).body);
  EXPECT_EQ(whole["usage"]["input_tokens"], count["input_tokens"]) << "the whole prompt";

  Json streamed = messages;
  streamed["stream"] = true;
  const auto events = parse_sse(post("/v1/messages", streamed).body);
  ASSERT_GE(events.size(), 2u);
  const Json start = Json::parse(events.front().data)["message"]["usage"];
  EXPECT_FALSE(start.contains("cache_read_input_tokens")) << start;
  EXPECT_EQ(start["input_tokens"], count["input_tokens"]);
}

// `pkill -HUP lmwarden`, meant for the warden beside it, leaves the simulator
// serving (SIGHUP's default action would end it); SIGTERM still stops it.
TEST(SimProcessSignals, SighupLeavesItServingAndSigtermStopsIt) {
  SimProcess sim{{"sim", "--listen", "127.0.0.1:0", "--time-scale", "50"}};
  sim.signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(sim.running());
  EXPECT_EQ(http_request(sim.port(), "GET", "/health", "", {}).status, 200);
  const int status = sim.terminate();
  EXPECT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace lmwarden::testing
