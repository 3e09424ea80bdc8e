#include "proxy/shared_homes.h"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <charconv>
#include <memory>
#include <mutex>
#include <optional>

#include "common/coarse_clock.h"
#include "common/hash.h"
#include "common/host_port.h"
#include "proxy/warden.h"

namespace lmwarden::proxy {
namespace {

// One lookup as its request waits for it: the store's answer, posted back to
// the request's thread, or the end of the wait, whichever comes first. The
// store bounds its own connects and replies by the timeout, but not a host
// name's resolution, nor the wait behind a connect in progress; the timer
// bounds what the request waits for. Touched on the request's thread only.
struct LookupWait {
  explicit LookupWait(const net::Executor& executor) : timer(executor) {}
  net::Timer timer;
  std::optional<homes::Lookup> answer;
  bool over = false;  // the request went on: a later answer is dropped
};

// A conversation of a model, as the set of unsettled ones keys it.
std::uint64_t unsettled_key(std::string_view model, std::uint64_t conversation) {
  return stable_hash(model) ^ conversation;
}

}  // namespace

std::string home_key(std::string_view prefix, std::string_view model, HomeKind kind,
                     std::uint64_t hash) {
  char digits[16];
  const auto end = std::to_chars(std::begin(digits), std::end(digits), hash, 16).ptr;
  std::string key;
  key.reserve(prefix.size() + model.size() + 4 + 16);
  key.append(prefix).append(model).append(1, ':').append(1, static_cast<char>(kind)).append(1, ':');
  key.append(static_cast<std::size_t>(16 - (end - digits)), '0');  // fixed width
  key.append(digits, end);
  return key;
}

std::string server_name(const config::BackendConfig& backend) {
  std::string name = "http://" + host_port(backend.host, backend.port);
  return name.append(backend.base_path);
}

std::vector<std::string> server_names(const config::ModelConfig& model) {
  std::vector<std::string> names;
  names.reserve(model.backends.size());
  for (const auto& backend : model.backends) names.push_back(server_name(backend));
  return names;
}

int server_index(const std::vector<std::string>& servers, std::string_view name) noexcept {
  const auto it = std::ranges::find(servers, name);
  return it == servers.end() ? -1 : static_cast<int>(it - servers.begin());
}

std::string home_value(std::string_view url, int rank) {
  std::string value = std::to_string(rank);
  value.append(1, ' ').append(url);
  return value;
}

std::optional<HomePlace> parse_home_value(std::string_view value) noexcept {
  const std::size_t space = value.find(' ');
  if (space == 0 || space == std::string_view::npos || space + 1 == value.size())
    return std::nullopt;
  HomePlace place;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + space, place.rank);
  if (ec != std::errc{} || end != value.data() + space || place.rank < 0) return std::nullopt;
  place.url = value.substr(space + 1);
  return place;
}

homes::HomeStoreOptions store_options(const config::SharedHomes& config) {
  auto address = homes::parse_redis_url(config.redis);  // checked when the file was loaded
  homes::HomeStoreOptions options;
  if (address) options.address = std::move(*address);
  if (config.password_env) options.address.password = config.password;
  options.timeout = config.timeout;
  options.tls = homes::RedisTls{.ca_file = config.tls_ca_file,
                                .cert_file = config.tls_cert_file,
                                .key_file = config.tls_key_file,
                                .server_name = config.tls_server_name};
  return options;
}

SharedHomes::SharedHomes(const config::SharedHomes& config)
    : prefix_(config.key_prefix), timeout_(config.timeout), store_(store_options(config)) {}

