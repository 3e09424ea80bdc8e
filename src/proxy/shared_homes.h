// Conversation homes shared by several wardens in front of the same servers
// (DESIGN §10), through Redis (homes/home_store.h).
//
// Each warden still routes from its own tables; Redis only carries what the
// others chose, so that a conversation whose turns reach several wardens
// (behind a virtual IP, DNS round robin or another balancer) keeps one home.
//   - A request of a conversation this warden does not know (its first turn
//     here) looks its home up before it is placed: one GET, waited for at
//     most `shared_homes.timeout`. A home found there, on a replica this
//     model has, becomes this warden's home for the conversation, and the
//     request is placed by the usual rules from there (sticky, or spilled if
//     home is busy, or rehomed if home is unhealthy here). Not found, failed
//     or late (the request stops waiting at the timeout, whatever holds the
//     store up, a host name's resolution included): placed as a new
//     conversation, as without Redis.
//   - Every request of a conversation then claims the home it keeps
//     (HomeStore::claim, with the model's session_ttl, not waited for): set
//     unless another warden's home is there (for a move off a home this
//     warden saw unhealthy: unless anything but that home is there). The
//     idle TTL counts from the last turn on any warden. When another
//     warden's home is there, this warden moves the conversation to it, from
//     its next request on, unless it sees that replica unhealthy. So two
//     wardens that placed the same conversation at once (its first requests
//     reached both, as Claude Code sends two at a conversation's start; or
//     both moved it off a failed home) agree at once, and two that came to
//     disagree otherwise (a claim failed while Redis was away, or one moved
//     the conversation off a home the other still sees healthy) agree at
//     the next write that reaches Redis.
//   - A Responses request chained to a stored response this warden does not
//     know looks the response's replica up the same way (once more after
//     kChainedRetryAfter when Redis has none: the warden that made it may
//     be writing it), and each stored response is written as soon as it is
//     known (a stream's first event naming it, a JSON body's end).
// A conversation this warden already knows is not looked up again (what
// settles two wardens' homes is the answer to each claim), unless its last
// claim failed (Redis away, or late): then its next request, once Redis is
// connected, asks before it is placed, and follows a home another warden
// keeps there. Without that, the first request after an outage would go to
// this warden's home before its claim's answer came back, and the two
// wardens' turns would miss each other once more.
//
// Keys name the model and the stable hash of the id, the same in every
// warden: "<prefix><model>:c:<16 hex digits>" for a conversation, ":r:" for
// a stored response. Values name the replica by its server (server_name)
// and its rank ("<rank> <server>"), not by an index, which depends on the
// order of each warden's backends: the wardens must name each server alike
// (the same host name, or the same address).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "config/config.h"
#include "core/identity.h"
#include "core/router.h"
#include "homes/home_store.h"
#include "net/executor.h"

namespace lmwarden::proxy {

struct ModelState;
struct RoutingState;

enum class HomeKind : char { kConversation = 'c', kResponse = 'r' };

std::string home_key(std::string_view prefix, std::string_view model, HomeKind kind,
                     std::uint64_t hash);
// A server as values name it, the same however its URL is written in the
// file: "http://HOST:PORT/PATH", the port always there, no trailing '/'.
std::string server_name(const config::BackendConfig& backend);
std::vector<std::string> server_names(const config::ModelConfig& model);
// The index of the server named `name` among `servers` (server_names); -1
// when it is not one of them.
int server_index(const std::vector<std::string>& servers, std::string_view name) noexcept;
std::string home_value(std::string_view server, int rank);

struct HomePlace {
  int rank = 0;
  std::string_view url;
};
// nullopt for anything home_value did not write.
std::optional<HomePlace> parse_home_value(std::string_view value) noexcept;

// What /metrics says of the sharing (lmwarden_shared_homes_*). Lookups are
// counted as their requests saw them: one the store answered after its
// request stopped waiting is failed, whatever the store's own count says.
struct SharedHomesStats {
  std::uint64_t lookups_found = 0;  // adopted, or this warden knew it meanwhile
  std::uint64_t lookups_absent = 0;
  std::uint64_t lookups_failed = 0;    // Redis unreachable, an error, or late
  std::uint64_t lookups_unusable = 0;  // a server or rank this model does not list
  std::uint64_t writes_sent = 0;       // writes are claims and stored responses' SETs
  std::uint64_t writes_failed = 0;
  std::uint64_t writes_dropped = 0;
  // Claims, one per routed request of a conversation, by their answer.
  std::uint64_t claims_taken = 0;      // this warden's home is the shared home
  std::uint64_t claims_yielded = 0;    // another's is: the conversation follows it
  std::uint64_t claims_kept = 0;       // another's, not followed: unhealthy here, or moved on
  std::uint64_t claims_unusable = 0;   // another's, on a server or rank not listed here
  std::uint64_t claims_unchecked = 0;  // written with a plain SET: Redis refuses scripts
  std::uint64_t claims_failed = 0;     // not answered (Redis unreachable, an error, late)
  bool connected = false;
};

// What /api/models says of the sharing.
struct SharedHomesView {
  std::string redis;  // where, without its password
  SharedHomesStats stats;
};

// The store's settings from the configuration: its address (the URL checked
// at load, with the password from password_env when set) and timeouts.
homes::HomeStoreOptions store_options(const config::SharedHomes& config);

// How long a chained request whose stored response Redis does not have
// waits before asking again (see learn).
inline constexpr std::chrono::milliseconds kChainedRetryAfter{10};
// Conversations whose last claim failed that are remembered, to be asked
// about at their next request (see above); past it, such a conversation
// settles only at its next claim's answer.
inline constexpr std::size_t kMaxUnsettled = 100'000;

class SharedHomes {
 public:
  explicit SharedHomes(const config::SharedHomes& config);

