// The routing policy of one model (DESIGN §5). Pure: no sockets, no clock of
// its own (`now` is passed in), no threads; the proxy holds it under a lock
// and the offline evaluator drives it in virtual time.
//
// Algorithm, affinity on:
//   client-pinned (X-data-parallel-rank r) → replica r, healthy or not; an
//     unknown rank is an error for the client (400).
//   known conversation, home healthy, in_flight(home) < spill_threshold
//     → home (sticky).
//   known conversation, home at or over the threshold → the least-loaded
//     healthy replica whose load score is lower than home's (spilled; counted
//     as spilled-in on the target). None lower → home after all (sticky).
//     The home never changes on a spill: the cache that matters is still there.
//   known conversation, home unhealthy → least-loaded healthy replica, which
//     becomes the new home (rehomed).
//   new conversation → least-loaded healthy replica; it becomes the home (new).
//   anonymous → least-loaded healthy replica (anonymous), nothing remembered.
//   chained to a stored Responses response whose replica is remembered
//     (remember_response), that replica healthy → there (sticky), whatever
//     its load: the stored response exists nowhere else. Never spilled, and
//     the proxy retries it nowhere else (`bound`). A conversation id it also
//     carries moves its home there. Otherwise it is placed as above.
//   no healthy replica → kNoHealthyReplica (503 for the client).
// Affinity off (the baseline): the backend server with the fewest requests in
// flight per rank; a multi-rank server gets no rank header, so vLLM's own
// balancer picks the rank (replica = -1); a single-rank server is the replica.
// A retry after an upstream failure routes again with the failed replicas
// excluded; a conversation keeps its home (health checks move it if needed).
// "Least loaded" is load_score() (load_score.h), kept per replica in a
// PlacementIndex so a placement does not scan the fleet; ties go to the
// TieBreaker.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "core/identity.h"
#include "core/load_score.h"
#include "core/placement_index.h"
#include "core/session_table.h"
#include "core/tie_breaker.h"

namespace lmwarden::core {

// kRetried: a later attempt of a request whose earlier one failed (not a
// spill: the home was not full, it failed), counted where the retry went.
enum class RouteKind : std::uint8_t {
  kNew, kSticky, kSpilled, kPinned, kAnonymous, kRehomed, kBalanced, kRetried
};
inline constexpr int kRouteKinds = 8;
std::string_view to_string(RouteKind kind) noexcept;

// Whether a request's route lets the warden tell a multi-rank server which
// rank serves it (X-data-parallel-rank). vLLM reads that header on chat,
// completions and messages, but not on /v1/responses: there its own balancer
// picks the rank whatever the header says.
enum class RankPinning : std::uint8_t { kHonoured, kIgnored };

struct RouteDecision {
  enum class Status : std::uint8_t { kOk, kNoHealthyReplica, kUnknownRank };
  Status status = Status::kOk;
  RouteKind kind = RouteKind::kAnonymous;
  int replica = -1;  // index within the model; -1: the server's own balancer picks
  int backend = -1;  // index into the model's backends
  int rank = -1;     // X-data-parallel-rank to send upstream; -1: send none
  int home = -1;     // the conversation's home after this decision; -1: no conversation
  std::uint64_t conversation = 0;  // its key, when home >= 0
  // The request continues a stored response, and goes where it is stored:
  // another replica would not find it (404), so it is not retried elsewhere.
  bool bound = false;
  // This decision chose the conversation's home by load: a new conversation
  // (former_home -1) or one moved off its unhealthy home (former_home). Other
  // wardens may have chosen at the same time (proxy/shared_homes.h).
  bool chose_home = false;
  int former_home = -1;

