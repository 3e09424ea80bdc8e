// The warden's own metric families (DESIGN §7.1), declared once: the /metrics
// handler writes from this list, docs/metrics.md documents it, and a test
// checks that the writer's output for it parses back with every name. It holds
// every name of §7.1 and the families the warden adds beyond them, each beside
// its kin (docs/metrics.md marks those "Not in DESIGN §7.1"); `replica` is
// the replica's index within its model ("0", "1", …).
#pragma once

#include <array>
#include <string_view>

#include "telemetry/prometheus.h"

namespace lmwarden::telemetry {

struct MetricSpec {
  std::string_view name;
  MetricType type;
  std::string_view labels;  // comma-separated label names, in the order written
  std::string_view help;
};

inline constexpr std::array<MetricSpec, 27> kWardenMetrics = {{
    {"lmwarden_requests_total", MetricType::kCounter, "model,replica,route",
     "Requests sent upstream, by route: new, sticky, spilled, pinned, anonymous, rehomed, "
     "balanced, retried (an attempt after a failed one)."},
    {"lmwarden_in_flight", MetricType::kGauge, "model,replica",
     "Requests sent to the replica that have not finished."},
    {"lmwarden_live_conversations", MetricType::kGauge, "model,replica",
     "Conversations homed on the replica and seen within their idle TTL."},
    {"lmwarden_stored_responses", MetricType::kGauge, "model",
     "Stored Responses API responses whose replica is remembered, so that requests chained to "
     "them (previous_response_id) go where they are stored."},
    {"lmwarden_upstream_errors_total", MetricType::kCounter, "model,replica,kind",
     "Failed upstream exchanges, by kind (connect, connect_timeout, first_byte_timeout, "
     "idle_timeout, status_5xx, protocol, reset)."},
    {"lmwarden_prompt_tokens_total", MetricType::kCounter, "model,replica,source",
     "Prompt tokens of relayed requests, by source: cached (prefix cache) or computed."},
    {"lmwarden_completion_tokens_total", MetricType::kCounter, "model,replica",
     "Completion tokens of relayed requests."},
    {"lmwarden_unmeasured_requests_total", MetricType::kCounter, "model,replica",
     "Successful replies that reported no usage: their tokens are in no token counter."},
    {"lmwarden_time_to_first_byte_seconds", MetricType::kHistogram, "model",
     "Time from forwarding a request to its first response byte."},
    {"lmwarden_replica_running", MetricType::kGauge, "model,replica",
     "Requests running on the replica, as its engine reports."},
    {"lmwarden_replica_waiting", MetricType::kGauge, "model,replica",
     "Requests waiting on the replica, as its engine reports."},
    {"lmwarden_replica_kv_cache_usage", MetricType::kGauge, "model,replica",
     "Fraction of the replica's KV cache in use (0 to 1)."},
    {"lmwarden_replica_prefix_cache_hit_ratio", MetricType::kGauge, "model,replica",
     "Prefix-cache hits over queries, in tokens, since the warden started."},
    {"lmwarden_replica_healthy", MetricType::kGauge, "model,replica",
     "1 when the replica takes new work, 0 when it is marked unhealthy."},
    {"lmwarden_replica_info", MetricType::kGauge, "model,replica,url,rank",
     "Always 1; labels say where the replica lives."},
    {"lmwarden_refused_requests_total", MetricType::kCounter, "model,reason",
     "Requests answered with the warden's own error before any replica was tried, by reason; "
     "model empty when none was known."},
    {"lmwarden_connections_refused_total", MetricType::kCounter, "",
     "Client connections closed at once because limits.max_connections were open."},
    {"lmwarden_access_log_dropped_total", MetricType::kCounter, "",
     "Access log lines lost: the disk fell 4 MiB behind, or a write failed."},
    {"lmwarden_config_reloads_total", MetricType::kCounter, "result",
     "Reloads of the configuration file (SIGHUP), by result: applied, or refused (the file did "
     "not load, and the configuration in force stayed)."},
    {"lmwarden_config_last_reload_successful", MetricType::kGauge, "",
     "0 when the last reload was refused, so the file on disk is not the configuration in force; "
     "1 otherwise."},
    {"lmwarden_config_last_reload_success_timestamp_seconds", MetricType::kGauge, "",
     "When the configuration in force was read (Unix time): the start, or the last reload "
     "applied."},
    {"lmwarden_shared_homes_lookups_total", MetricType::kCounter, "result",
     "Homes of conversations (and stored responses) this warden did not know, asked of the "
     "other wardens through Redis (shared_homes), by result: found, absent, failed (Redis "
     "unreachable, an error, or later than the timeout: placed by this warden alone), or "
     "unusable (a server or rank this model does not list)."},
    {"lmwarden_shared_homes_writes_total", MetricType::kCounter, "result",
     "Homes written to Redis for the other wardens (shared_homes), by result: sent, failed, or "
     "dropped (too many waiting)."},
    {"lmwarden_shared_homes_claims_total", MetricType::kCounter, "result",
     "Homes of conversations claimed in Redis against other wardens' (shared_homes), one per "
     "routed request, by result: taken (this warden's home is the shared home), yielded "
     "(another warden's is, and the conversation follows it), kept (another's, not followed: "
     "unhealthy here, or the conversation moved on), unusable (another's, on a server or rank "
     "this model does not list), unchecked (written with a plain SET: Redis refuses scripts), "
     "or failed (no answer)."},
    {"lmwarden_shared_homes_connected", MetricType::kGauge, "",
     "1 while the warden is connected to the Redis it shares homes through, 0 when not; absent "
     "without shared_homes."},
    {"lmwarden_saved_homes_writes_total", MetricType::kCounter, "result",
     "Writes of the file that keeps conversation homes across a restart (saved_homes), by "
     "result: written or failed; absent without saved_homes."},
    {"lmwarden_saved_homes_last_write_timestamp_seconds", MetricType::kGauge, "",
     "When the homes file (saved_homes) was last written whole (Unix time); 0 before the first "
     "write; absent without saved_homes."},
}};

}  // namespace lmwarden::telemetry
