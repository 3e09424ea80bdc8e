// `lmwarden sim`: a vLLM-compatible HTTP server whose data-parallel ranks are
// simulated engines (src/engine), driven by the wall clock — optionally S
// times faster (time_scale). It answers the routes, headers, usage fields and
// metrics of a vLLM server started with --data-parallel-size N and
// --enable-prompt-tokens-details, so the warden cannot tell it from one.
//
// Everything runs on one I/O thread: the HTTP connections and one coroutine
// per rank that steps its engine, sleeps for the step's duration and then
// hands the step's tokens to the waiting requests. No locks, and the engines
// see requests in a well-defined order.
//
// The header keeps Asio out of its users (pimpl), so the command and tests
// need not compile Beast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace lmwarden::sim {

struct SimOptions {
  std::string model = "Qwen/Qwen3-4B-Instruct-2507";
  // Refuse other model names with 404, as vLLM does. Off by default so that
  // clients sending their own model names (Claude Code, Codex) are served.
  bool strict_model = false;
  std::int32_t dp_size = 1;
  std::string profile = "a4000-qwen3-4b";  // for /metrics info and logs
  engine::EngineConfig engine;
  // Engine seconds per wall second.
  double time_scale = 1.0;
  std::size_t max_body_bytes = 32 * 1024 * 1024;
  // Usage as vLLM with --enable-prompt-tokens-details (the cached count of
  // the prompt); false: as vLLM without it, which never gives that count.
  bool prompt_tokens_details = true;
  // The Responses API's store, as vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1:
  // each /v1/responses reply (unless its request says `store: false`) is kept
  // so that a later request can continue it with `previous_response_id`. Off,
  // as in vLLM by default: nothing is kept, and every such request gets 404.
  bool responses_store = false;
  // The most responses kept; the oldest goes first. vLLM keeps every one
  // until it exits, which a long benchmark would pay for in memory.
  std::size_t responses_store_limit = 100'000;
};

class SimServer {
 public:
  explicit SimServer(SimOptions options);
  ~SimServer();
  SimServer(const SimServer&) = delete;
  SimServer& operator=(const SimServer&) = delete;

  struct Address {
    std::string host;
    std::uint16_t port = 0;
    std::string url() const;  // http://host:port, IPv6 hosts bracketed
  };
  // Binds "HOST:PORT" (port 0 picks one) and returns the bound address.
  // Throws std::invalid_argument for a malformed address and
  // std::system_error for an unusable one (start-up only).
  Address listen(std::string_view host_port);
  // Starts the I/O thread.
  void start();
  // Blocks until SIGINT or SIGTERM.
  void wait_for_shutdown_signal();
  // Stops accepting, ends every request and joins the I/O thread. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmwarden::sim