  bool ok() const noexcept { return status == Status::kOk; }
};

// What the scraper last saw of a replica's engine.
struct EngineStats {
  int running = -1;  // -1: not scraped yet
  int waiting = -1;
  double kv_used = std::nan("");
};

struct ReplicaCounters {
  std::uint64_t routed[kRouteKinds] = {};  // requests sent here, by route kind
  std::uint64_t count(RouteKind k) const noexcept { return routed[static_cast<int>(k)]; }
};

struct ReplicaView {
  int index = 0;
  int backend = 0;
  int rank = 0;
  bool healthy = true;   // takes new work
  bool ejected = false;  // not healthy for its 5xx replies, though its probes pass
  bool probed = true;    // its server healthy by probes and connects
  int in_flight = 0;
  int live_conversations = 0;
  double score = 0;
  ReplicaCounters counters;
  EngineStats engine;
};

struct RouterView {
  bool affinity = true;
  int spill_threshold = config::kAutoSpillThreshold;
  bool spill_threshold_auto = true;
  int in_flight = 0;  // including requests whose rank the server's balancer picks
  std::size_t conversations = 0;
  std::size_t stored_responses = 0;    // Responses ids whose replica is remembered
  std::optional<double> sticky_ratio;  // sticky / (sticky + spilled + rehomed)
  std::vector<ReplicaView> replicas;
  ReplicaCounters unassigned;  // requests sent without a rank: the server's balancer picked
  std::vector<int> unassigned_in_flight;  // of those, in flight, by backend server

  // Requests in flight that no replica counts: in_flight less the replicas'.
  int unassigned_in_flight_total() const noexcept {
    int n = 0;
    for (int b : unassigned_in_flight) n += b;
    return n;
  }
};

class Router final : private SessionTable::Listener {
 public:
  explicit Router(const config::ModelConfig& model,
                  std::unique_ptr<TieBreaker> tie_breaker = std::make_unique<RotatingTieBreaker>());
  Router(const Router&) = delete;  // its session table points back at it
  Router& operator=(const Router&) = delete;

  // Decides where a request goes and counts it in flight there (when ok).
  // `exclude` lists replicas already tried for this request; a request with
  // any is a retry, counted as kRetried wherever it goes. With `pinning`
  // kIgnored, a request the policy places on a rank of a multi-rank server
  // goes to that server without a rank (replica -1), counted as one whose
  // rank the server's balancer picks; its conversation still keeps that
  // home, which then only names the server. Such a request spills when its
  // server has spill_threshold requests in flight per rank, and to another
  // server.
  // A retry whose earlier attempt chose the conversation's home
  // (`placed_by_earlier_attempt`: a new conversation, or one moved off an
  // unhealthy home) moves the home to where the retry goes: the failed
  // replica never served the conversation, and the next turn should find the
  // prefix this one leaves. A retry of a conversation placed before keeps its
  // home.
  RouteDecision route(const Identity& identity, TimePoint now, std::span<const int> exclude = {},
                      RankPinning pinning = RankPinning::kHonoured,
                      bool placed_by_earlier_attempt = false);
  // Ends a routed request's in-flight count. Call exactly once per ok decision.
  // Its conversation was last seen `now`: the idle TTL counts from the end of
  // its last request, and one forgotten while the request ran (it outlived the
  // TTL) comes back with its home.
  void finish(const RouteDecision& decision, TimePoint now) noexcept;
  // Requests in flight that a router this one replaced sent, after a reload
  // that changed the model's replicas, to a replica this router has too
  // (`replica`), or without a rank to a server it has too (`replica` -1,
  // `backend`): counted in this router's loads while they run, as its own
  // are, so that its spills and placements see them (carry_state takes those
  // in flight at the reload). Each add is paired with one drop.
  void add_in_flight(int replica, int backend) noexcept;
  void drop_in_flight(int replica, int backend) noexcept;
  // A reply of `decision` made a stored Responses response (stable_hash of
  // its id: `key`). A later request chained to it (previous_response_id) goes
  // to the same replica, or, where the request went to its server without a
  // rank, to that server. Remembered as conversations are: forgotten after
  // the idle TTL, or, past the table's size, least recently used first.
  // Nothing is remembered while affinity is off. Returns the replica it is
  // remembered on (-1: not remembered).
  int remember_response(std::uint64_t key, const RouteDecision& decision, TimePoint now) noexcept;
  // The same for a response stored on `replica` (one this router has too)
  // by a request that a router this one replaced sent.
  int remember_response_on(std::uint64_t key, int replica, TimePoint now) noexcept;

