// The warden's own exposition (GET /metrics, names of DESIGN §7.1, documented
// in docs/metrics.md) and the token-rate series behind GET /api/stats.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "proxy/home_saver.h"
#include "proxy/shared_homes.h"

namespace lmwarden::proxy {

struct ModelSet;
class ConfigReloads;

// `shared_homes`: the Redis store's counters, when the warden shares homes.
// `saved_homes`: the writes of the homes file (written while the
// configuration names one). `connections_refused`: connections closed at
// once for limits.max_connections, since the start.
std::string warden_metrics_text(const ModelSet& models, const ConfigReloads& reloads,
                                const SharedHomesStats* shared_homes = nullptr,
                                const SavedHomesWrites* saved_homes = nullptr,
                                std::uint64_t connections_refused = 0);

// A replica as /metrics labels it and the log names it: its index, or
// "unassigned" (-1: sent without a rank, the server's balancer picked it).
std::string replica_label(int index);

// `model` empty: all models summed. `window` is clamped to what the series
// keep (six hours); the step is 1 s up to an hour and coarser beyond, so a
// reply never has more than about 3600 points.
std::string stats_json(const ModelSet& models, std::string_view model, std::chrono::seconds window,
                       std::chrono::system_clock::time_point started);

}  // namespace lmwarden::proxy
