// The warden: the request handler behind `lmwarden serve`.
//
// For an inference route it reads the request facts (model, stream, identity),
// asks the model's Router where to go, forwards the original bytes there and
// relays the reply as it streams. Everything else (health, model list, the
// JSON API) is answered locally. Models are looked up by name or alias.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/log_throttle.h"
#include "config/config.h"
#include "core/identity.h"
#include "core/router.h"
#include "net/http_server.h"
#include "proxy/access_log.h"
#include "proxy/config_reloads.h"
#include "proxy/dialect.h"
#include "proxy/home_saver.h"
#include "proxy/model_telemetry.h"
#include "proxy/refusals.h"
#include "proxy/shared_homes.h"
#include "proxy/upstream_pool.h"

namespace lmwarden::proxy {

// The part of a model's state that outlives a configuration reload when the
// replica layout stays the same: the router (conversations, in-flight counts,
// health) with the lock that guards it, and the telemetry.
struct RoutingState {
  explicit RoutingState(const config::ModelConfig& model)
      : router(model), failed_probes(model.backends.size(), 0), servers(server_names(model)) {}
  std::mutex mutex;
  core::Router router;  // guarded by mutex
  // Per backend server, guarded by mutex: the scraper's failed rounds in a
  // row, kept here so that a reload does not start the count again.
  std::vector<int> failed_probes;
  // When its counters began: the warden's start, or the reload that started
  // them afresh. Set (to continue another's) only before the state is
  // published; read without the lock after.
  std::chrono::system_clock::time_point since = std::chrono::system_clock::now();
  // Each backend as shared homes name it (server_name): fixed, as the
  // router's replicas are, for the state's life.
  const std::vector<std::string> servers;
  // Where a reload that changed the model's replicas carried this state's
  // requests in flight (Router::carry_state): the state that replaced it,
  // and each of this state's replicas and servers there (-1: gone). A
  // request this state routes or ends is counted there too, and onwards
  // (warden.cpp), so the router in force sees every request that runs on
  // its replicas. Set once, under `mutex`, by the reload; null before.
  struct CarriedTo {
    std::shared_ptr<RoutingState> next;
    std::vector<int> replica_in;
    std::vector<int> server_in;
  };
  std::unique_ptr<const CarriedTo> carried_to;  // guarded by mutex
};

// One configured model: its settings as loaded, and its routing state.
struct ModelState {
  explicit ModelState(const config::ModelConfig& model);
  // A reloaded model that keeps the routing state and telemetry of `previous`.
  ModelState(const config::ModelConfig& model, const ModelState& previous);
  // One with this routing state and telemetry (a reload that changed the
  // model's replicas makes them: model_set.cpp).
  ModelState(const config::ModelConfig& model, std::shared_ptr<RoutingState> routing_state,
             std::shared_ptr<ModelTelemetry> model_telemetry);

  const config::ModelConfig config;
  const core::IdentityOptions identity;
  const std::vector<std::string> api_keys;  // resolved from api_keys_env; empty = open
  const std::shared_ptr<RoutingState> routing;
  const std::shared_ptr<ModelTelemetry> telemetry_owner;
  std::mutex& mutex;
  core::Router& router;  // guarded by mutex
  ModelTelemetry& telemetry;
  // 503s for want of a healthy replica: logged a line per 10 s, not per
  // request, with how many were refused since the last line.
  LogThrottle unavailable_log{std::chrono::seconds(10)};
  // PATCHes of the model refused for their token: a line a second at most.
  LogThrottle refused_patch_log{std::chrono::seconds(1)};
  // The unranked_routes whose requests have gone to a multi-rank server
  // without a rank yet, a bit per config::kForwardedRoutes index (logged
  // the first time).
  std::atomic<std::uint8_t> unranked_told{0};
  static_assert(config::kForwardedRoutes.size() <= 8, "a bit each in unranked_told");
  // What the reload that made this state, changing the model's replicas,
  // took from the one before (for its log line). Set before publishing.
  core::Router::Carried carried;
  // Whether that reload continued the counters and chart (each replica kept
  // kept its index).
  bool counters_carried = false;

