#include "core/router.h"

#include <algorithm>
#include <cassert>
#include <new>
#include <vector>

namespace lmwarden::core {
namespace {

bool contains(std::span<const int> xs, int x) noexcept {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

}  // namespace

std::string_view to_string(RouteKind kind) noexcept {
  switch (kind) {
    case RouteKind::kNew: return "new";
    case RouteKind::kSticky: return "sticky";
    case RouteKind::kSpilled: return "spilled";
    case RouteKind::kPinned: return "pinned";
    case RouteKind::kAnonymous: return "anonymous";
    case RouteKind::kRehomed: return "rehomed";
    case RouteKind::kBalanced: return "balanced";
    case RouteKind::kRetried: return "retried";
  }
  return "unknown";
}

Router::Router(const config::ModelConfig& model, std::unique_ptr<TieBreaker> tie_breaker)
    : weights_(model.weights),
      affinity_(model.affinity),
      spill_threshold_(model.spill_threshold),
      sessions_(model.replica_count(), model.max_conversations, model.session_ttl),
      responses_(model.replica_count(), model.max_conversations, model.session_ttl),
      placement_(model.replica_count()),
      tie_breaker_(std::move(tie_breaker)) {
  for (std::size_t b = 0; b < model.backends.size(); ++b) {
    const int ranks = model.backends[b].data_parallel_size;
    backends_.push_back({static_cast<int>(replicas_.size()), ranks});
    for (int r = 0; r < ranks; ++r) replicas_.push_back({static_cast<int>(b), r});
  }
  sessions_.set_active_window(std::min<Clock::duration>(model.active_window, model.session_ttl));
  sessions_.set_listener(this);
  for (int i = 0; i < replica_count(); ++i) rescore(i);
}

void Router::reconfigure(const config::ModelConfig& model) noexcept {
  weights_ = model.weights;
  affinity_ = model.affinity;
  spill_threshold_ = model.spill_threshold;
  sessions_.set_ttl(model.session_ttl);
  sessions_.set_active_window(std::min<Clock::duration>(model.active_window, model.session_ttl));
  responses_.set_ttl(model.session_ttl);
  for (int i = 0; i < replica_count(); ++i) rescore(i);
}

double Router::score(int replica) const noexcept {
  const Replica& r = replicas_[static_cast<std::size_t>(replica)];
  const Backend& b = backends_[static_cast<std::size_t>(r.backend)];
  const double in_flight = r.in_flight + static_cast<double>(b.unassigned_in_flight) / b.ranks;
  return load_score({in_flight, sessions_.active(replica), r.engine.kv_used}, weights_);
}

void Router::rescore(int replica) noexcept {
  placement_.set(replica, replicas_[static_cast<std::size_t>(replica)].healthy
                              ? PlacementIndex::key_of(score(replica))
                              : PlacementIndex::kUnavailable);
}

int Router::least_loaded(std::span<const int> exclude, PlacementIndex::Key below) {
  // A retry excludes the few replicas it already tried: take them out of the
  // index for this one query.
  for (int i : exclude)
    if (i >= 0 && i < replica_count()) placement_.set(i, PlacementIndex::kUnavailable);
  int target = -1;
  if (placement_.min() < below) {
    const int tied = placement_.tied();
    const int k = tied == 1 ? 0 : static_cast<int>(tie_breaker_->pick(static_cast<std::size_t>(tied)) %
                                                   static_cast<std::size_t>(tied));
    target = placement_.nth_tied(k);
  }
  for (int i : exclude)
    if (i >= 0 && i < replica_count()) rescore(i);
  return target;
}

RouteDecision Router::to_replica(int replica, RouteKind kind, RankPinning pinning) noexcept {
  Replica& r = replicas_[static_cast<std::size_t>(replica)];
  const Backend& b = backends_[static_cast<std::size_t>(r.backend)];
  if (b.ranks > 1 && pinning == RankPinning::kIgnored) return to_server(r.backend, kind);
  add_in_flight(replica, r.backend);
  ++r.counters.routed[static_cast<int>(kind)];
  // A single-rank server needs no rank header; a multi-rank one is pinned.
  return RouteDecision{RouteDecision::Status::kOk, kind, replica, r.backend,
                       b.ranks > 1 ? r.rank : -1};
}

RouteDecision Router::to_server(int backend, RouteKind kind) noexcept {
  add_in_flight(-1, backend);
  ++unassigned_counters_.routed[static_cast<int>(kind)];
  return {RouteDecision::Status::kOk, kind, -1, backend, -1};
}

void Router::rescore_server(int backend) noexcept {
  const Backend& b = backends_[static_cast<std::size_t>(backend)];
  for (int i = b.first_replica; i < b.first_replica + b.ranks; ++i) rescore(i);
}

RouteDecision Router::balanced(std::span<const int> exclude) {
  // Fewest in flight per rank over the servers with a healthy, untried rank,
  // ties broken as placements' are (not always the first server: at low
  // load that would send every request to it).
  const auto usable = [&](const Backend& be) {
    for (int i = be.first_replica; i < be.first_replica + be.ranks; ++i)
      if (replicas_[static_cast<std::size_t>(i)].healthy && !contains(exclude, i)) return true;
    return false;
  };
  // Loads compared as in_flight / ranks, without division.
  const auto below = [&](int a, int b) {
    return static_cast<long long>(server_in_flight(a)) *
               backends_[static_cast<std::size_t>(b)].ranks <
           static_cast<long long>(server_in_flight(b)) *
               backends_[static_cast<std::size_t>(a)].ranks;
  };
  int best = -1;
  std::size_t tied = 0;
  for (int b = 0; b < backend_count(); ++b) {
    if (!usable(backends_[static_cast<std::size_t>(b)])) continue;
    if (best < 0 || below(b, best)) {
      best = b;
      tied = 1;
    } else if (!below(best, b)) {
      ++tied;
    }
  }
  if (best < 0) return {RouteDecision::Status::kNoHealthyReplica};
  if (tied > 1) {
    std::size_t k = tie_breaker_->pick(tied) % tied;
    for (int b = best;; ++b) {
      if (!usable(backends_[static_cast<std::size_t>(b)]) || below(best, b)) continue;
      if (k-- == 0) {
        best = b;
        break;
      }
    }
  }
  Backend& be = backends_[static_cast<std::size_t>(best)];
  const RouteKind kind = counted_as(RouteKind::kBalanced, exclude);
  if (be.ranks == 1) return to_replica(be.first_replica, kind);
  return to_server(best, kind);
}

RouteDecision Router::route(const Identity& identity, TimePoint now, std::span<const int> exclude,
                            RankPinning pinning, bool placed_by_earlier_attempt) {
  const auto send = [this, pinning](int replica, RouteKind kind) {
    return to_replica(replica, kind, pinning);
  };
  if (now >= next_ejection_end_) end_ejections(now);
  if (identity.kind == IdentityKind::kPinned) {
    if (identity.pinned_rank < 0 || identity.pinned_rank >= replica_count())
      return {RouteDecision::Status::kUnknownRank};
    return send(identity.pinned_rank, RouteKind::kPinned);
  }
  if (!affinity_) return balanced(exclude);
  if (identity.previous_response != 0)
    if (auto stored = to_stored_response(identity, now, exclude, pinning)) return *stored;

  if (identity.kind == IdentityKind::kAnonymous) {
    const int target = least_loaded(exclude);
    if (target < 0) return {RouteDecision::Status::kNoHealthyReplica};
    return send(target, counted_as(RouteKind::kAnonymous, exclude));
  }

  const std::uint64_t key = identity.session_hash;
  const auto of_conversation = [key](RouteDecision d, int home) {
    d.home = home;
    d.conversation = key;
    return d;
  };
  const std::optional<int> home = sessions_.find(key, now);
  if (!home) {
    const int target = least_loaded(exclude);
    if (target < 0) return {RouteDecision::Status::kNoHealthyReplica};
    sessions_.assign(key, target, now);
    RouteDecision d = of_conversation(send(target, counted_as(RouteKind::kNew, exclude)), target);
    d.chose_home = true;
    return d;
  }
  const Replica& h = replicas_[static_cast<std::size_t>(*home)];
  if (!h.healthy) {
    const int target = least_loaded(exclude);
    if (target < 0) return {RouteDecision::Status::kNoHealthyReplica};
    sessions_.assign(key, target, now);
    RouteDecision d =
        of_conversation(send(target, counted_as(RouteKind::kRehomed, exclude)), target);
    d.chose_home = true;
    d.former_home = *home;
    return d;
  }
  if (contains(exclude, *home)) {
    // A retry: the home just failed this request. Serve it elsewhere without
    // moving the conversation; health checking decides whether home is dead.
    // A home this request chose holds nothing of the conversation yet: the
    // conversation goes where the retry does.
    const int target = least_loaded(exclude);
    if (target < 0) return {RouteDecision::Status::kNoHealthyReplica};
    if (!placed_by_earlier_attempt)
      return of_conversation(send(target, RouteKind::kRetried), *home);
    sessions_.assign(key, target, now);
    RouteDecision d = of_conversation(send(target, RouteKind::kRetried), target);
    d.chose_home = true;
    d.former_home = *home;
    return d;
  }
  // (A retry of a request that had spilled and failed there can come home.)
  int target = *home;
  RouteKind kind = RouteKind::kSticky;
  const Backend& server = backends_[static_cast<std::size_t>(h.backend)];
  if (pinning == RankPinning::kIgnored && server.ranks > 1) {
    // Home is the server: its requests in flight per rank, those sent
    // without one included, and a spill goes to another server.
    if (server_in_flight(h.backend) >= spill_threshold() * server.ranks) {
      std::vector<int> elsewhere(exclude.begin(), exclude.end());
      for (int i = server.first_replica; i < server.first_replica + server.ranks; ++i)
        elsewhere.push_back(i);
      const int lower = least_loaded(elsewhere, placement_.key(*home));
      if (lower >= 0) {
        target = lower;
        kind = RouteKind::kSpilled;
      }
    }
  } else if (h.in_flight * server.ranks + server.unassigned_in_flight >=
             spill_threshold() * server.ranks) {
    // Its own and its share of those sent to its server without a rank (a
    // model's Responses traffic), as in its load score.
    const int lower = least_loaded(exclude, placement_.key(*home));
    if (lower >= 0) {
      target = lower;
      kind = RouteKind::kSpilled;
    }
  }
  return of_conversation(send(target, counted_as(kind, exclude)), *home);
}

std::optional<RouteDecision> Router::to_stored_response(const Identity& identity, TimePoint now,
                                                        std::span<const int> exclude,
                                                        RankPinning pinning) {
  const std::optional<int> where = responses_.find(identity.previous_response, now);
  if (!where) return std::nullopt;
  const Replica& r = replicas_[static_cast<std::size_t>(*where)];
  const Backend& server = backends_[static_cast<std::size_t>(r.backend)];
  const auto usable = [&](int i) {
    return replicas_[static_cast<std::size_t>(i)].healthy && !contains(exclude, i);
  };
  // Sent without a rank, any rank of the server that takes work will do.
  bool takes_it = usable(*where);
  if (server.ranks > 1 && pinning == RankPinning::kIgnored)
    for (int i = server.first_replica; i < server.first_replica + server.ranks; ++i)
      takes_it |= usable(i);
  if (!takes_it) return std::nullopt;
  RouteDecision d = to_replica(*where, counted_as(RouteKind::kSticky, exclude), pinning);
  d.bound = true;
  if (identity.kind == IdentityKind::kSession) {
    // Its latest turn ran here, and left its prefix in this replica's cache.
    sessions_.assign(identity.session_hash, *where, now);
    d.home = *where;
    d.conversation = identity.session_hash;
  }
  return d;
}

int Router::remember_response(std::uint64_t key, const RouteDecision& decision,
                              TimePoint now) noexcept {
  if (!decision.ok()) return -1;
  int where = decision.replica;
  if (where < 0) {
    // Sent without a rank: the server holds it, and its ranks are alike for
    // it. The conversation's home when that is one of them, so that a
    // chained turn also finds its cache.
    const Backend& b = backends_[static_cast<std::size_t>(decision.backend)];
    const bool home_here =
        decision.home >= b.first_replica && decision.home < b.first_replica + b.ranks;
    where = home_here ? decision.home : b.first_replica;
  }
  return remember_response_on(key, where, now);
}

int Router::remember_response_on(std::uint64_t key, int where, TimePoint now) noexcept {
  // With affinity off no chain is followed, so none is remembered either.
  if (!affinity_ || key == 0 || where < 0 || where >= replica_count()) return -1;
  try {
    responses_.assign(key, where, now);
  } catch (const std::bad_alloc&) {
    return -1;  // not remembered: its chained request is placed as any other
  }
  return where;
}

namespace {

// Takes `replica` as the home of `key` in `table` unless the key is known
// there already. False when it is, or when the table cannot grow.
bool adopt(SessionTable& table, std::uint64_t key, int replica, TimePoint now) noexcept {
  if (key == 0 || table.find(key, now)) return false;
  try {
    table.assign(key, replica, now);
  } catch (const std::bad_alloc&) {
    return false;  // placed by this warden's own rules instead
  }
  return true;
}

}  // namespace

bool Router::adopt_home(std::uint64_t conversation, int replica, TimePoint now) noexcept {
  if (!affinity_ || replica < 0 || replica >= replica_count()) return false;
  return adopt(sessions_, conversation, replica, now);
}

bool Router::adopt_response(std::uint64_t response, int replica, TimePoint now) noexcept {
  if (!affinity_ || replica < 0 || replica >= replica_count()) return false;
  return adopt(responses_, response, replica, now);
}

Router::Settled Router::settle_home(std::uint64_t conversation, int chosen, int replica,
                                    TimePoint now) noexcept {
  if (!affinity_ || replica < 0 || replica >= replica_count()) return Settled::kKept;
  const std::optional<int> home = sessions_.find(conversation, now);
  if (home != chosen && home != replica) return Settled::kKept;  // moved again, or forgotten
  return follow(conversation, home, replica, now);
}

Router::Settled Router::follow_home(std::uint64_t conversation, int replica,
                                    TimePoint now) noexcept {
  if (!affinity_ || replica < 0 || replica >= replica_count()) return Settled::kKept;
  return follow(conversation, sessions_.find(conversation, now), replica, now);
}

Router::Settled Router::follow(std::uint64_t conversation, std::optional<int> home, int replica,
                               TimePoint now) noexcept {
  if (!home) return Settled::kKept;
  if (*home == replica) return Settled::kAlreadyThere;
  // A home this router sees failing is not taken up: the conversation would
  // only be moved off it again at its next request here.
  if (!healthy(replica)) return Settled::kKept;
  sessions_.assign(conversation, replica, now);  // known: moves it, allocates nothing
  return Settled::kMoved;
}

Router::Homes Router::homes_for(const std::vector<int>& home_in) const {
  const auto replica_in = [&](int home) {
    return home < static_cast<int>(home_in.size()) ? home_in[static_cast<std::size_t>(home)] : -1;
  };
  Homes homes;
  homes.conversations.reserve(sessions_.size());
  homes.responses.reserve(responses_.size());
  sessions_.for_each_oldest_first([&](std::uint64_t key, int home, TimePoint last_seen) {
    homes.conversations.push_back({key, replica_in(home), last_seen});
  });
  responses_.for_each_oldest_first([&](std::uint64_t key, int home, TimePoint last_seen) {
    homes.responses.push_back({key, replica_in(home), last_seen});
  });
  return homes;
}

Router::Carried Router::take_homes(std::span<const KeptHome> conversations,
                                   std::span<const KeptHome> responses, TimePoint now) {
  Carried carried;
  if (!affinity_) return carried;
  for (const KeptHome& h : conversations)
    take_home(sessions_, h.key, h.replica, h.last_seen, now, carried.conversations, carried.left,
              carried.idle);
  for (const KeptHome& h : responses)
    take_home(responses_, h.key, h.replica, h.last_seen, now, carried.responses,
              carried.responses_left, carried.idle);
  count_forgotten(carried);
  return carried;
}

void Router::take_home(SessionTable& to, std::uint64_t key, int replica, TimePoint last_seen,
                       TimePoint now, std::size_t& taken, std::size_t& left, std::size_t& idle) {
  if (last_seen < now - to.ttl()) {
    ++idle;
  } else if (replica < 0 || replica >= replica_count()) {
    ++left;
  } else {
    to.assign(key, replica, last_seen);
    ++taken;
  }
}

void Router::count_forgotten(Carried& carried) const noexcept {
  // A table smaller than the homes offered keeps the most recent.
  carried.over_capacity = carried.conversations - std::min(carried.conversations, sessions_.size());
  carried.conversations -= carried.over_capacity;
  carried.responses = std::min(carried.responses, responses_.size());
}

void Router::carry_state(const Router& before, const std::vector<int>& home_in,
                         bool counters) noexcept {
  for (int r = 0; r < before.replica_count() && r < static_cast<int>(home_in.size()); ++r) {
    const int now = home_in[static_cast<std::size_t>(r)];
    if (now < 0 || now >= replica_count()) continue;
    const Replica& from = before.replicas_[static_cast<std::size_t>(r)];
    Replica& to = replicas_[static_cast<std::size_t>(now)];
    to.ejected = from.ejected;
    to.ejected_until = from.ejected_until;
    if (to.ejected) next_ejection_end_ = std::min(next_ejection_end_, to.ejected_until);
    to.engine = from.engine;
    if (counters && now == r) to.counters = from.counters;
    set_taking_work(now);
    // Health by probes is a server's: a server out of service stays out
    // whole, with any rank it gained.
    if (!before.backend_healthy(from.backend)) set_backend_healthy(to.backend, false);
    to.in_flight += from.in_flight;
    rescore(now);
  }
  // Those sent without a rank, to each server kept (by one of its ranks kept).
  std::vector<bool> server_taken(before.backends_.size(), false);
  for (int r = 0; r < before.replica_count() && r < static_cast<int>(home_in.size()); ++r) {
    const int now = home_in[static_cast<std::size_t>(r)];
    const auto b = static_cast<std::size_t>(before.replicas_[static_cast<std::size_t>(r)].backend);
    if (now < 0 || now >= replica_count() || server_taken[b]) continue;
    server_taken[b] = true;
    const int to = replicas_[static_cast<std::size_t>(now)].backend;
    backends_[static_cast<std::size_t>(to)].unassigned_in_flight +=
        before.backends_[b].unassigned_in_flight;
    rescore_server(to);
  }
  if (counters) unassigned_counters_ = before.unassigned_counters_;
  // With the others gone from the model, those out only for their errors
  // may be all that is left.
  end_ejections_if_none_takes_work();
}

void Router::end_ejections_if_none_takes_work() noexcept {
  if (another_takes_work(-1)) return;
  for (int i = 0; i < replica_count(); ++i) {
    Replica& r = replicas_[static_cast<std::size_t>(i)];
    if (!r.ejected) continue;
    r.ejected = false;
    set_taking_work(i);
  }
}

int Router::replica_at(int backend, int rank) const noexcept {
  if (backend < 0 || backend >= backend_count()) return -1;
  const Backend& b = backends_[static_cast<std::size_t>(backend)];
  return rank >= 0 && rank < b.ranks ? b.first_replica + rank : -1;
}

int Router::server_in_flight(int backend) const noexcept {
  const Backend& b = backends_[static_cast<std::size_t>(backend)];
  int n = b.unassigned_in_flight;
  for (int i = b.first_replica; i < b.first_replica + b.ranks; ++i)
    n += replicas_[static_cast<std::size_t>(i)].in_flight;
  return n;
}

void Router::finish(const RouteDecision& decision, TimePoint now) noexcept {
  if (!decision.ok()) return;
  if (decision.home >= 0) {
    try {
      sessions_.touch(decision.conversation, decision.home, now);
    } catch (const std::bad_alloc&) {
      // Not brought back: its next request is placed as new, one cold prefill.
    }
  }
  drop_in_flight(decision.replica, decision.backend);
}

void Router::add_in_flight(int replica, int backend) noexcept {
  if (replica >= 0) {
    ++replicas_[static_cast<std::size_t>(replica)].in_flight;
    rescore(replica);
  } else {
    ++backends_[static_cast<std::size_t>(backend)].unassigned_in_flight;
    rescore_server(backend);
  }
}

void Router::drop_in_flight(int replica, int backend) noexcept {
  int& n = replica >= 0 ? replicas_[static_cast<std::size_t>(replica)].in_flight
                        : backends_[static_cast<std::size_t>(backend)].unassigned_in_flight;
  assert(n > 0);
  --n;
  if (replica >= 0) {
    rescore(replica);
  } else {
    rescore_server(backend);
  }
}

void Router::set_taking_work(int replica) noexcept {
  Replica& r = replicas_[static_cast<std::size_t>(replica)];
  r.healthy = r.probed && !r.ejected;
  rescore(replica);
}

void Router::set_healthy(int replica, bool healthy) noexcept {
  replicas_[static_cast<std::size_t>(replica)].probed = healthy;
  set_taking_work(replica);
  // None left taking work while some are out only for their errors: those
  // come back, as an ejection never takes the last one.
  if (!healthy) end_ejections_if_none_takes_work();
}

bool Router::eject(int replica, TimePoint until) noexcept {
  Replica& r = replicas_[static_cast<std::size_t>(replica)];
  if (!r.healthy || !another_takes_work(replica)) return false;
  r.ejected = true;
  r.ejected_until = until;
  next_ejection_end_ = std::min(next_ejection_end_, until);
  set_taking_work(replica);
  return true;
}

bool Router::another_takes_work(int replica) const noexcept {
  for (int i = 0; i < replica_count(); ++i)
    if (i != replica && replicas_[static_cast<std::size_t>(i)].healthy) return true;
  return false;
}

void Router::end_ejections(TimePoint now) noexcept {
  next_ejection_end_ = TimePoint::max();
  for (int i = 0; i < replica_count(); ++i) {
    Replica& r = replicas_[static_cast<std::size_t>(i)];
    if (!r.ejected) continue;
    if (r.ejected_until <= now) {
      r.ejected = false;
      set_taking_work(i);
    } else {
      next_ejection_end_ = std::min(next_ejection_end_, r.ejected_until);
    }
  }
}

void Router::set_backend_healthy(int backend, bool healthy) noexcept {
  const auto [first, count] = backend_replicas(backend);
  for (int i = first; i < first + count; ++i) set_healthy(i, healthy);
}

bool Router::backend_healthy(int backend) const noexcept {
  const auto [first, count] = backend_replicas(backend);
  for (int i = first; i < first + count; ++i)
    if (replicas_[static_cast<std::size_t>(i)].probed) return true;
  return false;
}

void Router::set_engine_stats(int replica, const EngineStats& stats) noexcept {
  replicas_[static_cast<std::size_t>(replica)].engine = stats;
  rescore(replica);
}

RouterView Router::view() const {
  RouterView v;
  v.affinity = affinity_;
  v.spill_threshold = spill_threshold();
  v.spill_threshold_auto = !spill_threshold_.has_value();
  v.conversations = sessions_.size();
  v.stored_responses = responses_.size();
  std::uint64_t sticky = 0, moved = 0;
  for (const Backend& b : backends_) {
    v.in_flight += b.unassigned_in_flight;
    v.unassigned_in_flight.push_back(b.unassigned_in_flight);
  }
  for (int i = 0; i < replica_count(); ++i) {
    const Replica& r = replicas_[static_cast<std::size_t>(i)];
    v.in_flight += r.in_flight;
    sticky += r.counters.count(RouteKind::kSticky);
    moved += r.counters.count(RouteKind::kSpilled) + r.counters.count(RouteKind::kRehomed);
    v.replicas.push_back(ReplicaView{i, r.backend, r.rank, r.healthy, r.ejected, r.probed,
                                     r.in_flight, sessions_.live(i), score(i), r.counters,
                                     r.engine});
  }
  v.unassigned = unassigned_counters_;
  if (sticky + moved > 0) v.sticky_ratio = static_cast<double>(sticky) / static_cast<double>(sticky + moved);
  return v;
}

}  // namespace lmwarden::core
