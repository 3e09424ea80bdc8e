// An in-process stand-in for a vLLM server with data-parallel ranks, for the
// proxy's integration tests: it records which rank each request was pinned to
// and streams a small SSE reply. Request headers steer it:
//   x-fake-hold: 1      send the first event, then wait until release() (or
//                       until the client — the warden — closes the connection)
//   x-fake-status: N    answer N with a JSON error body instead
//   x-fake-events: N    stream N more content events of about 1 KB each
//                       (numbered "bulk 0" on) after the first, back to back
//   x-fake-first-event-delay-ms: N   a stream's first event N ms after its header
//   x-fake-header-delay-ms: N        a stream's header N ms after the request
//   x-fake-response-id: ID   a non-streamed reply is a Responses one, with
//                       this id (as if stored); a streamed one ("stream":true)
//                       starts with response.created naming it
// Replies carry usage like vLLM with --enable-prompt-tokens-details: a final
// usage chunk when stream_options.include_usage is set, usage in the JSON body
// of a non-streamed reply (100 prompt tokens, 64 cached, 2 completion; with
// x-fake-no-cached-count: 1, or after omit_cached_count(true), no cached count,
// as without that flag).
// GET /metrics reports per-rank gauges set with set_engine(); GET /health is
// 200 until set_healthy(false); hang_metrics(true) makes /metrics never answer.
#pragma once

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "net/http_server.h"

namespace lmwarden::testing {

class FakeVllm {
 public:
  struct Seen {
    std::string path;
    int rank = -1;  // X-data-parallel-rank, -1 when absent
    std::string session;  // session-id header
    std::string forwarded_for;
    std::vector<std::string> request_ids;  // every X-Request-Id field, in order
    std::string body;
  };

  explicit FakeVllm(int ranks) : ranks_(ranks), io_(1), server_(io_, {}, [this](net::Exchange& ex) { return handle(ex); }) {
    port_ = server_.listen("127.0.0.1", 0).port();
    io_.start();
  }
  ~FakeVllm() {
    release();
    io_.stop();
    io_.join();
  }

  std::uint16_t port() const { return port_; }
  void release() { released_ = true; }
  void hold_again() { released_ = false; }
  int held(int rank) {
    std::lock_guard lock{mutex_};
    return held_[rank];
  }
  int held_total() {
    std::lock_guard lock{mutex_};
    int n = 0;
    for (auto& [r, c] : held_) n += c;
    return n;
  }
  int aborted() const { return aborted_.load(); }
  std::vector<Seen> seen() {
    std::lock_guard lock{mutex_};
    return seen_;
  }
  void set_healthy(bool healthy) { healthy_ = healthy; }
  void omit_cached_count(bool omit) { omit_cached_count_ = omit; }
  // Every request answered with this status (0: as usual), /health and /metrics still fine.
  void fail_with(int status) { fail_status_ = status; }
  void hang_metrics(bool hang) { hang_metrics_ = hang; }
  void garbage_metrics(bool garbage) { garbage_metrics_ = garbage; }
  int metrics_hanging() const { return metrics_hanging_.load(); }
  // The client port of each /health and /metrics request: one per connection.
  std::vector<std::uint16_t> probe_ports() {
    std::lock_guard lock{mutex_};
    return probe_ports_;
  }
  void set_engine(int rank, int running, int waiting, double kv, double queries, double hits) {
    std::lock_guard lock{mutex_};
    engine_[rank] = {running, waiting, kv, queries, hits};
  }
  // GET /v1/models lists these ids from now on (until then it is a 404, as
  // from a server that has no such route).
  void list_models(std::vector<std::string> ids) {
    std::lock_guard lock{mutex_};
    listed_models_ = std::move(ids);
  }
  int models_asked() const { return models_asked_.load(); }
  // Another model served through the same /metrics: each engine's series
  // again under model_name `name`, with `running` requests each.
  void serve_other_model(std::string name, int running) {
    std::lock_guard lock{mutex_};
    other_model_ = {std::move(name), running};
  }

