#include "proxy/passive_health.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

#include "common/coarse_clock.h"
#include "proxy/warden.h"

namespace lmwarden::proxy {

void take_out_of_service(ModelState& model, int backend, std::string_view why) {
  bool was_healthy = false;
  {
    std::lock_guard lock{model.mutex};
    was_healthy = model.router.backend_healthy(backend);
    model.router.set_backend_healthy(backend, false);
    // As the probes do: a dead engine's last queue is no longer news, and
    // the card and /metrics show none until a probe reads it again.
    const auto [first, count] = model.router.backend_replicas(backend);
    for (int r = first; r < first + count; ++r) model.router.set_engine_stats(r, {});
  }
  if (!was_healthy) return;
  model.telemetry.unhealthy(backend).note(std::string(why));
  spdlog::warn("model={} backend={} unhealthy: {}; no new work until a probe of it succeeds",
               model.config.name, model.config.backends[static_cast<std::size_t>(backend)].url,
               why);
}

void note_served_well(ModelState& model, int replica) {
  std::atomic<int>& in_row = model.telemetry.replica(replica).server_errors_in_row;
  if (in_row.load(std::memory_order_relaxed) != 0) in_row.store(0, std::memory_order_relaxed);
}

void note_server_error(ModelState& model, const config::Config& config, const ServerError& e) {
  std::atomic<int>& in_row = model.telemetry.replica(e.replica).server_errors_in_row;
  if (config.eject_after_5xx <= 0 ||
      in_row.fetch_add(1, std::memory_order_relaxed) + 1 < config.eject_after_5xx)
    return;
  bool ejected = false;
  {
    std::lock_guard lock{model.mutex};
    ejected = model.router.eject(e.replica, coarse_steady_now() + config.eject_for);
  }
  // Counted afresh either way (when it was out already, or the last replica
  // taking work, the next errors are new evidence too).
  in_row.store(0, std::memory_order_relaxed);
  if (!ejected) return;
  model.telemetry.replica(e.replica).ejection.note(
      fmt::format("{} server errors (5xx) in a row, each then served by another "
                  "replica; out for {} s",
                  config.eject_after_5xx,
                  std::chrono::duration_cast<std::chrono::seconds>(config.eject_for).count()));
  spdlog::warn(
      "model={} replica={} ({} rank {}) ejected for {} s: {} server errors (5xx) in a "
      "row, each request then served by another replica, while its probes pass; no "
      "new work, its conversations re-home",
      model.config.name, e.replica, model.config.backends[static_cast<std::size_t>(e.backend)].url,
      e.rank < 0 ? 0 : e.rank,
      std::chrono::duration_cast<std::chrono::seconds>(config.eject_for).count(),
      config.eject_after_5xx);
}

}  // namespace lmwarden::proxy