  // The router's view (takes the lock). Requests still in flight from
  // routing states a reload replaced are counted where they run: on the
  // replica of the same server and rank, or, sent without a rank, on the
  // same server (RoutingState::carried_to); those on a server the model no
  // longer has are not.
  core::RouterView view() const {
    std::lock_guard lock{mutex};
    return router.view();
  }
};

// The configuration in force and its models. Immutable once published: a
// reload publishes a new one, and each request keeps the one it started with.
struct ModelSet {
  // Hashes names for by_name, so a lookup needs no string built.
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const noexcept { return std::hash<std::string_view>{}(name); }
  };

  config::Config config;
  std::vector<std::shared_ptr<ModelState>> models;
  std::unordered_map<std::string, ModelState*, NameHash, std::equal_to<>> by_name;  // names and aliases
  // The body fields of every model's session sources: the model is named
  // inside the body, so one scan collects what any model may need.
  core::BodyFields body_fields;
  std::uint64_t generation = 0;
  // Opened with the set, so a reload reopens the file (a rotated log is
  // followed); null when the configuration names none, or when it could not
  // be opened, and then why (a start stops on it).
  std::shared_ptr<AccessLog> access_log;
  std::string access_log_failure;
  // Kept from one configuration to the next, as the counters of a process.
  std::shared_ptr<Refusals> refusals;

  ModelState* find(std::string_view name_or_alias) const noexcept;
};

// The models of `config`, each carrying on the routing state of its model in
// `previous` (null at the start) where its replicas are unchanged, and
// listing those a change of replicas retired (model_set.cpp).
std::shared_ptr<ModelSet> make_model_set(config::Config config, const ModelSet* previous);

// What a reload from `before` to `after` did to each model's routing state,
// where the card and chart would otherwise change without a word: renamed,
// removed, started afresh, or a setting left until the replicas change.
std::vector<std::string> routing_notes(const ModelSet& before, const ModelSet& after);

// Writes the exchange's line to the set's access log, when it has one, with
// the bytes the client's socket took.
void write_access_log(const ModelSet& set, std::uint64_t id, net::Exchange& exchange,
                      AccessRecord& record);

// Decision plus the guarantee that its in-flight count ends exactly once.
class InFlight {
 public:
  InFlight(ModelState& model, core::RouteDecision decision, SharedHomes* shared = nullptr)
      : model_(&model), shared_(shared), decision_(decision) {}
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { finish(); }
  void finish() noexcept;
  // The reply stores a Responses response of this id: the router remembers
  // where (Router::remember_response), and tells the other wardens through
  // `shared`.
  void stored(std::string_view response) noexcept;
  const core::RouteDecision& decision() const noexcept { return decision_; }

 private:
  ModelState* model_;
  SharedHomes* shared_;
  core::RouteDecision decision_;
  bool finished_ = false;
};

class Warden {
 public:
  Warden(config::Config config, net::IoThreads& io);
  ~Warden();

  net::ServerOptions server_options();  // its error replies logged to the access log
  net::Awaitable<void> handle(net::Exchange& exchange);

  // The configuration and models in force now.
  std::shared_ptr<const ModelSet> models() const;
  // Publishes a new configuration. A model keeps its conversations, counts and
  // telemetry when its replica layout (backend URLs and ranks, in order) is
  // unchanged; otherwise it starts afresh. Settings only a restart can change
  // (listen address, threads, client limits) keep their running values. The
  // returned lines (logged as warnings) say which were asked to change, and
  // which models started afresh.
  std::vector<std::string> reload(config::Config next);
  // A reload whose file did not load (`problems`, one per line, as logged):
  // the configuration in force stays.
  void reload_refused(std::vector<std::string> problems) {
    reloads_.refused(std::chrono::system_clock::now(), std::move(problems));
  }
  // Requests between reading their body and their last reply byte, in all
  // configurations, including ones a reload has retired.
  int requests_in_progress() const noexcept { return in_progress_.load(std::memory_order_relaxed); }