  // Before `identity`'s request is placed: what the other wardens know of
  // its conversation or stored response that this one does not, adopted by
  // the model's router. Returns at once when there is nothing to ask.
  // `failed_backend`: a server this request could not reach, before its
  // retry; a conversation homed there is asked about even while the server
  // still counts as healthy here (another warden may have moved it).
  net::Awaitable<void> learn(ModelState& model, const core::Identity& identity,
                             int failed_backend = -1);
  // After a request was placed: the home it keeps, claimed (see above).
  void tell(const ModelState& model, const core::RouteDecision& decision);
  // A stored response that the router remembered on `replica`.
  void tell_response(const ModelState& model, std::uint64_t response, int replica);
  // Stops the store's thread, which hands each lookup it still holds its
  // failure (posted to the asking request's I/O context) first: call it
  // while the I/O threads still run. Lookups made afterwards get no answer
  // (each ends at its timeout), and writes are dropped.
  void stop() { store_.stop(); }

  SharedHomesStats stats() const;
  // The Redis it shares through, without its password: "redis://host:port/db".
  std::string where() const { return homes::describe(store_.options().address); }

 private:
  // What a lookup came to: a home found and adopted (or known here
  // meanwhile), none in Redis, or nothing usable (failed, late, unusable).
  enum class Asked { kFound, kAbsent, kNothing };
  // Looks `hash` up and adopts what is found.
  net::Awaitable<Asked> ask(ModelState& model, HomeKind kind, std::uint64_t hash);
  void claim(const ModelState& model, const core::RouteDecision& decision);
  // Runs on the store's thread.
  void claimed(const std::weak_ptr<RoutingState>& routing, const std::string& model,
               const core::RouteDecision& decision, const homes::Claim& claim);
  // Conversations whose last claim failed (see above), by unsettled_key.
  bool unsettled(std::uint64_t key) const;
  void set_unsettled(std::uint64_t key, bool unsettled);
  // The replica a value names in `routing`'s layout; -1, with a warning the
  // first time, when it names none.
  int replica_of(const RoutingState& routing, std::string_view model, std::string_view value);

  const std::string prefix_;
  const std::chrono::milliseconds timeout_;  // a request's wait for a lookup
  std::atomic<std::uint64_t> found_{0}, absent_{0}, failed_{0}, unusable_{0};
  std::atomic<std::uint64_t> yielded_{0}, kept_{0}, claims_unusable_{0}, claims_failed_{0};
  std::atomic<bool> unusable_warned_{false};
  mutable std::mutex unsettled_mutex_;
  std::unordered_set<std::uint64_t> unsettled_;  // guarded by unsettled_mutex_
  std::atomic<std::size_t> unsettled_count_{0};  // its size, read without the lock
  // Last: its thread, which runs the claims' answers, ends first.
  homes::HomeStore store_;
};

}  // namespace lmwarden::proxy