  // Homes shared with other wardens (proxy/shared_homes.h). Whether this
  // router knows `conversation` (a live home; touches it), and, for one it
  // does not know, taking the home another warden chose: the conversation is
  // then this router's as if it had placed it, and its requests go there
  // (sticky) by the rules above. False, with nothing changed, when the
  // conversation is known already, the replica does not exist, or affinity
  // is off. adopt_response does the same for a stored Responses response.
  bool knows_conversation(std::uint64_t conversation, TimePoint now) {
    return sessions_.find(conversation, now).has_value();
  }
  // The home of a conversation this router knows (touching it), or nullopt.
  std::optional<int> home_of(std::uint64_t conversation, TimePoint now) {
    return sessions_.find(conversation, now);
  }
  bool adopt_home(std::uint64_t conversation, int replica, TimePoint now) noexcept;
  bool adopt_response(std::uint64_t response, int replica, TimePoint now) noexcept;
  // Another warden's home (`replica`) for a conversation whose home was
  // `chosen` here when this router told the other wardens of it (the two
  // placed it at once, or one of them moved it since): the conversation
  // moves there, and its later requests go there by the rules above.
  // kAlreadyThere: an earlier answer moved it (or `replica` is `chosen`).
  // kKept, with nothing changed: its home is neither (it moved again or was
  // forgotten meanwhile), `replica` does not take new work here (unhealthy
  // or ejected, as this router sees it) or does not exist, or affinity is off.
  enum class Settled { kMoved, kAlreadyThere, kKept };
  Settled settle_home(std::uint64_t conversation, int chosen, int replica, TimePoint now) noexcept;
  // The same for a conversation this router knows, wherever its home is: it
  // moves to `replica` unless that does not take new work here (kKept, as
  // for a conversation not known).
  Settled follow_home(std::uint64_t conversation, int replica, TimePoint now) noexcept;
  // Where a replica is, by backend server and rank, and back: the replica of
  // `backend` at `rank` (-1 when that server has no such rank).
  int replica_backend(int replica) const noexcept {
    return replicas_[static_cast<std::size_t>(replica)].backend;
  }
  int replica_rank(int replica) const noexcept {
    return replicas_[static_cast<std::size_t>(replica)].rank;
  }
  int replica_at(int backend, int rank) const noexcept;

  // Health as probes and connects measure it. A replica takes new work when
  // it is healthy so and not ejected (below).
  void set_healthy(int replica, bool healthy) noexcept;
  // A server's health: every rank of one backend at once (what probes and
  // failed connects measure), and whether any of its ranks is healthy so.
  void set_backend_healthy(int backend, bool healthy) noexcept;
  bool backend_healthy(int backend) const noexcept;

