#include "proxy/warden.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/container/small_vector.hpp>
#include <boost/intrusive/list.hpp>
#include <optional>
#include <random>
#include <span>
#include <utility>

#include "common/coarse_clock.h"
#include "common/hash.h"
#include "common/percent.h"
#include "proxy/admission.h"
#include "proxy/api.h"
#include "proxy/metrics_export.h"
#include "proxy/passive_health.h"
#include "proxy/relay.h"
#include "proxy/request_accounting.h"
#include "proxy/shared_homes.h"
#include "telemetry/stream_usage_injection.h"

namespace lmwarden::proxy {

namespace http = net::http;

namespace {

// Where a request that `state` sent to `replica` (or, -1, without a rank to
// `backend`) is counted next: the state a reload carried `state`'s requests
// to, with the same server and rank there. Nullopt when none did, or when
// the state that replaced it has no such server or rank. Under state.mutex.
struct Carry {
  std::shared_ptr<RoutingState> to;
  int replica;
  int backend;
};

std::optional<Carry> carried(const RoutingState& state, int replica, int backend) {
  const RoutingState::CarriedTo* c = state.carried_to.get();
  if (!c) return std::nullopt;
  if (replica >= 0) {
    const int there = c->replica_in[static_cast<std::size_t>(replica)];
    if (there < 0) return std::nullopt;
    return Carry{c->next, there, c->next->router.replica_backend(there)};
  }
  const int there = c->server_in[static_cast<std::size_t>(backend)];
  if (there < 0) return std::nullopt;
  return Carry{c->next, -1, there};
}

// f(router, replica, backend) on each state the request is carried to, from
// `first` on, each under its lock: a reload that carries one on while this
// runs either took the count before f (and is followed) or after.
template <class F>
void along_carries(std::optional<Carry> first, F&& f) {
  for (std::optional<Carry> at = std::move(first); at;) {
    const std::shared_ptr<RoutingState> state = std::move(at->to);
    std::lock_guard lock{state->mutex};
    f(state->router, at->replica, at->backend);
    at = carried(*state, at->replica, at->backend);
  }
}

}  // namespace

void InFlight::finish() noexcept {
  if (finished_) return;
  finished_ = true;
  std::optional<Carry> carry;
  {
    std::lock_guard lock{model_->mutex};
    model_->router.finish(decision_, coarse_steady_now());
    carry = carried(*model_->routing, decision_.replica, decision_.backend);
  }
  along_carries(std::move(carry), [](core::Router& router, int replica, int backend) {
    router.drop_in_flight(replica, backend);
  });
}

void InFlight::stored(std::string_view response) noexcept {
  const std::uint64_t key = stable_hash(response);
  int stored_on = -1;
  std::optional<Carry> carry;
  {
    std::lock_guard lock{model_->mutex};
    stored_on = model_->router.remember_response(key, decision_, coarse_steady_now());
    if (stored_on >= 0) carry = carried(*model_->routing, stored_on, -1);
  }
  // Remembered by the router in force too, which places the chained request.
  along_carries(std::move(carry), [key](core::Router& router, int replica, int) {
    router.remember_response_on(key, replica, coarse_steady_now());
  });
  if (shared_ && stored_on >= 0) {
    try {
      shared_->tell_response(*model_, key, stored_on);
    } catch (const std::bad_alloc&) {
      // Not told: another warden places the chained request itself.
    }
  }
}

void write_access_log(const ModelSet& set, std::uint64_t id, net::Exchange& exchange,
                      AccessRecord& record) {
  if (!set.access_log) return;
  record.sent_bytes = exchange.bytes_sent();
  const auto& request = exchange.request();
  set.access_log->write(id, exchange.remote_address(), request.method_string(), request.target(),
                        request[http::field::user_agent], record);
}

// ---------------------------------------------------------------- Warden

namespace {

net::ServerOptions make_server_options(const config::Config& config) {
  net::ServerOptions o;
  o.max_header_bytes = config.limits.max_header_bytes;
  o.max_body_bytes = config.limits.max_body_bytes;
  o.max_connections = config.limits.max_connections;
  o.read_timeout = config.timeouts.client_read;
  o.keep_alive_timeout = config.timeouts.client_idle;
  o.server_name = "lmwarden";
  o.error_response = [](std::string_view target, http::status status, std::string_view message) {
    return error_response(dialect_of(target), status, message);
  };
  return o;
}

// Counts a request from its body being read to its last reply byte.
class InProgress {
 public:
  explicit InProgress(std::atomic<int>& n) : n_(n) { n_.fetch_add(1, std::memory_order_relaxed); }
  ~InProgress() { n_.fetch_sub(1, std::memory_order_relaxed); }
  InProgress(const InProgress&) = delete;
  InProgress& operator=(const InProgress&) = delete;

