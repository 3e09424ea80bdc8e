// How loaded a replica looks to the placement rule.
//
//   score = w_in_flight · in_flight + w_kv · kv_used + w_conv · live_conversations
//
// in_flight is exact (the warden counts it), plus an even share of the
// requests sent to the replica's server without a rank, which the server's
// own balancer spreads over its ranks; kv_used (0..1) and the engine's
// running/waiting come from the last scrape and are a second old at best, so
// they only nudge; live conversations stand for work that is about to arrive
// (each conversation will send its next turn soon) and for the prefix cache it
// will want to keep: those used within the model's active_window (5 min by
// default), not every one kept for session_ttl (30 min), since one idle that
// long is no next turn about to arrive. Counted over the TTL, a replica with
// none (a server added, or back from an outage) scored below the others by a
// quarter of all their conversations, and took every new one until its
// requests in flight made up that much. Defaults 1.0 / 2.0 / 0.25: a full KV
// cache weighs like two requests in flight, four active conversations like
// one. Lowest score wins.
// Alternatives rejected: queue length alone (what vLLM's balancer uses; blind
// to conversations that are between turns) and KV alone (stale by a scrape).
#pragma once

#include <cmath>

#include "config/config.h"

namespace lmwarden::core {

struct ReplicaLoad {
  double in_flight = 0;
  int live_conversations = 0;
  double kv_used = std::nan("");  // unknown until scraped
};

inline double load_score(const ReplicaLoad& load, const config::LoadWeights& w) noexcept {
  const double kv = std::isnan(load.kv_used) ? 0.0 : load.kv_used;
  return w.in_flight * load.in_flight + w.kv_used * kv +
         w.live_conversations * load.live_conversations;
}

}  // namespace lmwarden::core