net::Awaitable<void> SharedHomes::learn(ModelState& model, const core::Identity& identity,
                                        int failed_backend) {
  const bool conversation = identity.kind == core::IdentityKind::kSession;
  const bool chained = identity.previous_response != 0;
  if (!conversation && !chained) co_return;
  bool ask_response = false;
  bool ask_conversation = false;
  {
    std::lock_guard lock{model.mutex};
    if (!model.router.affinity()) co_return;  // nothing is followed
    const auto now = coarse_steady_now();
    ask_response = chained && !model.router.holds_response(identity.previous_response, now);
    // Not known here; or known, with a home that takes no new work here or
    // that this request could not reach, so that this request would move
    // it: another warden may have moved it already, and it then follows
    // there rather than to a replica of this warden's choosing (one cold
    // prefill for the move, not one per warden).
    if (conversation) {
      const std::optional<int> home = model.router.home_of(identity.session_hash, now);
      ask_conversation = !home || !model.router.healthy(*home) ||
                         model.router.replica_backend(*home) == failed_backend;
    }
  }
  // Known here, but its last claim failed: asked again once Redis answers.
  if (conversation && !ask_conversation && unsettled_count_.load(std::memory_order_relaxed) > 0 &&
      store_.connected())
    ask_conversation = unsettled(unsettled_key(model.config.name, identity.session_hash));
  // A stored response binds the request (and moves its conversation there):
  // asked first, and the conversation only when it is not found.
  if (ask_response) {
    Asked asked = co_await ask(model, HomeKind::kResponse, identity.previous_response);
    if (asked == Asked::kAbsent) {
      // No warden has written it yet. A non-streamed reply names its
      // response only at its end, and the warden that relayed it writes it
      // then; a client that sends the chained turn here at once can ask
      // before that write has reached Redis (measured up to 3 ms). Asked
      // once more after a pause; a response no warden knows costs this once.
      net::Timer pause{co_await net::asio::this_coro::executor};
      pause.expires_after(kChainedRetryAfter);
      co_await pause.async_wait(net::kAsTuple);
      asked = co_await ask(model, HomeKind::kResponse, identity.previous_response);
    }
    if (asked == Asked::kFound) co_return;
  }
  if (ask_conversation) co_await ask(model, HomeKind::kConversation, identity.session_hash);
}

net::Awaitable<SharedHomes::Asked> SharedHomes::ask(ModelState& model, HomeKind kind,
                                                    std::uint64_t hash) {
  const net::Executor executor = co_await net::asio::this_coro::executor;
  const auto wait = std::make_shared<LookupWait>(executor);
  wait->timer.expires_after(timeout_);
  store_.get(home_key(prefix_, model.config.name, kind, hash),
             [wait, executor](homes::Lookup found) {
               net::asio::post(executor, [wait, found = std::move(found)]() mutable {
                 if (wait->over) return;
                 wait->answer = std::move(found);
                 wait->timer.cancel();
               });
             });
  co_await wait->timer.async_wait(net::kAsTuple);  // expired, or cancelled by the answer
  wait->over = true;
  const homes::Lookup found = wait->answer.value_or(homes::Lookup{});  // none: kFailed
  if (found.status == homes::LookupStatus::kAbsent) {
    ++absent_;
    co_return Asked::kAbsent;
  }
  if (found.status != homes::LookupStatus::kFound) {
    ++failed_;
    co_return Asked::kNothing;
  }
  const int replica = replica_of(*model.routing, model.config.name, found.value);
  if (replica < 0) {
    ++unusable_;
    co_return Asked::kNothing;
  }
  ++found_;
  std::lock_guard lock{model.mutex};
  const auto now = coarse_steady_now();
  // A conversation this warden knows (one whose claim failed, or one it came
  // to know meanwhile) follows the home found; a stored response it knows
  // stays where it is remembered.
  if (kind == HomeKind::kResponse) {
    model.router.adopt_response(hash, replica, now);
  } else if (!model.router.adopt_home(hash, replica, now) &&
             model.router.follow_home(hash, replica, now) == core::Router::Settled::kMoved) {
    spdlog::debug("shared homes: model={} conv={} follows another warden's home, replica {}",
                  model.config.name, short_hash(hash), replica);
  }
  co_return Asked::kFound;
}

int SharedHomes::replica_of(const RoutingState& routing, std::string_view model,
                            std::string_view value) {
  const auto place = parse_home_value(value);
  const int backend = place ? server_index(routing.servers, place->url) : -1;
  // The router's layout is fixed for its life (see value_of): no lock to read it.
  const int replica = place ? routing.router.replica_at(backend, place->rank) : -1;
  // Another warden's server this model does not list: most likely the same
  // server written another way (a name for an address).
  if (replica < 0 && !unusable_warned_.exchange(true))
    spdlog::warn(
        "shared homes: model={} a home in Redis names {}, a server or rank this model does not "
        "list; is every warden's backend written alike (the same host name or address)? Such "
        "conversations are placed by this warden (lmwarden_shared_homes_lookups_total and "
        "_claims_total{{result=\"unusable\"}})",
        model, place ? place->url : std::string_view{"a value that is no place"});
  return replica;
}

