// The proxy benchmark's upstream (bench/proxy/responder.cpp) as a child
// process on 127.0.0.1. `make bench-proxy` measures nginx and the warden by
// what this program sends, so what it sends is checked here: each reply's
// shape, the usage the warden taps from it, and the pace of the sse256paced
// case. Pacing is checked as a lower bound only (no event before its step),
// which a loaded machine cannot break; nothing here fails for being slow.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim_test_client.h"

namespace lmwarden::testing {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

SimProcess responder(std::vector<std::string> args) {
  return SimProcess(std::move(args), {.binary = BENCH_RESPONDER});
}

// A responder that paces its `events` deltas a `step` apart.
SimProcess paced_responder(int events, std::chrono::milliseconds step) {
  return responder({"--port", "0", "--events", std::to_string(events), "--step-us",
                    std::to_string(std::chrono::microseconds(step).count()), "--max-seconds",
                    "60"});
}

void send_paced(Connection& c, const std::string& body) {
  c.send_request("POST", "/v1/chat/completions", body, {{"X-Bench-Paced", "1"}});
}

const std::string kChat = R"({"model":"bench","messages":[{"role":"user","content":"Hi."}]})";
const std::string kStream =
    R"({"model":"bench","messages":[{"role":"user","content":"Hi."}],"stream":true})";
const std::string kStreamWithUsage =
    R"({"model":"bench","messages":[{"role":"user","content":"Hi."}],"stream":true,)"
    R"("stream_options":{"include_usage":true}})";

// The content deltas of a stream, in order, and what followed them.
struct StreamBody {
  std::vector<std::string> deltas;
  std::vector<json> usage;  // usage-only chunks
  bool done = false;        // ended with data: [DONE]
  bool anything_after_done = false;
};

StreamBody read_stream(const std::string& body) {
  StreamBody out;
  for (const SseEvent& ev : parse_sse(body)) {
    if (out.done) out.anything_after_done = true;
    if (ev.data == "[DONE]") {
      out.done = true;
      continue;
    }
    const json chunk = json::parse(ev.data);
    if (chunk.contains("usage")) {
      EXPECT_TRUE(chunk["choices"].empty()) << ev.data;
      out.usage.push_back(chunk["usage"]);
    } else {
      out.deltas.push_back(chunk["choices"][0]["delta"]["content"].get<std::string>());
    }
  }
  return out;
}

// Reads a stream until the responder closes the connection (the request said
// Connection: close) or the client's timeout; returns when each of the first
// `n` deltas was first seen, counted from `sent`.
std::vector<Clock::duration> delta_arrivals(Connection& c, int n, Clock::time_point sent) {
  std::vector<Clock::duration> arrived;
  c.read_until([&](const std::string& raw) {
    while (arrived.size() < static_cast<std::size_t>(n) &&
           raw.find("\" token" + std::to_string(arrived.size()) + "\"") != std::string::npos)
      arrived.push_back(Clock::now() - sent);
    return false;
  });
  EXPECT_TRUE(c.raw().ends_with("data: [DONE]\n\n\r\n0\r\n\r\n")) << "the stream did not end whole";
  return arrived;
}

std::vector<std::string> expected_deltas(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(" token" + std::to_string(i));
  return out;
}

TEST(BenchResponder, JsonRepliesCarryUsageInTheRoutesDialect) {
  auto process = responder({"--port", "0", "--max-seconds", "60"});

  const HttpResponse chat = http_request(process.port(), "POST", "/v1/chat/completions", kChat);
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.headers.at("content-type"), "application/json");
  const json openai = json::parse(chat.body);
  EXPECT_EQ(openai["object"], "chat.completion");
  EXPECT_EQ(openai["usage"]["prompt_tokens"], 24);
  EXPECT_EQ(openai["usage"]["completion_tokens"], 7);
  EXPECT_EQ(openai["usage"]["prompt_tokens_details"]["cached_tokens"], 16);

  const HttpResponse messages =
      http_request(process.port(), "POST", "/v1/messages?beta=true", kChat);
  ASSERT_EQ(messages.status, 200) << messages.body;
  const json anthropic = json::parse(messages.body);
  EXPECT_EQ(anthropic["type"], "message");
  EXPECT_EQ(anthropic["usage"]["input_tokens"], 512);
  EXPECT_EQ(anthropic["usage"]["cache_read_input_tokens"], 29696);
  EXPECT_EQ(anthropic["usage"]["output_tokens"], 7);

  EXPECT_EQ(http_request(process.port(), "GET", "/health").status, 200);
  const HttpResponse metrics = http_request(process.port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("vllm:num_requests_running{engine=\"0\",model_name=\"bench\"} 0.0\n"),
            std::string::npos)
      << metrics.body;
}

