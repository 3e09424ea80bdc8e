#include "proxy/metrics_export.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/coarse_clock.h"
#include "common/json_dump.h"
#include "proxy/warden.h"
#include "telemetry/prometheus_writer.h"
#include "telemetry/warden_metrics.h"

namespace lmwarden::proxy {
namespace {

std::int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

using telemetry::Label;
using telemetry::MetricSpec;

const MetricSpec& spec(std::string_view name) {
  for (const auto& s : telemetry::kWardenMetrics)
    if (s.name == name) return s;
  std::abort();  // a name not in the list is a programming error
}

}  // namespace

std::string replica_label(int index) {
  return index < 0 ? "unassigned" : std::to_string(index);
}

std::string warden_metrics_text(const ModelSet& models, const ConfigReloads& reloads,
                                const SharedHomesStats* shared_homes,
                                const SavedHomesWrites* saved_homes,
                                std::uint64_t connections_refused) {
  telemetry::PrometheusWriter w;
  auto family = [&](std::string_view name) {
    const auto& s = spec(name);
    w.family(s.name, s.type, s.help);
  };

  struct Snapshot {
    const ModelState* model;
    core::RouterView view;
  };
  std::vector<Snapshot> snaps;
  for (const auto& m : models.models) snaps.push_back({m.get(), m->view()});

  family("lmwarden_requests_total");
  auto routed = [&](const ModelState& m, int index, const core::ReplicaCounters& counters) {
    const std::string replica = replica_label(index);
    for (int k = 0; k < core::kRouteKinds; ++k) {
      const auto kind = static_cast<core::RouteKind>(k);
      w.sample("lmwarden_requests_total",
               {{"model", m.config.name}, {"replica", replica}, {"route", core::to_string(kind)}},
               static_cast<double>(counters.count(kind)));
    }
  };
  // Requests whose rank the server's own balancer picked (affinity off, or
  // an unranked route): the "unassigned" series of a model with a multi-rank
  // server, zeros included, so that none of them comes and goes with traffic.
  auto has_unassigned = [](const Snapshot& snap) {
    return std::ranges::any_of(snap.model->config.backends,
                               [](const auto& b) { return b.data_parallel_size > 1; }) ||
           std::ranges::any_of(snap.view.unassigned.routed,
                               [](std::uint64_t n) { return n > 0; }) ||
           snap.view.unassigned_in_flight_total() != 0;
  };
  for (const auto& snap : snaps) {
    for (const auto& r : snap.view.replicas) routed(*snap.model, r.index, r.counters);
    if (has_unassigned(snap)) routed(*snap.model, -1, snap.view.unassigned);
  }
  family("lmwarden_in_flight");
  for (const auto& snap : snaps) {
    const std::string& name = snap.model->config.name;
    for (const auto& r : snap.view.replicas)
      w.sample("lmwarden_in_flight", {{"model", name}, {"replica", replica_label(r.index)}},
               r.in_flight);
    if (has_unassigned(snap))
      w.sample("lmwarden_in_flight", {{"model", name}, {"replica", "unassigned"}},
               snap.view.unassigned_in_flight_total());
  }
  family("lmwarden_live_conversations");
  for (const auto& [m, v] : snaps)
    for (const auto& r : v.replicas)
      w.sample("lmwarden_live_conversations", {{"model", m->config.name}, {"replica", replica_label(r.index)}},
               r.live_conversations);
  family("lmwarden_stored_responses");
  for (const auto& [m, v] : snaps)
    w.sample("lmwarden_stored_responses", {{"model", m->config.name}},
             static_cast<double>(v.stored_responses));

  // Token and error counters, including the "unassigned" bucket when it saw traffic.
  auto each_replica = [&](auto&& fn) {
    for (const auto& [m, v] : snaps) {
      for (int i = -1; i < m->telemetry.replica_count(); ++i) fn(*m, i, m->telemetry.replica(i));
    }
  };
  family("lmwarden_upstream_errors_total");
  each_replica([&](const ModelState& m, int i, const ReplicaTelemetry& t) {
    for (const auto& [kind, n] : t.error_counts())
      w.sample("lmwarden_upstream_errors_total",
               {{"model", m.config.name}, {"replica", replica_label(i)}, {"kind", kind}}, static_cast<double>(n));
  });
  family("lmwarden_prompt_tokens_total");
  each_replica([&](const ModelState& m, int i, const ReplicaTelemetry& t) {
    const auto cached = t.prompt_cached.load(), computed = t.prompt_computed.load();
    if (i < 0 && cached + computed == 0) return;
    const std::string replica = replica_label(i);
    w.sample("lmwarden_prompt_tokens_total", {{"model", m.config.name}, {"replica", replica}, {"source", "cached"}},
             static_cast<double>(cached));
    w.sample("lmwarden_prompt_tokens_total", {{"model", m.config.name}, {"replica", replica}, {"source", "computed"}},
             static_cast<double>(computed));
  });
  // A per-replica counter of ReplicaTelemetry.
  using Counter = const std::atomic<std::uint64_t> ReplicaTelemetry::*;
  auto replica_counter = [&](std::string_view name, Counter counter) {
    family(name);
    each_replica([&](const ModelState& m, int i, const ReplicaTelemetry& t) {
      const auto n = (t.*counter).load();
      if (i < 0 && n == 0) return;
      w.sample(name, {{"model", m.config.name}, {"replica", replica_label(i)}}, static_cast<double>(n));
    });
  };
  replica_counter("lmwarden_completion_tokens_total", &ReplicaTelemetry::completion);
  replica_counter("lmwarden_unmeasured_requests_total", &ReplicaTelemetry::unmeasured_requests);
  family("lmwarden_time_to_first_byte_seconds");
  for (const auto& [m, v] : snaps) {
    const Label labels[] = {{"model", m->config.name}};
    w.histogram("lmwarden_time_to_first_byte_seconds", labels,
                m->telemetry.time_to_first_byte().snapshot());
  }

  auto gauge = [&](std::string_view name, auto value_of) {
    family(name);
    for (const auto& [m, v] : snaps)
      for (const auto& r : v.replicas) {
        const double value = value_of(*m, r);
        if (std::isnan(value)) continue;  // not scraped yet: absent rather than a made-up 0
        w.sample(name, {{"model", m->config.name}, {"replica", replica_label(r.index)}}, value);
      }
  };
  const double nan = std::nan("");
  gauge("lmwarden_replica_running", [&](const ModelState&, const core::ReplicaView& r) {
    return r.engine.running < 0 ? nan : r.engine.running;
  });
  gauge("lmwarden_replica_waiting", [&](const ModelState&, const core::ReplicaView& r) {
    return r.engine.waiting < 0 ? nan : r.engine.waiting;
  });
  gauge("lmwarden_replica_kv_cache_usage", [](const ModelState&, const core::ReplicaView& r) { return r.engine.kv_used; });
  gauge("lmwarden_replica_prefix_cache_hit_ratio", [&](const ModelState& m, const core::ReplicaView& r) {
    const double rate = m.telemetry.replica(r.index).prefix_hit_rate.load();
    return rate < 0 ? nan : rate;
  });
  gauge("lmwarden_replica_healthy", [](const ModelState&, const core::ReplicaView& r) { return r.healthy ? 1.0 : 0.0; });

  family("lmwarden_replica_info");
  for (const auto& [m, v] : snaps)
    for (const auto& r : v.replicas)
      w.sample("lmwarden_replica_info",
               {{"model", m->config.name}, {"replica", replica_label(r.index)},
                {"url", m->config.backends[static_cast<std::size_t>(r.backend)].url}, {"rank", std::to_string(r.rank)}},
               1.0);
  family("lmwarden_refused_requests_total");
  for (const auto& r : models.refusals->snapshot()) {
    // A model a reload removed ends its series here, as it ends its others.
    if (!r.model.empty() && !models.by_name.contains(r.model)) continue;
    w.sample("lmwarden_refused_requests_total", {{"model", r.model}, {"reason", r.reason}},
             static_cast<double>(r.n));
  }
  family("lmwarden_connections_refused_total");
  w.sample("lmwarden_connections_refused_total", {}, static_cast<double>(connections_refused));
  family("lmwarden_access_log_dropped_total");
  if (models.access_log)
    w.sample("lmwarden_access_log_dropped_total", {},
             static_cast<double>(AccessLog::dropped_total(models.access_log.get())));
  family("lmwarden_config_reloads_total");
  w.sample("lmwarden_config_reloads_total", {{"result", "applied"}},
           static_cast<double>(reloads.applied_count()));
  w.sample("lmwarden_config_reloads_total", {{"result", "refused"}},
           static_cast<double>(reloads.refused_count()));
  family("lmwarden_config_last_reload_successful");
  w.sample("lmwarden_config_last_reload_successful", {}, reloads.last_ok() ? 1.0 : 0.0);
  family("lmwarden_config_last_reload_success_timestamp_seconds");
  w.sample("lmwarden_config_last_reload_success_timestamp_seconds", {},
           static_cast<double>(reloads.last_applied_unix_s()));
  // Each family is written with no sample when homes are not shared.
  using Count = std::pair<std::string_view, std::uint64_t>;
  const auto counts = [&](std::string_view name, std::initializer_list<Count> results) {
    family(name);
    if (shared_homes)
      for (const auto& [result, n] : results)
        w.sample(name, {{"result", result}}, static_cast<double>(n));
  };
  const SharedHomesStats s = shared_homes ? *shared_homes : SharedHomesStats{};
  counts("lmwarden_shared_homes_lookups_total", {{"found", s.lookups_found},
                                                 {"absent", s.lookups_absent},
                                                 {"failed", s.lookups_failed},
                                                 {"unusable", s.lookups_unusable}});
  counts("lmwarden_shared_homes_writes_total",
         {{"sent", s.writes_sent}, {"failed", s.writes_failed}, {"dropped", s.writes_dropped}});
  counts("lmwarden_shared_homes_claims_total", {{"taken", s.claims_taken},
                                                {"yielded", s.claims_yielded},
                                                {"kept", s.claims_kept},
                                                {"unusable", s.claims_unusable},
                                                {"unchecked", s.claims_unchecked},
                                                {"failed", s.claims_failed}});
  family("lmwarden_shared_homes_connected");
  if (shared_homes) w.sample("lmwarden_shared_homes_connected", {}, s.connected ? 1.0 : 0.0);
  // Written with no sample while the configuration names no homes file.
  const bool saving = saved_homes && models.config.saved_homes;
  family("lmwarden_saved_homes_writes_total");
  if (saving) {
    w.sample("lmwarden_saved_homes_writes_total", {{"result", "written"}},
             static_cast<double>(saved_homes->written.load(std::memory_order_relaxed)));
    w.sample("lmwarden_saved_homes_writes_total", {{"result", "failed"}},
             static_cast<double>(saved_homes->failed.load(std::memory_order_relaxed)));
  }
  family("lmwarden_saved_homes_last_write_timestamp_seconds");
  if (saving)
    w.sample("lmwarden_saved_homes_last_write_timestamp_seconds", {},
             static_cast<double>(saved_homes->last_written_unix_s.load(std::memory_order_relaxed)));
  return w.take();
}

std::string stats_json(const ModelSet& models, std::string_view model, std::chrono::seconds window,
                       std::chrono::system_clock::time_point started) {
  using nlohmann::json;
  window = std::clamp(window, std::chrono::seconds(60), std::chrono::seconds(telemetry::TokenSeries::kMaxWindow));
  // About 3600 points at most: 1 s for an hour, 10 s for six.
  const auto step = std::chrono::seconds(std::max<std::int64_t>(1, (window.count() + 3599) / 3600));
  const auto now = telemetry::WallClock::now();
  // The seconds from settled_until on can still grow: the current one, and
  // those of replies under way, booked when they end. Read before the series,
  // so that a reply no longer counted open is in what the query returns; the
  // coarse clock that stamps first bytes can lag the precise one by a tick or two.
  std::int64_t settled_until =
      std::chrono::floor<std::chrono::seconds>((now - coarse_lag_allowance()).time_since_epoch()).count();
  std::uint64_t open_requests = 0;
  for (const auto& m : models.models) {
    if (!model.empty() && m->config.name != model) continue;
    const auto open = m->telemetry.open_requests().snapshot(now);
    if (open.oldest_unix_s) settled_until = std::min(settled_until, *open.oldest_unix_s);
    open_requests += open.count;
  }
  telemetry::TokenWindow total;
  json names = json::array();
  json cached_count_missing = json::array(), cached_count_missing_servers = json::array();
  // A model's tokens are counted from its routing state's start: the
  // warden's, or the reload that changed its replicas.
  auto counted_since = std::chrono::system_clock::time_point::max();
  for (const auto& m : models.models) {
    names.push_back(m->config.name);
    if (!model.empty() && m->config.name != model) continue;
    total.add(m->telemetry.window(now, window, step));
    counted_since = std::min(counted_since, m->routing->since);
    const std::vector<std::string> uncounted = m->telemetry.cached_count_missing();
    if (!uncounted.empty()) cached_count_missing.push_back(m->config.name);
    for (const auto& url : uncounted)
      cached_count_missing_servers.push_back({{"model", m->config.name}, {"url", url}});
  }
  const double per_s = static_cast<double>(total.step.count());
  json t = json::array(), cached = json::array(), computed = json::array(), completion = json::array();
  for (const auto& b : total.buckets) {
    t.push_back(b.start_unix_s);
    cached.push_back(static_cast<double>(b.tokens.cached) / per_s);
    computed.push_back(static_cast<double>(b.tokens.computed) / per_s);
    completion.push_back(static_cast<double>(b.tokens.completion) / per_s);
  }
  const auto ratio = total.cache_hit_ratio();
  return json_dump(
      json{{"model", model.empty() ? json(nullptr) : json(model)},
           {"window_s", window.count()},
           {"step_s", total.step.count()},
           {"now", unix_seconds(now)},
           {"started", unix_seconds(started)},
           {"counted_since", unix_seconds(std::max(started, std::min(counted_since, now)))},
           {"settled_until", settled_until},
           {"open_requests", open_requests},
           {"models", names},
           {"series",
            {{"t", t},
             {"prompt_cached", cached},
             {"prompt_computed", computed},
             {"completion", completion}}},
           {"totals",
            {{"prompt_cached", total.total.cached},
             {"prompt_computed", total.total.computed},
             {"completion", total.total.completion}}},
           {"cache_hit_ratio", ratio ? json(*ratio) : json(nullptr)},
           {"cached_count_missing", cached_count_missing},
           {"cached_count_missing_servers", cached_count_missing_servers}});
}

}  // namespace lmwarden::proxy
