// The models of a configuration, and what a reload does to their routing
// state: carried on where a model keeps its replicas; where they changed,
// replaced, with the conversations on servers and ranks it keeps taken over
// and its requests still in flight counted where they run.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/coarse_clock.h"
#include "proxy/warden.h"

namespace lmwarden::proxy {

namespace {

std::vector<std::string> resolve_api_keys(const config::ModelConfig& model) {
  std::vector<std::string> keys;
  for (const auto& name : model.api_keys_env)
    if (const char* v = std::getenv(name.c_str()); v && *v) keys.emplace_back(v);
  return keys;
}

std::vector<ModelTelemetry::Server> telemetry_servers(const config::ModelConfig& model) {
  std::vector<ModelTelemetry::Server> servers;
  for (const auto& b : model.backends) servers.push_back({b.url, b.data_parallel_size});
  return servers;
}

}  // namespace

ModelState::ModelState(const config::ModelConfig& model)
    : ModelState(model, std::make_shared<RoutingState>(model),
                 std::make_shared<ModelTelemetry>(model.name, telemetry_servers(model))) {}

ModelState::ModelState(const config::ModelConfig& model, const ModelState& previous)
    : ModelState(model, previous.routing, previous.telemetry_owner) {}

ModelState::ModelState(const config::ModelConfig& model,
                       std::shared_ptr<RoutingState> routing_state,
                       std::shared_ptr<ModelTelemetry> model_telemetry)
    : config(model),
      identity{.sources = model.session_sources, .honor_client_rank = model.honor_client_rank},
      api_keys(resolve_api_keys(model)),
      routing(std::move(routing_state)),
      telemetry_owner(std::move(model_telemetry)),
      mutex(routing->mutex),
      router(routing->router),
      telemetry(*telemetry_owner) {}

ModelState* ModelSet::find(std::string_view name) const noexcept {
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : it->second;
}

namespace {

// Same servers with the same ranks, in the same order: replica indices, and so
// conversations' homes and counters, mean the same thing in both. A server
// is known by its URL however it is written (a trailing '/', a default port).
bool same_layout(const config::ModelConfig& a, const config::ModelConfig& b) {
  if (a.backends.size() != b.backends.size()) return false;
  for (std::size_t i = 0; i < a.backends.size(); ++i)
    if (server_name(a.backends[i]) != server_name(b.backends[i]) ||
        a.backends[i].data_parallel_size != b.backends[i].data_parallel_size)
      return false;
  return true;
}

// The model of `previous` that `m` of `next` continues: the one of the same
// name, or, for a model renamed, the one whose name `m` keeps as an alias (no
// model of `next` has that name any more). Null for a model new here.
const ModelState* predecessor(const config::ModelConfig& m, const config::Config& next,
                              const ModelSet& previous) {
  for (const auto& p : previous.models)
    if (p->config.name == m.name) return p.get();
  for (const auto& p : previous.models) {
    const std::string& old_name = p->config.name;
    if (std::ranges::find(m.aliases, old_name) == m.aliases.end()) continue;
    if (std::ranges::any_of(next.models, [&](const auto& n) { return n.name == old_name; }))
      continue;
    return p.get();
  }
  return nullptr;
}

// The state of `m`, which continues `from` with other replicas. Taken over
// before it is published: the conversations and stored responses whose
// server and rank `m` still has (by server name, so a URL written another
// way is the same server), those replicas' health, ejections and engine
// figures, each server's failed probes, and why each of them is out. The
// counters and the chart continue too when every replica kept has the same
// index in both, as after servers or ranks added or removed at the end of the
// list: the `replica` label of /metrics is an index, so a counter whose
// replica moved must start again (as it does, with the model's other
// counters, when one has).
std::shared_ptr<ModelState> continue_with_new_replicas(const ModelState& from,
                                                       const config::ModelConfig& m) {
  auto routing = std::make_shared<RoutingState>(m);
  // `from`'s replica r is the new router's home_in[r] (-1: none).
  std::vector<int> home_in;
  bool kept = false;
  bool same_indices = true;
  // The layout is fixed for the router's life: read without the lock.
  for (int r = 0; r < from.router.replica_count(); ++r) {
    const std::string& server =
        from.routing->servers[static_cast<std::size_t>(from.router.replica_backend(r))];
    // replica_at is -1 for a server the model no longer has (index -1).
    home_in.push_back(routing->router.replica_at(server_index(routing->servers, server),
                                                 from.router.replica_rank(r)));
    kept = kept || home_in.back() >= 0;
    same_indices = same_indices && (home_in.back() < 0 || home_in.back() == r);
  }
  // Copied under the lock, taken outside it (Router::homes_for): a home
  // placed or moved in between is placed again at its next request here.
  core::Router::Homes homes;
  if (m.affinity) {
    std::lock_guard lock{from.mutex};
    homes = from.router.homes_for(home_in);
  }
  const bool counters = kept && same_indices;
  // The new replica i is `from`'s same_as[i] (-1: none), and the new server b
  // is `from`'s server_was[b].
  std::vector<int> same_as(static_cast<std::size_t>(m.replica_count()), -1);
  for (std::size_t r = 0; r < home_in.size(); ++r)
    if (home_in[r] >= 0) same_as[static_cast<std::size_t>(home_in[r])] = static_cast<int>(r);
  std::vector<int> server_was;
  for (const auto& server : routing->servers)
    server_was.push_back(server_index(from.routing->servers, server));
  std::shared_ptr<ModelTelemetry> telemetry;
  if (counters) {
    routing->since = from.routing->since;
    telemetry = std::make_shared<ModelTelemetry>(m.name, telemetry_servers(m),
                                                 *from.telemetry_owner, same_as);
  } else {
    telemetry = std::make_shared<ModelTelemetry>(m.name, telemetry_servers(m));
  }
  telemetry->carry_outages(*from.telemetry_owner, server_was, same_as);
  auto to = std::make_shared<ModelState>(m, std::move(routing), std::move(telemetry));
  to->carried = to->router.take_homes(homes, coarse_steady_now());
  homes = {};
  std::scoped_lock lock{from.mutex, to->mutex};
  to->counters_carried = counters;
  to->router.carry_state(from.router, home_in, counters);
  std::vector<int> server_in;
  for (const auto& server : from.routing->servers)
    server_in.push_back(server_index(to->routing->servers, server));
  from.routing->carried_to.reset(new RoutingState::CarriedTo{to->routing, home_in, server_in});
  for (std::size_t b = 0; b < server_was.size(); ++b)
    if (server_was[b] >= 0)
      to->routing->failed_probes[b] =
          from.routing->failed_probes[static_cast<std::size_t>(server_was[b])];
  return to;
}

}  // namespace

std::shared_ptr<ModelSet> make_model_set(config::Config config, const ModelSet* previous) {
  auto set = std::make_shared<ModelSet>();
  set->config = std::move(config);
  set->generation = previous ? previous->generation + 1 : 0;
  for (const auto& m : set->config.models) {
    // Its routing state is carried on when its replicas are the same.
    const ModelState* replaced = previous ? predecessor(m, set->config, *previous) : nullptr;
    const ModelState* before = replaced && same_layout(replaced->config, m) ? replaced : nullptr;
    if (before) {
      set->models.push_back(std::make_shared<ModelState>(m, *before));
    } else if (replaced) {
      set->models.push_back(continue_with_new_replicas(*replaced, m));
    } else {
      set->models.push_back(std::make_shared<ModelState>(m));
    }
    ModelState* state = set->models.back().get();
    set->by_name[m.name] = state;
    for (const auto& alias : m.aliases) set->by_name[alias] = state;
    set->body_fields.add(state->identity.sources);
  }
  if (!set->config.access_log.empty())
    set->access_log = AccessLog::open(set->config.access_log, &set->access_log_failure);
  set->refusals = previous ? previous->refusals : std::make_shared<Refusals>();
  // What an alert on a model's 503s reads (packaging/prometheus).
  for (const auto& m : set->config.models) set->refusals->declare(m.name, "no_healthy_replica");
  return set;
}

namespace {

// The run-time changes (PATCH) to `p` that the reload to `m` undoes: those
// whose value differs from `p`'s file, where `m`'s file says otherwise.
std::string patches_undone(const ModelState& p, const config::ModelConfig& m) {
  bool affinity = false;
  std::optional<int> spill;
  {
    std::lock_guard lock{p.mutex};
    affinity = p.router.affinity();
    spill = p.router.spill_threshold_setting();
  }
  std::string undone;
  const auto add = [&](std::string_view key, const auto& file, const auto& set) {
    undone += fmt::format("{}{} back to the file's {} (a PATCH had set {})",
                          undone.empty() ? "" : "; ", key, file, set);
  };
  if (affinity != p.config.affinity && affinity != m.affinity)
    add("affinity", m.affinity, affinity);
  if (spill != p.config.spill_threshold && spill != m.spill_threshold)
    add("spill_threshold", config::spill_threshold_text(m.spill_threshold),
        config::spill_threshold_text(spill));
  return undone;
}

}  // namespace

std::vector<std::string> routing_notes(const ModelSet& before, const ModelSet& after) {
  std::vector<std::string> notes;
  std::vector<const ModelState*> continued;
  for (const auto& m : after.models) {
    const ModelState* p = predecessor(m->config, after.config, before);
    if (!p) continue;
    continued.push_back(p);
    const bool renamed = p->config.name != m->config.name;
    const std::string what = renamed ? "model " + p->config.name + " renamed " + m->config.name +
                                           ", which keeps the old name as an alias"
                                     : "model " + m->config.name;
    if (const std::string undone = patches_undone(*p, m->config); !undone.empty())
      notes.push_back(what + (renamed ? "; " : ": ") + undone);
    if (p->routing != m->routing) {
      const core::Router::Carried& c = m->carried;
      notes.push_back(fmt::format(
          "{}{}its replicas changed: {} conversations and {} stored responses on servers and "
          "ranks it still has stay there; {} conversations on replicas it no longer has are "
          "placed again at their next request, and {} stored responses there are forgotten{}; "
          "{}",
          what, renamed ? "; " : ": ", c.conversations, c.responses, c.left, c.responses_left,
          c.over_capacity == 0 ? std::string()
                               : fmt::format("; {} conversations over max_conversations are "
                                             "forgotten (the least recently used)",
                                             c.over_capacity),
          m->counters_carried
              ? "the counters and chart of the replicas it keeps carry on, as each keeps its "
                "index"
              : "its counters and chart start afresh, as a replica it keeps has a new index, or "
                "it keeps none"));
      continue;
    }
    if (renamed)
      notes.push_back(what + ", and its conversations, stored responses, counters and chart");
    if (m->config.max_conversations != p->config.max_conversations)
      notes.push_back(what + (renamed ? "; " : ": ") +
                      "max_conversations changed; it takes effect when its replicas change, or "
                      "at the next restart");
  }
  for (const auto& p : before.models)
    if (std::ranges::find(continued, p.get()) == continued.end())
      notes.push_back("model " + p->config.name +
                      " removed, with its conversations, stored responses, counters and chart (a "
                      "model renamed continues it when it lists the old name under its aliases)");
  return notes;
}

}  // namespace lmwarden::proxy