  // Passive health: a replica whose replies were server errors while its
  // probes passed is ejected (the proxy counts them): it takes no new work
  // until `until`, and its conversations re-home. Refused (false) for a
  // replica that takes no work now, and for the model's last one that does:
  // its errors are better than a 503 for every request. For the same reason,
  // should the others then fail their probes, the ejections end at once.
  bool eject(int replica, TimePoint until) noexcept;
  bool ejected(int replica) const noexcept { return replicas_[static_cast<std::size_t>(replica)].ejected; }
  void set_engine_stats(int replica, const EngineStats& stats) noexcept;
  void set_affinity(bool on) noexcept { affinity_ = on; }
  void set_spill_threshold(std::optional<int> threshold) noexcept { spill_threshold_ = threshold; }
  // Forgets idle conversations and ends the ejections due by `now` (route()
  // does the latter too): for a model with no requests.
  void expire(TimePoint now) {
    sessions_.expire(now);
    responses_.expire(now);
    if (now >= next_ejection_end_) end_ejections(now);
  }
  // Takes a reloaded model's policy (affinity, spill threshold, weights, idle
  // TTL) while keeping its conversations, counts and health. The caller has
  // checked that the replica layout is unchanged.
  void reconfigure(const config::ModelConfig& model) noexcept;
  // What take_homes took of the homes offered.
  struct Carried {
    std::size_t conversations = 0;  // taken, each on the same server and rank
    std::size_t responses = 0;
    std::size_t left = 0;            // conversations whose replica is gone: placed again
    std::size_t responses_left = 0;  // stored responses whose replica is gone
    std::size_t over_capacity = 0;   // taken, then forgotten: a smaller max_conversations
    std::size_t idle = 0;            // conversations and responses idle past the TTL: not taken
  };
  // A home kept outside the router (a file saved by an earlier run, or a
  // router a reload replaced): the replica it is on here (-1: this router
  // has none there) and its last use.
  struct KeptHome {
    std::uint64_t key;
    int replica;
    TimePoint last_seen;
  };
  // Takes kept homes, each list least recently used first, each with its
  // last use, so that the most recent are kept by a smaller table and each
  // stays with the cache it built. Those idle past the TTL are not taken,
  // nor is anything with affinity off.
  Carried take_homes(std::span<const KeptHome> conversations, std::span<const KeptHome> responses,
                     TimePoint now);
  // After a reload that changed the model's replicas, the homes that the
  // router replacing this one takes (take_homes): every conversation and
  // stored response, each on its replica there (`home_in[r]`: the new
  // router's replica for this one's replica r, the same server and rank; -1
  // where there is none). A copy (24 bytes a home), made under this router's
  // lock and taken by the new one outside it, so that the requests this one
  // routes meanwhile wait for the copy only, not for the new tables.
  struct Homes {
    std::vector<KeptHome> conversations;
    std::vector<KeptHome> responses;
  };
  Homes homes_for(const std::vector<int>& home_in) const;
  Carried take_homes(const Homes& homes, TimePoint now) {
    return take_homes(homes.conversations, homes.responses, now);
  }
  // Each conversation, then each stored response, least recently used
  // first: f(key, replica, last_seen).
  template <class F>
  void for_each_conversation(F&& f) const {
    sessions_.for_each_oldest_first(f);
  }
  template <class F>
  void for_each_stored_response(F&& f) const {
    responses_.for_each_oldest_first(f);
  }
  // With take_homes: takes each shared replica's ejection and last engine
  // figures, and its server's health (a server that is down stays out of
  // service, with any rank it gained), so that the load scores hold until
  // the next probe; and the requests in flight there, its own and those sent
  // to its server without a rank (add_in_flight). With `counters`, also the
  // route counters of each replica whose index is the same in both (the
  // `replica` label is an index, so a counter may only continue under it)
  // and the unassigned ones.
  void carry_state(const Router& before, const std::vector<int>& home_in, bool counters) noexcept;

  bool affinity() const noexcept { return affinity_; }
  int spill_threshold() const noexcept { return spill_threshold_.value_or(config::kAutoSpillThreshold); }
  // The threshold as set: nullopt for auto.
  std::optional<int> spill_threshold_setting() const noexcept { return spill_threshold_; }
  int replica_count() const noexcept { return static_cast<int>(replicas_.size()); }
  int backend_count() const noexcept { return static_cast<int>(backends_.size()); }
  // The replicas of one backend server: [first, first + count).
  std::pair<int, int> backend_replicas(int backend) const noexcept {
    const Backend& b = backends_[static_cast<std::size_t>(backend)];
    return {b.first_replica, b.ranks};
  }
  int in_flight(int replica) const noexcept { return replicas_[static_cast<std::size_t>(replica)].in_flight; }
  // Whether the replica takes new work: healthy by its probes, not ejected.
  bool healthy(int replica) const noexcept { return replicas_[static_cast<std::size_t>(replica)].healthy; }
  std::size_t conversations() const noexcept { return sessions_.size(); }
  std::size_t stored_responses() const noexcept { return responses_.size(); }
  // Whether the stored response `key` is remembered (and touches it).
  bool holds_response(std::uint64_t key, TimePoint now) {
    return responses_.find(key, now).has_value();
  }
  RouterView view() const;