  // Whether the scraper probes the servers. Only then does a server the data
  // plane could not reach leave service at once: the scraper's next good
  // probe of it is what brings it back.
  void set_health_probed(bool probed) noexcept {
    health_probed_.store(probed, std::memory_order_relaxed);
  }

  // The end of a shutdown's grace period: every request still in flight is
  // ended as a failed one is, with an error in its client's dialect (503, or
  // an error event in a stream that had begun) and its access-log line, and
  // its upstream request closed; none is retried. Requests that get an
  // upstream connection later are ended as they do.
  void cut_in_flight(net::IoThreads& io);

  // Drops pooled upstream connections; only with the I/O threads stopped.
  void close_upstreams() noexcept { pools_.clear(); }
  // Stops the shared homes' Redis store (SharedHomes::stop), if any; while
  // the I/O threads still run.
  void stop_shared_homes() {
    if (shared_homes_) shared_homes_->stop();
  }
  // The Redis store's counters, when homes are shared (else nullopt).
  std::optional<SharedHomesStats> shared_homes_stats() const;
  std::optional<SharedHomesView> shared_homes_view() const;
  std::chrono::system_clock::time_point started() const noexcept { return started_; }
  // What became of the writes of the homes file (saved_homes), for /metrics.
  SavedHomesWrites& saved_homes_writes() noexcept { return saved_homes_writes_; }

 private:
  struct Forward;
  net::Awaitable<void> forward(net::Exchange& exchange, Dialect dialect);
  // Everything the warden answers itself: health, metrics, the UI, the API.
  net::Awaitable<void> serve_local(net::Exchange& exchange);
  // Answers with `res` and, with an access log, writes the request's line
  // (refused, no model): for errors on inference routes answered here. Counted
  // as refused for `reason` (a literal), or by its status: no_route or
  // method_not_allowed.
  net::Awaitable<void> respond_logged(net::Exchange& exchange, net::Response res,
                                      std::string_view reason = {});
  // The access log's line of an error reply the HTTP server sent itself
  // (400, 408, 413, 431: before a whole request was read); its duration
  // runs from `began`, when the request's first bytes came.
  void log_server_error(const net::Request& request, std::string_view client, unsigned status,
                        std::size_t sent_bytes, std::chrono::steady_clock::time_point began);
  net::Awaitable<void> run_attempts(Forward& f);
  net::Awaitable<void> handle_api(net::Exchange& exchange, std::string_view path);
  UpstreamPool& pool_for_this_thread(net::Exchange& exchange);

  const net::ServerOptions server_options_;  // fixed at start
  mutable std::mutex models_mutex_;
  std::shared_ptr<const ModelSet> models_;  // guarded by models_mutex_
  std::unordered_map<const net::asio::io_context*, std::unique_ptr<UpstreamPool>> pools_;
  std::chrono::system_clock::time_point started_;
  std::atomic<std::uint64_t> next_request_id_{1};
  // This process's tag, 8 random hex digits: the X-Request-Id it adds is
  // "TAG-N", N the request's number (the access log's id, the log's req=),
  // so that ids stay unique across restarts and wardens.
  std::array<char, 8> instance_{};
  std::atomic<int> in_progress_{0};
  std::atomic<bool> health_probed_{false};
  std::atomic<bool> cutting_{false};  // cut_in_flight() was called
  std::atomic<std::uint64_t> connections_refused_{0};  // for limits.max_connections
  ConfigReloads reloads_{started_};
  SavedHomesWrites saved_homes_writes_;
  // Homes shared with other wardens through Redis (shared_homes); null when
  // the configuration at start named none.
  std::unique_ptr<SharedHomes> shared_homes_;
};

}  // namespace lmwarden::proxy