 private:
  std::atomic<int>& n_;
};

}  // namespace

Warden::Warden(config::Config config, net::IoThreads& io)
    : server_options_(make_server_options(config)),
      models_(make_model_set(std::move(config), nullptr)),
      started_(std::chrono::system_clock::now()) {
  const std::uint32_t tag = std::random_device{}();
  fmt::format_to_n(instance_.data(), instance_.size(), "{:08x}", tag);
  for (std::size_t i = 0; i < io.size(); ++i)
    pools_[&io.at(i)] = std::make_unique<UpstreamPool>(io.at(i));
  // Each thread closes its own idle connections as it stops (IoThreads).
  io.on_stop([this](net::asio::io_context& ctx) { pools_.at(&ctx)->close_idle(); });
  if (const auto& shared = models_->config.shared_homes) {
    // Logged before the store's thread starts, which may log at once: the
    // first use of spdlog (its registry made) is then this thread's alone.
    spdlog::info("sharing conversation homes with other wardens through {} (keys {}…)",
                 homes::describe(store_options(*shared).address), shared->key_prefix);
    shared_homes_ = std::make_unique<SharedHomes>(*shared);
  }
}

Warden::~Warden() = default;

std::optional<SharedHomesView> Warden::shared_homes_view() const {
  if (!shared_homes_) return std::nullopt;
  return SharedHomesView{.redis = shared_homes_->where(), .stats = shared_homes_->stats()};
}

std::optional<SharedHomesStats> Warden::shared_homes_stats() const {
  if (!shared_homes_) return std::nullopt;
  return shared_homes_->stats();
}

net::ServerOptions Warden::server_options() {
  net::ServerOptions o = server_options_;
  o.on_error_reply = [this](const net::Request& request, std::string_view client, unsigned status,
                            std::size_t sent_bytes, std::chrono::steady_clock::time_point began) {
    log_server_error(request, client, status, sent_bytes, began);
  };
  o.on_connection_refused = [this] {
    connections_refused_.fetch_add(1, std::memory_order_relaxed);
  };
  return o;
}

std::shared_ptr<const ModelSet> Warden::models() const {
  std::lock_guard lock{models_mutex_};
  return models_;
}

namespace {

// What a reload that changes saved_homes does to the homes file.
std::string saved_homes_change(const config::Config& now, const config::Config& next) {
  const auto& before = now.saved_homes;
  const auto& after = next.saved_homes;
  if (!after)
    return fmt::format(
        "saved_homes removed: {} is no longer written (not at shutdown either), and "
        "keeps the homes of its last write",
        before->path);
  const double every = static_cast<double>(after->interval.count()) / 1000.0;
  if (!before)
    return fmt::format(
        "saved_homes: homes are written to {} every {} s from now, and at "
        "shutdown (the file is read at start only)",
        after->path, every);
  if (before->path != after->path)
    return fmt::format(
        "saved_homes: homes are written to {} every {} s from now ({} keeps the "
        "homes of its last write)",
        after->path, every, before->path);
  return fmt::format("saved_homes: {} is written every {} s from now", after->path, every);
}

}  // namespace

std::vector<std::string> Warden::reload(config::Config next) {
  const auto current = models();
  const config::Config& now = current->config;
  std::vector<std::string> notes;  // for the operator, logged as warnings
  auto keep = [&](bool changed, std::string what) {
    if (changed) notes.push_back(std::move(what) + " changed; it takes effect at the next restart");
  };
  keep(next.listen_host != now.listen_host || next.listen_port != now.listen_port, "listen");
  keep(next.threads != now.threads, "threads");
  keep(next.limits.max_header_bytes != now.limits.max_header_bytes ||
           next.limits.max_body_bytes != now.limits.max_body_bytes ||
           next.limits.max_connections != now.limits.max_connections,
       "limits");
  keep(next.timeouts.client_read != now.timeouts.client_read, "timeouts.client_read");
  keep(next.timeouts.client_idle != now.timeouts.client_idle, "timeouts.client_idle");
  keep(next.scrape_interval != now.scrape_interval || next.unhealthy_after != now.unhealthy_after,
       "scrape settings");
  keep(next.shared_homes != now.shared_homes, "shared_homes");
  if (next.saved_homes != now.saved_homes) notes.push_back(saved_homes_change(now, next));
  if (admin_token(next).has_value() != admin_token(now).has_value())
    notes.push_back(run_time_control(next));
  next.listen_host = now.listen_host;
  next.listen_port = now.listen_port;
  next.threads = now.threads;
  next.limits = now.limits;
  next.timeouts.client_read = now.timeouts.client_read;
  next.timeouts.client_idle = now.timeouts.client_idle;
  next.scrape_interval = now.scrape_interval;
  next.unhealthy_after = now.unhealthy_after;
  next.shared_homes = now.shared_homes;

  std::shared_ptr<const ModelSet> set = make_model_set(std::move(next), current.get());
  for (auto& note : routing_notes(*current, *set)) notes.push_back(std::move(note));
  {
    std::lock_guard lock{models_mutex_};
    models_ = set;
  }
  // Then the new policy for routers carried over, so whoever sees it sees the
  // new configuration too.
  for (const auto& m : set->models) {
    std::lock_guard lock{m->mutex};
    m->router.reconfigure(m->config);
  }
  reloads_.applied(std::chrono::system_clock::now());
  return notes;
}

UpstreamPool& Warden::pool_for_this_thread(net::Exchange& exchange) {
  auto& ctx = static_cast<net::asio::io_context&>(
      net::asio::query(exchange.stream().get_executor(), net::asio::execution::context));
  return *pools_.at(&ctx);
}

// Not a coroutine: a forwarded request goes straight to forward's frame, the
// rest to serve_local's.
net::Awaitable<void> Warden::handle(net::Exchange& exchange) {
  const std::string_view target = exchange.request().target();  // never rewritten
  const std::string_view path = path_of(target);
  const http::verb method = exchange.request().method();
  if ((is_forwarded_route(path) && method == http::verb::post) ||
      !stored_response_of(path, method).empty())
    return forward(exchange, dialect_of(target));
  return serve_local(exchange);
}

namespace {

// A forwarded request of one warden, listed on its I/O thread while it runs,
// so that the end of a shutdown's grace period can close its upstream
// connection (Warden::cut_in_flight).
struct Cuttable {
  Cuttable(const Warden& owner, UpstreamConnection*& live) : owner(&owner), live(&live) {}
  boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>>
      hook;
  const Warden* owner;
  UpstreamConnection** live;  // the request's upstream connection while it has one
};

thread_local boost::intrusive::list<
    Cuttable, boost::intrusive::member_hook<Cuttable, decltype(Cuttable::hook), &Cuttable::hook>,
    boost::intrusive::constant_time_size<false>>
    cuttable_here;

}  // namespace

void Warden::cut_in_flight(net::IoThreads& io) {
  cutting_.store(true);
  for (std::size_t i = 0; i < io.size(); ++i) {
    net::asio::post(io.at(i), [this] {
      for (Cuttable& request : cuttable_here) {
        if (request.owner == this && *request.live) (*request.live)->close();
      }
    });
  }
}

// Everything one forwarded request carries through its attempts.
namespace {
// The request's id as vLLM's OpenAI server takes it (its request id becomes
// chatcmpl-ID), so that the engine's log names what the warden's logs name.
constexpr std::string_view kRequestIdField = "X-Request-Id";
}  // namespace

struct Warden::Forward {
  std::shared_ptr<const ModelSet> set;  // the configuration this request started with
  net::Exchange& exchange;
  Dialect dialect;
  ModelState& model;
  core::RequestFacts facts;
  bool injected_usage;
  std::uint64_t id;
  // The X-Request-Id it goes upstream with: the client's (a view of its
  // request), or this warden's tag and `id`, written into added_id.
  std::string_view request_id;
  std::array<char, 32> added_id{};
  UsageReport usage = UsageReport::kFull;  // what the route's replies say of token usage
  std::string_view route;                  // one of config::kForwardedRoutes
  core::RankPinning rank_pinning = core::RankPinning::kHonoured;  // (model's unranked_routes)
  // A Responses request that has its server store the response: where that
  // is, is remembered for the requests chained to it.
  bool stores_response = false;
  UpstreamConnection* live_upstream = nullptr;
  AccessRecord log{};  // filled as the request goes; written when the set has an access log
};

net::Awaitable<void> Warden::forward(net::Exchange& exchange, Dialect dialect) {
  auto& request = exchange.request();
  InProgress in_progress{in_progress_};
  auto set = models();
  // Clock reads for the access log only (the request path otherwise reads coarse clocks).
  const bool logged = set->access_log != nullptr;
  const auto received = logged ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const std::size_t body_bytes = request.body().size();  // as sent, before any rewrite below
  // As vLLM's server reads its path parameter: percent-decoded.
  const std::string stored =
      percent_decoded(stored_response_of(path_of(request.target()), request.method()));
  Admission admission = admit(request, dialect, *set, stored);
  if (admission.refusal) {
    const unsigned status = admission.refusal->result_int();
    set->refusals->count(admission.model ? admission.model->config.name : "", admission.reason);
    if (!admission.unknown_model.empty())
      set->refusals->log_unknown_model(set->config, admission.unknown_model,
                                       path_of(request.target()), request[http::field::user_agent]);
    // Its number is drawn before the reply goes, so that the numbers follow
    // the order the requests were answered in.
    const std::uint64_t id = logged ? next_request_id_.fetch_add(1, std::memory_order_relaxed) : 0;
    co_await exchange.respond(std::move(*admission.refusal));
    if (logged) {
      AccessRecord record{.received = received,
                          .request_id = request[kRequestIdField],
                          .status = status,
                          .body_bytes = body_bytes};
      if (admission.model) record.model = admission.model->config.name;
      write_access_log(*set, id, exchange, record);
    }
    co_return;
  }
  ModelState* model = admission.model;
  core::RequestFacts& facts = admission.facts;

  // Ask for the usage chunk the client did not, so that every streamed request
  // is measured; the accounting strips it from what this client receives.
  bool injected_usage = false;
  // Only into a body without stream_options (a second key would be a
  // duplicate, and the client's would win in vLLM); /v1/responses streams
  // report usage on their own and have no stream_options.
  if (model->config.inject_stream_usage && dialect == Dialect::kOpenAi && facts.stream &&
      !facts.has_stream_options && path_of(request.target()) != "/v1/responses") {
    if (auto rewritten = telemetry::with_stream_usage(request.body())) {
      request.body().assign(*rewritten);
      injected_usage = true;
    }
  }

  Forward f{std::move(set), exchange, dialect, *model, std::move(facts), injected_usage,
            next_request_id_.fetch_add(1, std::memory_order_relaxed)};
  f.log.received = received;
  f.log.body_bytes = body_bytes;
  // The client's own id goes up unless it is for this hop only (named in
  // Connection, so dropped on the way): the server is then sent one of ours.
  if (const auto client_id = request.find(kRequestIdField);
      client_id && !client_id->empty() && !named_in_connection(request, kRequestIdField)) {
    f.request_id = *client_id;
  } else {
    const auto written =
        fmt::format_to_n(f.added_id.data(), f.added_id.size(), "{}-{}",
                         std::string_view(instance_.data(), instance_.size()), f.id);
    f.request_id = std::string_view(f.added_id.data(), std::min(written.size, f.added_id.size()));
  }
  f.log.request_id = f.request_id;
  // A stored response's routes belong to /v1/responses; their replies hold
  // the response again, whose tokens were counted when it was made.
  f.route = stored.empty() ? path_of(request.target()) : kResponsesRoute;
  f.usage = stored.empty() ? usage_report(f.route) : UsageReport::kRepeated;
  if (std::ranges::find(model->config.unranked_routes, f.route) !=
      model->config.unranked_routes.end())
    f.rank_pinning = core::RankPinning::kIgnored;
  f.stores_response = stored.empty() && f.route == kResponsesRoute && f.facts.store;
  f.log.model = model->config.name;
  if (f.facts.identity.kind == core::IdentityKind::kSession) f.log.conversation = f.facts.identity.session_hash;

  // If the client goes away while an attempt waits on its upstream, the live
  // upstream connection is closed at once, so the engine aborts the request
  // and frees its KV blocks. The relay starts the watch (a pending read of
  // the client's socket, not a racing coroutine) when it waits.
  Cuttable cuttable{*this, f.live_upstream};
  cuttable_here.push_back(cuttable);
  exchange.on_client_gone([&f] {
    if (f.live_upstream) f.live_upstream->close();
  });
  co_await run_attempts(f);
  exchange.stop_watching_client();
  // Whether it left while the request waited (the watch saw it) or while
  // its reply was written (the write failed).
  if (exchange.client_gone() || f.log.outcome == "client_gone") {
    exchange.close_after();
    spdlog::info("req={} model={} client went away; upstream request closed", f.id, model->config.name);
  }
  write_access_log(*f.set, f.id, exchange, f.log);
}

namespace {

// Answers a forwarded request with an error in its client's dialect. A
// coroutine of its own, so that the reply is built in its frame and not in
// that of run_attempts, which every request allocates (see below).
net::Awaitable<void> respond_error(net::Exchange& exchange, Dialect dialect, http::status status,
                                   std::string_view message) {
  co_await exchange.respond(error_response(dialect, status, message));
}

// Every replica of a model down can refuse thousands of requests a second: the
// process log says so once per 10 s, with the count since its last line. An
// error: clients are failed, and no retry of theirs can help until a replica
// is back.
void log_unavailable(ModelState& model, std::uint64_t id) {
  if (const std::uint64_t refused = model.unavailable_log.note())
    spdlog::error(
        "req={} model={} no healthy replica: answered 503 ({} request(s) since the last "
        "such line)",
        id, model.config.name, refused);
}

// Once per model and route (and reload): where the policy chose a rank, the
// request went to the rank's server without one.
void log_unranked(ModelState& model, std::string_view path) {
  const auto route = std::ranges::find(config::kForwardedRoutes, path);
  const auto bit = static_cast<std::uint8_t>(1u << (route - config::kForwardedRoutes.begin()));
  if ((model.unranked_told.fetch_or(bit, std::memory_order_relaxed) & bit) != 0) return;
  spdlog::info(
      "model={}: requests on {}, one of its unranked_routes, go to multi-rank servers without "
      "X-data-parallel-rank: each server's own balancer picks the rank (vLLM does not read the "
      "header on /v1/responses), their conversations keep to a server, not to a rank, and they "
      "are counted as replica \"unassigned\"",
      model.config.name, path);
}

// A retry's chance, as forward_once asks it: retries left (`allowed`), and
// a healthy replica outside those tried and the one (or, when the server's
// own balancer picks the rank, the server) `decision` chose.
struct OtherReplica final : RetryElsewhere {
  OtherReplica(bool allowed, ModelState& model, std::span<const int> tried,
               const core::RouteDecision& decision)
      : allowed(allowed), model(model), tried(tried), decision(decision) {}
  bool operator()() const override {
    if (!allowed) return false;
    std::lock_guard lock{model.mutex};
    const core::Router& router = model.router;
    auto [first, count] = decision.replica >= 0 ? std::pair{decision.replica, 1}
                                                : router.backend_replicas(decision.backend);
    for (int i = 0; i < router.replica_count(); ++i) {
      const bool chosen = i >= first && i < first + count;
      if (!chosen && router.healthy(i) && std::ranges::find(tried, i) == tried.end()) return true;
    }
    return false;
  }
  bool allowed;
  ModelState& model;
  std::span<const int> tried;
  const core::RouteDecision& decision;
};

}  // namespace

// Kept small (GCC gives every local of a coroutine, and every temporary of an
// expression that awaits, a slot in its frame, allocated per request): the
// accounting goes on the heap and error replies are built in respond_error,
// with their text in one local string.
net::Awaitable<void> Warden::run_attempts(Forward& f) {
  using Outcome = AttemptResult::Outcome;
  const auto& identity = f.facts.identity;
  std::vector<int> tried;
  std::vector<ServerError> server_errors;  // this request's 5xx replies, before a retry
  AttemptResult last;
  std::string refusal;  // the text of an error reply the warden itself sends

  const config::Config& config = f.set->config;
  if (shared_homes_ && identity.kind != core::IdentityKind::kPinned)
    co_await shared_homes_->learn(f.model, identity);
  bool placed = false;  // an earlier attempt chose the conversation's home
  for (int attempt = 0; attempt <= config.retries; ++attempt) {
    core::RouteDecision decision;
    bool affinity = true;
    std::optional<Carry> carry;
    {
      std::lock_guard lock{f.model.mutex};
      decision = f.model.router.route(identity, coarse_steady_now(), tried, f.rank_pinning, placed);
      affinity = f.model.router.affinity();
      if (decision.ok()) carry = carried(*f.model.routing, decision.replica, decision.backend);
    }
    along_carries(std::move(carry), [](core::Router& router, int replica, int backend) {
      router.add_in_flight(replica, backend);
    });
    placed = decision.chose_home;
    if (affinity && decision.ok() && decision.replica < 0) log_unranked(f.model, f.route);
    if (!decision.ok()) {
      if (attempt > 0) break;  // retries exhausted the healthy replicas: report the upstream error
      f.log.outcome = "refused";
      f.set->refusals->count(f.model.config.name,
                             decision.status == core::RouteDecision::Status::kUnknownRank
                                 ? "unknown_rank"
                                 : "no_healthy_replica");
      if (decision.status == core::RouteDecision::Status::kUnknownRank) {
        f.log.status = 400;
        f.log.error = "unknown_rank";
        // As the client wrote it (the parsed rank saturates past int).
        refusal = "X-data-parallel-rank " +
                  std::string(f.exchange.request()[core::kDataParallelRankHeader]) +
                  " is out of range: model '" + f.model.config.name + "' has " +
                  std::to_string(f.model.router.replica_count()) + " replicas (numbered 0 to " +
                  std::to_string(f.model.router.replica_count() - 1) + ")";
        co_await respond_error(f.exchange, f.dialect, http::status::bad_request, refusal);
      } else {
        log_unavailable(f.model, f.id);
        f.log.status = 503;
        f.log.error = "no_healthy_replica";
        refusal = "no healthy replica for model '" + f.model.config.name + "'; retry shortly";
        co_await respond_error(f.exchange, f.dialect, http::status::service_unavailable, refusal);
      }
      co_return;
    }
    InFlight in_flight{f.model, decision, shared_homes_.get()};
    if (shared_homes_) shared_homes_->tell(f.model, decision);
    const auto& backend = f.model.config.backends[static_cast<std::size_t>(decision.backend)];
    f.log.route = core::to_string(decision.kind);
    f.log.replica = decision.replica;
    // The layout is fixed for the router's life: read without the lock.
    f.log.rank = decision.replica >= 0 ? f.model.router.replica_rank(decision.replica) : -1;
    f.log.server = backend.url;
    f.log.attempts = attempt + 1;
    f.log.status = 0;
    f.log.first_byte.reset();
    if (spdlog::should_log(spdlog::level::debug)) {
      const bool session = identity.kind == core::IdentityKind::kSession;
      spdlog::debug(
          "req={} model={} replica={} server={} route={} conv={} from={}", f.id,
          f.model.config.name, replica_label(decision.replica), backend.url,
          core::to_string(decision.kind), session ? short_hash(identity.session_hash) : "-",
          decision.bound ? "stored_response"
          : session ? f.model.identity.sources[static_cast<std::size_t>(identity.source)].label()
                    : "-");
    }

    const auto accounting =
        std::make_unique<RequestAccounting>(f.model.telemetry, f.injected_usage, decision.replica,
                                            decision.backend, [&in_flight] { in_flight.finish(); });
    if (f.set->access_log) accounting->log_to(&f.log);
    accounting->expect(f.usage);
    if (f.stores_response)
      accounting->read_response_id(
          [&in_flight](std::string_view response) { in_flight.stored(response); });
    AttemptContext ctx{f.exchange,      pool_for_this_thread(f.exchange), config.timeouts,
                       f.dialect,       f.exchange.remote_address(),      accounting.get(),
                       &f.live_upstream, &cutting_};
    // The client's own id is in the fields relayed as they came.
    if (f.request_id.data() == f.added_id.data()) ctx.request_id = f.request_id;
    // A 5xx is retried only where the retry has another replica to go to: a
    // pinned request has none, nor one chained to a response stored here;
    // and with every other one tried or unhealthy the upstream's own reply
    // (its status and its words) is the answer.
    const bool nowhere_else = identity.kind == core::IdentityKind::kPinned || decision.bound;
    const OtherReplica retry_elsewhere{attempt < config.retries && !nowhere_else, f.model, tried,
                                       decision};
    last = co_await forward_once(ctx, backend, decision.rank, retry_elsewhere);
    if (decision.replica >= 0) {  // (else the server's own balancer picked the rank)
      if (last.outcome == Outcome::kRetryable && last.error_kind == "status_5xx") {
        server_errors.push_back({decision.replica, decision.backend, decision.rank});
      } else if (last.outcome == Outcome::kRelayed && static_cast<unsigned>(last.status) < 500) {
        note_served_well(f.model, decision.replica);
        for (const ServerError& e : server_errors) note_server_error(f.model, config, e);
      }
    }
    // A reply cut short was counted by RequestAccounting, before the client
    // heard of it; so was a relayed 5xx.
    if (!last.error_kind.empty() && last.outcome != Outcome::kCutShort &&
        last.error_kind != kShutdownKind)
      f.model.telemetry.replica(decision.replica).count_error(last.error_kind);
    if (f.exchange.client_gone()) last.outcome = Outcome::kClientGone;
    f.log.error = last.error_kind;
    switch (last.outcome) {
      case Outcome::kRelayed:
        f.log.outcome = "relayed";
        co_return;
      case Outcome::kClientGone:
        f.log.outcome = "client_gone";
        co_return;
      case Outcome::kCutShort:
        f.log.outcome = "cut_short";
        spdlog::warn("req={} model={} replica={} {}", f.id, f.model.config.name,
                     replica_label(decision.replica), last.message);
        co_return;
      case Outcome::kFailed:
        spdlog::warn("req={} model={} replica={} {}", f.id, f.model.config.name,
                     replica_label(decision.replica), last.message);
        in_flight.finish();  // before the client hears, as a relayed reply's is
        f.log.outcome = "failed";
        f.log.status = static_cast<unsigned>(last.status);
        co_await respond_error(f.exchange, f.dialect, last.status, last.message);
        co_return;
      case Outcome::kRetryable:
        spdlog::warn("req={} model={} replica={} {} (attempt {})", f.id, f.model.config.name,
                     replica_label(decision.replica), last.message, attempt + 1);
        // The whole server failed when it could not be reached, or when its
        // own balancer picked the rank: none of its ranks is tried again.
        if (decision.replica >= 0 && !last.server_unreachable) {
          tried.push_back(decision.replica);
        } else {
          const auto [first, count] = f.model.router.backend_replicas(decision.backend);
          for (int i = first; i < first + count; ++i) tried.push_back(i);
        }
        if (last.server_unreachable && health_probed_.load(std::memory_order_relaxed))
          take_out_of_service(f.model, decision.backend, last.message);
        // Its conversation's home may be gone: another warden that found
        // out first may have moved it, and the retry then follows.
        if (last.server_unreachable && shared_homes_ && !nowhere_else &&
            identity.kind == core::IdentityKind::kSession && attempt < config.retries)
          co_await shared_homes_->learn(f.model, identity, decision.backend);
        break;
    }
    // The router sends a pinned request to its rank whatever was tried, and
    // elsewhere a chained one would find no stored response: no other
    // replica to retry on.
    if (nowhere_else) break;
  }
  if (last.message.empty()) last.message = "upstream unreachable";
  f.log.outcome = "failed";
  f.log.status = 502;
  co_await respond_error(f.exchange, f.dialect, http::status::bad_gateway, last.message);
}

}  // namespace lmwarden::proxy