 private:
  struct Replica {
    int backend;
    int rank;
    bool healthy = true;  // probed && !ejected: takes new work
    bool probed = true;   // healthy by probes and connects
    bool ejected = false;
    TimePoint ejected_until{};
    int in_flight = 0;
    EngineStats engine;
    ReplicaCounters counters;
  };
  struct Backend {
    int first_replica;
    int ranks;
    int unassigned_in_flight = 0;  // sent without a rank header
  };

  double score(int replica) const noexcept;
  // Brings the replica's entry in the placement index up to date.
  void rescore(int replica) noexcept;
  void rescore_server(int backend) noexcept;  // each of its ranks
  // Requests in flight on a server: on its ranks and sent without one.
  int server_in_flight(int backend) const noexcept;
  void live_changed(int replica) noexcept override { rescore(replica); }
  void set_taking_work(int replica) noexcept;
  // Whether a replica other than `replica` (-1: any) takes work.
  bool another_takes_work(int replica) const noexcept;
  // settle_home and follow_home, once the conversation's home (`home`,
  // nullopt when not known) and `replica` are checked.
  Settled follow(std::uint64_t conversation, std::optional<int> home, int replica,
                 TimePoint now) noexcept;
  // Ends the ejections due by `now`.
  void end_ejections(TimePoint now) noexcept;
  // With no replica taking work, ends every ejection: an ejection never
  // takes the model's last replica that does (its errors are better than a
  // 503 for every request).
  void end_ejections_if_none_takes_work() noexcept;
  // One home carried or kept: assigned to `to` at its last use, or counted
  // left (no such replica here) or idle (past the TTL).
  void take_home(SessionTable& to, std::uint64_t key, int replica, TimePoint last_seen,
                 TimePoint now, std::size_t& taken, std::size_t& left, std::size_t& idle);
  // After take_home: what a table smaller than the homes offered forgot.
  void count_forgotten(Carried& carried) const noexcept;
  // The healthy, not excluded replica with the lowest score, optionally only
  // those scoring below `below` (a PlacementIndex key); -1 when none.
  int least_loaded(std::span<const int> exclude, PlacementIndex::Key below = PlacementIndex::kUnavailable);
  RouteDecision balanced(std::span<const int> exclude);
  // To the replica (or server) that holds the stored response a request
  // continues; nullopt when it is not known or cannot take the request.
  std::optional<RouteDecision> to_stored_response(const Identity& identity, TimePoint now,
                                                  std::span<const int> exclude,
                                                  RankPinning pinning);
  RouteDecision to_replica(int replica, RouteKind kind,
                           RankPinning pinning = RankPinning::kHonoured) noexcept;
  // To a multi-rank server without a rank: its own balancer picks.
  RouteDecision to_server(int backend, RouteKind kind) noexcept;
  static RouteKind counted_as(RouteKind kind, std::span<const int> exclude) noexcept {
    return exclude.empty() ? kind : RouteKind::kRetried;
  }

  config::LoadWeights weights_;
  bool affinity_;
  std::optional<int> spill_threshold_;
  std::vector<Replica> replicas_;
  std::vector<Backend> backends_;
  ReplicaCounters unassigned_counters_;
  SessionTable sessions_;
  // Stored Responses responses → the replica whose server holds them. Not
  // conversations: they count in no replica's load.
  SessionTable responses_;
  PlacementIndex placement_;
  std::unique_ptr<TieBreaker> tie_breaker_;
  TimePoint next_ejection_end_ = TimePoint::max();
};

}  // namespace lmwarden::core