TEST(BenchResponder, StreamSendsEveryDeltaThenUsageWhenAskedThenDone) {
  auto process = responder({"--port", "0", "--events", "5", "--max-seconds", "60"});

  const HttpResponse with_usage =
      http_request(process.port(), "POST", "/v1/chat/completions", kStreamWithUsage);
  ASSERT_EQ(with_usage.status, 200);
  EXPECT_EQ(with_usage.headers.at("content-type"), "text/event-stream");
  EXPECT_EQ(with_usage.headers.at("transfer-encoding"), "chunked");
  const StreamBody a = read_stream(with_usage.body);
  EXPECT_EQ(a.deltas, expected_deltas(5));
  ASSERT_EQ(a.usage.size(), 1u);
  EXPECT_EQ(a.usage[0]["completion_tokens"], 5);
  EXPECT_EQ(a.usage[0]["total_tokens"], 29);
  EXPECT_TRUE(a.done);
  EXPECT_FALSE(a.anything_after_done);

  const HttpResponse plain = http_request(process.port(), "POST", "/v1/chat/completions", kStream);
  const StreamBody b = read_stream(plain.body);
  EXPECT_EQ(b.deltas, expected_deltas(5));
  EXPECT_TRUE(b.usage.empty());
  EXPECT_TRUE(b.done);
}

// Each delta of a paced stream waits for a decode step of its own, the first
// one step after the request: delta k leaves no sooner than (k + 1) steps
// after the request was sent. A responder that sent back to back would
// deliver all of them within the first step.
TEST(BenchResponder, PacedStreamSendsNoDeltaBeforeItsStep) {
  constexpr int kEvents = 6;
  constexpr auto kStep = std::chrono::milliseconds(40);
  auto process = paced_responder(kEvents, kStep);

  Connection c(process.port());
  const auto sent = Clock::now();
  send_paced(c, kStreamWithUsage);
  const std::vector<Clock::duration> arrived = delta_arrivals(c, kEvents, sent);
  ASSERT_EQ(arrived.size(), static_cast<std::size_t>(kEvents)) << c.raw();
  for (int k = 0; k < kEvents; ++k)
    EXPECT_GE(arrived[k], (k + 1) * kStep) << "delta " << k << " came before its step";

  const HttpResponse reply = Connection::parse(c.raw());
  const StreamBody body = read_stream(reply.body);
  EXPECT_EQ(body.deltas, expected_deltas(kEvents));
  ASSERT_EQ(body.usage.size(), 1u);
  EXPECT_EQ(body.usage[0]["completion_tokens"], kEvents);
  EXPECT_TRUE(body.done);
}

// A stream that joins while another is paced runs beside it, on the steps
// already under way: its first delta comes at the next step, which may be
// less than a step away (or, when that step runs late, be followed at once by
// the one after), so delta k leaves no sooner than k - 1 steps after the
// request. Both streams end whole.
TEST(BenchResponder, PacedStreamJoinsTheStepsUnderWay) {
  constexpr int kEvents = 8;
  constexpr auto kStep = std::chrono::milliseconds(30);
  auto process = paced_responder(kEvents, kStep);
  Connection first(process.port());
  Connection second(process.port());
  send_paced(first, kStream);
  ASSERT_TRUE(first.read_until(
      [](const std::string& raw) { return raw.find("\" token1\"") != std::string::npos; }));
  const auto sent = Clock::now();
  send_paced(second, kStream);

  const std::vector<Clock::duration> arrived = delta_arrivals(second, kEvents, sent);
  ASSERT_EQ(arrived.size(), static_cast<std::size_t>(kEvents)) << second.raw();
  for (int k = 1; k < kEvents; ++k)
    EXPECT_GE(arrived[k], (k - 1) * kStep) << "delta " << k << " came before its step";
  const StreamBody a = read_stream(first.read_response().body);
  const StreamBody b = read_stream(Connection::parse(second.raw()).body);
  EXPECT_EQ(a.deltas, expected_deltas(kEvents));
  EXPECT_EQ(b.deltas, expected_deltas(kEvents));
  EXPECT_TRUE(a.done);
  EXPECT_TRUE(b.done);
}

TEST(BenchResponder, RefusesAFlagWithoutAWholeNumber) {
  for (const char* args : {"--events", "--events x", "--events -3", "--port 70000", "--steps 3"}) {
    const std::string command = "timeout 20 " + std::string(BENCH_RESPONDER) + " " + args +
                                " --max-seconds 1 >/dev/null 2>&1";
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << args;
    EXPECT_EQ(WEXITSTATUS(status), 2) << args;
  }
}

}  // namespace
}  // namespace lmwarden::testing
