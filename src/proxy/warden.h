// The warden: the request handler behind `lmwarden serve`.
//
// For an inference route it reads the request facts (model, stream, identity),
// asks the model's Router where to go, forwards the original bytes there and
// relays the reply as it streams. Everything else (health, model list, the
// JSON API) is answered locally. Models are looked up by name or alias.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "core/identity.h"
#include "core/router.h"
#include "net/http_server.h"
#include "proxy/dialect.h"
#include "proxy/model_telemetry.h"
#include "proxy/upstream_pool.h"

namespace lmwarden::proxy {

// One configured model and its routing state.
struct ModelState {
  explicit ModelState(const config::ModelConfig& model);

  const config::ModelConfig config;
  const core::IdentityOptions identity;
  const std::vector<std::string> api_keys;  // resolved from api_keys_env; empty = open
  mutable std::mutex mutex;
  core::Router router;  // guarded by mutex
  ModelTelemetry telemetry;
};

// Decision plus the guarantee that its in-flight count ends exactly once.
class InFlight {
 public:
  InFlight(ModelState& model, core::RouteDecision decision) : model_(&model), decision_(decision) {}
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { finish(); }
  void finish() noexcept;
  const core::RouteDecision& decision() const noexcept { return decision_; }

 private:
  ModelState* model_;
  core::RouteDecision decision_;
  bool finished_ = false;
};

class Warden {
 public:
  Warden(config::Config config, net::IoThreads& io);

  net::ServerOptions server_options() const;
  net::asio::awaitable<void> handle(net::Exchange& exchange);

  ModelState* find_model(std::string_view name_or_alias) noexcept;
  // Drops pooled upstream connections; only with the I/O threads stopped.
  void close_upstreams() noexcept { pools_.clear(); }
  const std::vector<std::unique_ptr<ModelState>>& models() const noexcept { return models_; }
  const config::Config& config() const noexcept { return config_; }
  std::chrono::system_clock::time_point started() const noexcept { return started_; }

 private:
  struct Forward;
  net::asio::awaitable<void> forward(net::Exchange& exchange, Dialect dialect);
  net::asio::awaitable<void> run_attempts(Forward& f);
  net::asio::awaitable<void> handle_api(net::Exchange& exchange, std::string_view path);
  UpstreamPool& pool_for_this_thread(net::Exchange& exchange);
  std::optional<std::string> admin_token() const;

  config::Config config_;
  std::vector<std::unique_ptr<ModelState>> models_;
  std::unordered_map<std::string, ModelState*> by_name_;
  std::unordered_map<const net::asio::io_context*, std::unique_ptr<UpstreamPool>> pools_;
  std::chrono::system_clock::time_point started_;
  std::atomic<std::uint64_t> next_request_id_{1};
};

}  // namespace lmwarden::proxy