 private:
  net::Awaitable<void> handle(net::Exchange& ex) {
    namespace http = net::http;
    using namespace net::asio::experimental::awaitable_operators;
    auto& req = ex.request();
    if (req.target() == "/health" || req.target() == "/metrics") {
      std::lock_guard lock{mutex_};
      probe_ports_.push_back(ex.remote().port());
    }
    if (req.target() == "/v1/models") {
      ++models_asked_;
      net::Response res{http::status::not_found, 11};
      {
        std::lock_guard lock{mutex_};
        if (listed_models_) {
          nlohmann::json data = nlohmann::json::array();
          for (const auto& id : *listed_models_) data.push_back({{"id", id}, {"object", "model"}});
          res.result(http::status::ok);
          res.body() = nlohmann::json{{"object", "list"}, {"data", data}}.dump();
        }
      }
      co_await ex.respond(std::move(res));
      co_return;
    }
    if (req.target() == "/health") {
      net::Response res{healthy_ ? http::status::ok : http::status::service_unavailable, 11};
      co_await ex.respond(std::move(res));
      co_return;
    }
    if (req.target() == "/metrics") {
      if (hang_metrics_) {
        ++metrics_hanging_;
        co_await ex.client_closed();
        --metrics_hanging_;
        co_return;
      }
      if (garbage_metrics_) {
        net::Response res{http::status::ok, 11};
        res.body() = "<html>502 from some other proxy</html>\n\x01\x02 not { prometheus\n";
        co_await ex.respond(std::move(res));
        co_return;
      }
      std::string text = "# TYPE vllm:num_requests_running gauge\n";
      {
        std::lock_guard lock{mutex_};
        for (auto& [rank, e] : engine_) {
          const std::string l = "{engine=\"" + std::to_string(rank) + "\",model_name=\"m\"}";
          text += "vllm:num_requests_running" + l + " " + std::to_string(e.running) + "\n";
          text += "vllm:num_requests_waiting" + l + " " + std::to_string(e.waiting) + "\n";
          text += "vllm:kv_cache_usage_perc" + l + " " + std::to_string(e.kv) + "\n";
          text += "vllm:prefix_cache_queries_total" + l + " " + std::to_string(e.queries) + "\n";
          text += "vllm:prefix_cache_hits_total" + l + " " + std::to_string(e.hits) + "\n";
          if (!other_model_.first.empty())
            text += "vllm:num_requests_running{engine=\"" + std::to_string(rank) +
                    "\",model_name=\"" + other_model_.first + "\"} " +
                    std::to_string(other_model_.second) + "\n";
        }
      }
      net::Response res{http::status::ok, 11};
      res.body() = text;
      co_await ex.respond(std::move(res));
      co_return;
    }
    Seen s;
    s.path = std::string(req.target());
    if (const auto rank = req.find("X-data-parallel-rank")) s.rank = std::stoi(std::string(*rank));
    s.session = std::string(req["session-id"]);
    s.forwarded_for = std::string(req["X-Forwarded-For"]);
    for (const auto& field : req)
      if (net::beast::iequals(field.name_string(), "X-Request-Id"))
        s.request_ids.emplace_back(field.value());
    s.body = req.body().view();
    if (s.rank >= ranks_) {
      net::Response res{http::status::bad_request, 11};
      res.body() = R"({"error":"rank out of range"})";
      co_await ex.respond(std::move(res));
      co_return;
    }
    const bool hold = req["x-fake-hold"] == "1";
    const std::string bulk = std::string(req["x-fake-events"]);
    std::string status = std::string(req["x-fake-status"]);
    if (status.empty() && fail_status_ > 0) status = std::to_string(fail_status_.load());
    {
      std::lock_guard lock{mutex_};
      seen_.push_back(s);
    }
    if (!status.empty()) {
      net::Response res{static_cast<http::status>(std::stoi(status)), 11};
      res.set(http::field::content_type, "application/json");
      res.body() = R"({"error":"fake failure"})";
      co_await ex.respond(std::move(res));
      co_return;
    }
    const std::string response_id = std::string(req["x-fake-response-id"]);
    const bool streamed = s.body.find("\"stream\":true") != std::string::npos;
    if (!response_id.empty() && !streamed) {
      net::Response res{http::status::ok, 11};
      res.set(http::field::content_type, "application/json");
      res.body() = R"({"id":")" + response_id +
                   R"(","object":"response","status":"completed","output":[],"usage":)"
                   R"({"input_tokens":100,"input_tokens_details":{"cached_tokens":64},)"
                   R"("output_tokens":2,"total_tokens":102}})";
      co_await ex.respond(std::move(res));
      co_return;
    }
    if (s.body.find("\"stream\":false") != std::string::npos) {
      net::Response res{http::status::ok, 11};
      res.set(http::field::content_type, "application/json");
      // x-fake-no-cached-count: usage as vLLM without --enable-prompt-tokens-details.
      res.body() =
          req["x-fake-no-cached-count"] == "1" || omit_cached_count_
              ? R"({"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"total_tokens":102,"completion_tokens":2}})"
              : R"({"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"total_tokens":102,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":64}}})";
      co_await ex.respond(std::move(res));
      co_return;
    }
    const bool include_usage = s.body.find("\"include_usage\":true") != std::string::npos;
    const std::string first_delay = std::string(req["x-fake-first-event-delay-ms"]);
    // x-fake-tear: "1" tears a short event, "long" one longer than the
    // warden holds back (70,000 bytes of its data sent).
    const std::string_view tear = req["x-fake-tear"];
    if (const std::string header_delay = std::string(req["x-fake-header-delay-ms"]);
        !header_delay.empty()) {
      net::Timer t{co_await net::asio::this_coro::executor};
      t.expires_after(std::chrono::milliseconds(std::stoi(header_delay)));
      co_await t.async_wait(net::kAsTuple);
    }
    net::ResponseHeader header{http::status::ok, 11};
    header.set(http::field::content_type, "text/event-stream");
    if (co_await ex.begin_stream(std::move(header), true)) co_return;
    if (!first_delay.empty()) {  // the header at once, the first event after a "prefill"
      net::Timer t{co_await net::asio::this_coro::executor};
      t.expires_after(std::chrono::milliseconds(std::stoi(first_delay)));
      co_await t.async_wait(net::kAsTuple);
    }
    if (!tear.empty()) {  // one whole event, part of the next, then the connection drops
      (void)co_await ex.write_body("data: {\"choices\":[{\"delta\":{\"content\":\"first\"}}]}\n\n");
      const std::string torn =
          tear == "long" ? "data: " + std::string(70'000, 'x') : "data: {\"choices\": [{\"del";
      (void)co_await ex.write_body(torn);
      ex.close_after();
      co_return;
    }
    if (hold) {  // counted before the first event leaves, so a client that saw it sees the hold
      std::lock_guard lock{mutex_};
      ++held_[s.rank];
    }
    // x-fake-start-usage: the first event is an Anthropic message_start,
    // which carries the prompt's usage (64 cached, 36 computed).
    const std::string created =
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"" +
        response_id + "\",\"object\":\"response\",\"status\":\"in_progress\",\"usage\":null}}\n\n";
    const std::string_view first_event =
        !response_id.empty() ? std::string_view{created}
        : req["x-fake-start-usage"] == "1"
            ? "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
              "{\"input_tokens\":36,\"cache_read_input_tokens\":64,\"output_tokens\":1}}}\n\n"
            : "data: {\"choices\":[{\"delta\":{\"content\":\"first\"}}]}\n\n";
    if (co_await ex.write_body(first_event)) {
      if (hold) {
        std::lock_guard lock{mutex_};
        --held_[s.rank];
      }
      co_return;
    }
    if (hold) {
      auto wait_release = [this]() -> net::Awaitable<void> {
        auto ex = co_await net::asio::this_coro::executor;
        net::Timer t{ex};
        while (!released_) {
          t.expires_after(std::chrono::milliseconds(5));
          co_await t.async_wait(net::kAsTuple);
        }
      };
      auto outcome = co_await (wait_release() || ex.client_closed());
      {
        std::lock_guard lock{mutex_};
        --held_[s.rank];
      }
      if (outcome.index() == 1 && std::get<1>(outcome)) {
        ++aborted_;
        co_return;
      }
    }
    for (int i = 0, n = bulk.empty() ? 0 : std::stoi(bulk); i < n; ++i) {
      if (co_await ex.write_body("data: {\"choices\":[{\"delta\":{\"content\":\"bulk " +
                                 std::to_string(i) + " " + std::string(1000, 'x') + "\"}}]}\n\n"))
        co_return;
    }
    if (co_await ex.write_body("data: {\"choices\":[{\"delta\":{\"content\":\" last\"}}]}\n\n")) co_return;
    if (include_usage &&
        co_await ex.write_body(
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"total_tokens\":102,\"completion_tokens\":2,"
            "\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n"))
      co_return;
    if (co_await ex.write_body("data: [DONE]\n\n")) co_return;
    co_await ex.end_stream();
  }

  int ranks_;
  net::IoThreads io_;
  net::HttpServer server_;
  std::uint16_t port_ = 0;
  std::atomic<bool> released_{false};
  std::atomic<int> aborted_{0};
  std::atomic<bool> healthy_{true};
  std::atomic<bool> omit_cached_count_{false};
  std::atomic<int> fail_status_{0};
  std::atomic<bool> hang_metrics_{false};
  std::atomic<bool> garbage_metrics_{false};
  std::atomic<int> metrics_hanging_{0};
  struct Engine {
    int running, waiting;
    double kv, queries, hits;
  };
  std::map<int, Engine> engine_;
  std::pair<std::string, int> other_model_;
  std::optional<std::vector<std::string>> listed_models_;
  std::atomic<int> models_asked_{0};
  std::mutex mutex_;
  std::map<int, int> held_;
  std::vector<Seen> seen_;
  std::vector<std::uint16_t> probe_ports_;
};

}  // namespace lmwarden::testing