SharedHomesStats SharedHomes::stats() const {
  const homes::HomeStoreStats store = store_.stats();
  const auto load = [](const std::atomic<std::uint64_t>& n) {
    return n.load(std::memory_order_relaxed);
  };
  return {.lookups_found = load(found_),
          .lookups_absent = load(absent_),
          .lookups_failed = load(failed_),
          .lookups_unusable = load(unusable_),
          .writes_sent = store.writes_sent,
          .writes_failed = store.writes_failed,
          .writes_dropped = store.writes_dropped,
          .claims_taken = store.claims_taken,
          .claims_yielded = load(yielded_),
          .claims_kept = load(kept_),
          .claims_unusable = load(claims_unusable_),
          .claims_unchecked = store.claims_unchecked,
          .claims_failed = load(claims_failed_),
          .connected = store.connected};
}

namespace {

// The value naming `replica` of `routing`'s layout. A router's replicas keep
// their server and rank for its whole life (a reload that changes them
// makes a new router), so no lock is needed.
std::string value_of(const RoutingState& routing, int replica) {
  const int backend = routing.router.replica_backend(replica);
  return home_value(routing.servers[static_cast<std::size_t>(backend)],
                    routing.router.replica_rank(replica));
}

std::chrono::milliseconds ttl_of(const ModelState& model) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(model.config.session_ttl);
}

}  // namespace

void SharedHomes::tell(const ModelState& model, const core::RouteDecision& decision) {
  if (decision.ok() && decision.home >= 0) claim(model, decision);
}

void SharedHomes::tell_response(const ModelState& model, std::uint64_t response, int replica) {
  if (replica < 0) return;
  store_.put(home_key(prefix_, model.config.name, HomeKind::kResponse, response),
             value_of(*model.routing, replica), ttl_of(model));
}

void SharedHomes::claim(const ModelState& model, const core::RouteDecision& decision) {
  const RoutingState& routing = *model.routing;
  // A move off a home this warden saw unhealthy replaces that home in Redis;
  // any other write leaves another warden's home there, and follows it.
  std::string replaces =
      decision.former_home >= 0 ? value_of(routing, decision.former_home) : std::string{};
  store_.claim(
      home_key(prefix_, model.config.name, HomeKind::kConversation, decision.conversation),
      std::move(replaces), value_of(routing, decision.home), ttl_of(model),
      [this, routing = std::weak_ptr<RoutingState>(model.routing), name = model.config.name,
       decision](homes::Claim answer) { claimed(routing, name, decision, answer); });
}

void SharedHomes::claimed(const std::weak_ptr<RoutingState>& routing, const std::string& model,
                          const core::RouteDecision& decision, const homes::Claim& claim) {
  using homes::ClaimStatus;
  // Unanswered: asked again at its next request, once Redis answers. A
  // refusal (an error reply) is not: Redis answers, and would most likely
  // refuse the next claim too, while the lookup cost that request a round
  // trip.
  set_unsettled(unsettled_key(model, decision.conversation), claim.status == ClaimStatus::kFailed);
  switch (claim.status) {
    case ClaimStatus::kTaken:
    case ClaimStatus::kUnchecked:
      return;  // (the store counts those)
    case ClaimStatus::kRefused:
    case ClaimStatus::kFailed:
      ++claims_failed_;
      return;
    case ClaimStatus::kHeld:
      break;
  }
  const std::shared_ptr<RoutingState> state = routing.lock();
  if (!state) {
    ++claims_failed_;  // the model's routing state was replaced meanwhile
    return;
  }
  const int replica = replica_of(*state, model, claim.holder);
  if (replica < 0) {
    ++claims_unusable_;
    return;
  }
  std::lock_guard lock{state->mutex};
  const auto settled =
      state->router.settle_home(decision.conversation, decision.home, replica, coarse_steady_now());
  ++(settled == core::Router::Settled::kKept ? kept_ : yielded_);
  if (settled == core::Router::Settled::kMoved)
    spdlog::debug("shared homes: model={} conv={} moves to another warden's home, replica {}",
                  model, short_hash(decision.conversation), replica);
}

bool SharedHomes::unsettled(std::uint64_t key) const {
  std::lock_guard lock{unsettled_mutex_};
  return unsettled_.contains(key);
}

void SharedHomes::set_unsettled(std::uint64_t key, bool unsettled) {
  // Nearly always: a claim taken while nothing is unsettled, with no lock.
  if (!unsettled && unsettled_count_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard lock{unsettled_mutex_};
  if (!unsettled) {
    unsettled_.erase(key);
  } else if (unsettled_.size() < kMaxUnsettled) {
    unsettled_.insert(key);
  }
  unsettled_count_.store(unsettled_.size(), std::memory_order_relaxed);
}

}  // namespace lmwarden::proxy
