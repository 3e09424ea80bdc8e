#include "proxy/scraper.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <limits>

#include "net/http_client.h"
#include "telemetry/served_models.h"
#include "telemetry/vllm_snapshot.h"

namespace lmwarden::proxy {
namespace {

std::string describe(const net::GetResult& r) {
  if (r.error) return r.error.message();
  return "HTTP " + std::to_string(r.status);
}

// A gauge read as a count of requests, within an int (an exporter's 1e12
// is no count, but it must not overflow the conversion).
int as_count(double v) {
  if (!(v >= 0)) return 0;  // NaN too
  return static_cast<int>(std::min(v, static_cast<double>(std::numeric_limits<int>::max())));
}

// The ranks below `ranks` that a server's /metrics has no engine for, when it
// has one for some of them (a data_parallel_size larger than the server's:
// vLLM refuses a request for a rank it does not have), as "4-7" or "1, 3";
// empty when none is missing or the server names none of them.
std::string missing_ranks(const telemetry::VllmSnapshot& snapshot, int ranks) {
  std::vector<bool> seen(static_cast<std::size_t>(ranks), false);
  bool any = false;
  for (const auto& m : snapshot.ranks)
    if (m.rank >= 0 && m.rank < ranks) {
      seen[static_cast<std::size_t>(m.rank)] = true;
      any = true;
    }
  std::string text;
  if (!any) return text;
  for (int r = 0; r < ranks;) {
    if (seen[static_cast<std::size_t>(r)]) {
      ++r;
      continue;
    }
    int end = r;
    while (end + 1 < ranks && !seen[static_cast<std::size_t>(end + 1)]) ++end;
    if (!text.empty()) text += ", ";
    text += end == r ? std::to_string(r) : std::to_string(r) + "-" + std::to_string(end);
    r = end + 1;
  }
  return text;
}

// The ranks at or above `ranks` a server's /metrics has engines for (a
// data_parallel_size smaller than the server's), as "2-3" or "1"; empty
// when there are none.
std::string extra_ranks(const telemetry::VllmSnapshot& snapshot, int ranks) {
  int top = ranks - 1;
  for (const auto& m : snapshot.ranks) top = std::max(top, m.rank);
  if (top < ranks) return {};
  return top == ranks ? std::to_string(ranks) : std::to_string(ranks) + "-" + std::to_string(top);
}

// Says (once until it changes) which of a model's names a server does not
// list in its /v1/models, and when it lists them all again.
void check_served(const ModelState& model, const config::BackendConfig& backend,
                  const std::vector<std::string>& names, const std::vector<std::string>& ids,
                  std::vector<std::string>& said) {
  std::vector<std::string> unserved;
  for (const std::string& name : names)
    if (std::ranges::find(ids, name) == ids.end()) unserved.push_back(name);
  if (unserved == said) return;
  if (unserved.empty()) {
    spdlog::info("model={} backend={}: its /v1/models now lists {}", model.config.name, backend.url,
                 names.size() == 1 ? "the model's name" : "the model's name and aliases");
  } else {
    spdlog::warn(
        "model={} backend={}: its /v1/models lists {} and not {}; vLLM refuses a request that "
        "names a model it does not list (404): {}",
        model.config.name, backend.url,
        ids.empty() ? std::string("no model") : fmt::format("{}", fmt::join(ids, ", ")),
        fmt::join(unserved, ", "),
        unserved.front() == model.config.name
            ? "set the model's name to the one vLLM serves, or add it to the server's "
              "--served-model-name"
            : "list each alias in the server's --served-model-name");
  }
  said = std::move(unserved);
}

}  // namespace

void Scraper::start(net::asio::io_context& io) {
  const auto set = warden_.models();
  if (started_ == set->generation) return;
  started_ = set->generation;
  for (const auto& model : set->models)
    for (int b = 0; b < static_cast<int>(model->config.backends.size()); ++b)
      net::asio::co_spawn(io, watch(model, b, set->generation), net::asio::detached);
}

net::Awaitable<void> Scraper::watch(std::shared_ptr<ModelState> model_ptr, int backend_index,
                                    std::uint64_t generation) {
  ModelState& model = *model_ptr;
  const auto& backend = model.config.backends[static_cast<std::size_t>(backend_index)];
  // A reload hands a server over with its health and its count of failed
  // rounds: reloads more often than `unhealthy_after` rounds must not keep a
  // dead server in service.
  int& failed_in_row = model.routing->failed_probes[static_cast<std::size_t>(backend_index)];
  auto [first, ranks, failures] = [&] {
    std::lock_guard lock{model.mutex};
    const auto [f, n] = model.router.backend_replicas(backend_index);
    return std::tuple{f, n, failed_in_row};
  }();
  // A probe may take as long as a round, but never so little that a loaded
  // server is declared dead for answering in 600 ms.
  const auto timeout = std::max(interval_, std::chrono::milliseconds(2000));
  const auto executor = co_await net::asio::this_coro::executor;
  net::Timer timer{executor};
  net::HttpGetter server{executor, backend.host, backend.port};
  const std::string health_target = backend.base_path + "/health";
  const std::string metrics_target = backend.base_path + "/metrics";
  std::string missing_said;  // the ranks last logged as missing from /metrics
  std::string extra_said;    // the ranks last logged as more than data_parallel_size
  std::vector<std::string> models_said;  // the models last logged as none of this one's names
  // Whether /v1/models was read since the server last answered well, and
  // this model's names it did not list when it was.
  bool served_checked = false;
  std::vector<std::string> unserved_said;
  // The names a server's series may carry for this model: vLLM labels them
  // with its first --served-model-name, which the file names or aliases.
  std::vector<std::string> names{model.config.name};
  names.insert(names.end(), model.config.aliases.begin(), model.config.aliases.end());

  while (warden_.models()->generation == generation) {
    const auto round_start = std::chrono::steady_clock::now();
    const auto health = co_await server.get(health_target, timeout);
    const auto metrics = co_await server.get(metrics_target, timeout);

    if (warden_.models()->generation != generation) co_return;  // a reload took over

    std::string problem;
    std::vector<core::EngineStats> engines(static_cast<std::size_t>(ranks));  // unknown until read
    bool metrics_read = false;
    if (health.error || health.status != 200) problem = "/health: " + describe(health);
    if (metrics.error || metrics.status != 200) {
      problem += (problem.empty() ? "" : "; ") + std::string("/metrics: ") + describe(metrics);
    } else {
      const auto snapshot = telemetry::extract_vllm_snapshot(metrics.body, names);
      if (snapshot.unmatched_models != models_said) {
        if (!snapshot.unmatched_models.empty())
          spdlog::warn(
              "model={} backend={}: its /metrics has series for the models {}, none of them "
              "named {}; the warden reads them all, summed per rank, as this model's load: add "
              "the server's name for this model to its aliases",
              model.config.name, backend.url, fmt::join(snapshot.unmatched_models, ", "),
              names.size() == 1 ? model.config.name
                                : fmt::format("{} or its aliases", model.config.name));
        models_said = snapshot.unmatched_models;
      }
      if (snapshot.ranks.empty()) {
        problem += (problem.empty() ? "" : "; ") + std::string("/metrics has no vLLM samples");
      } else {
        metrics_read = true;
        if (auto missing = missing_ranks(snapshot, ranks); missing != missing_said) {
          if (!missing.empty())
            spdlog::warn(
                "model={} backend={}: data_parallel_size is {}, but its /metrics has no engine "
                "for rank {}; vLLM refuses requests for a rank it does not have: set "
                "data_parallel_size to the server's --data-parallel-size",
                model.config.name, backend.url, ranks, missing);
          missing_said = std::move(missing);
        }
        if (auto extra = extra_ranks(snapshot, ranks); extra != extra_said) {
          if (!extra.empty())
            spdlog::warn(
                "model={} backend={}: data_parallel_size is {}, but its /metrics has engines for "
                "rank {} too; {}: set data_parallel_size to the server's --data-parallel-size",
                model.config.name, backend.url, ranks, extra,
                ranks == 1 ? "a server of one rank is sent no rank, so the server's own balancer "
                             "spreads each conversation over all its ranks"
                           : "the warden pins requests to the ranks it knows only");
          extra_said = std::move(extra);
        }
        std::lock_guard lock{model.mutex};
        for (const auto& m : snapshot.ranks) {
          if (m.rank < 0 || m.rank >= ranks) continue;
          const int replica = first + m.rank;
          core::EngineStats& stats = engines[static_cast<std::size_t>(m.rank)];
          stats.running = m.running ? as_count(*m.running) : -1;
          stats.waiting = m.waiting ? as_count(*m.waiting) : -1;
          stats.kv_used = m.kv_cache_usage.value_or(std::nan(""));
          auto& rt = model.telemetry.replica(replica);
          std::lock_guard counters_lock{rt.scrape_mutex};
          rt.engine_counters.observe(m);
          rt.prefix_hit_rate.store(rt.engine_counters.totals().prefix_cache_hit_rate().value_or(-1.0));
        }
      }
    }

    // A good round brings the server back, whoever took it out (these
    // rounds, or the data plane when it could not connect); `unhealthy_after`
    // failed rounds in a row take it out. A failed round short of that leaves
    // its health as it is.
    failures = problem.empty() ? 0 : std::min(failures + 1, unhealthy_after_);
    bool was = false;
    bool now = false;
    {
      std::lock_guard lock{model.mutex};
      was = model.router.backend_healthy(backend_index);
      now = problem.empty() || (failures < unhealthy_after_ && was);
      model.router.set_backend_healthy(backend_index, now);
      failed_in_row = failures;
      // What the engine said this round. A failed /metrics keeps the last
      // figures while the server stays in service (one slow scrape should not
      // blank its KV out of the load score); out of service, a dead engine's
      // last queue is no longer news: the card and /metrics show none.
      if (!now || metrics_read)
        for (int rank = 0; rank < ranks; ++rank)
          model.router.set_engine_stats(
              first + rank, now ? engines[static_cast<std::size_t>(rank)] : core::EngineStats{});
      if (backend_index == 0) model.router.expire(core::Clock::now());
    }
    // The names it answers to, read again after each time it failed (it may
    // have restarted with others): a name it does not serve has every
    // request for it refused (404), where the warden sees a server in
    // service.
    if (!problem.empty()) {
      served_checked = false;
    } else if (!served_checked) {
      served_checked = true;
      const auto listed = co_await server.get(backend.base_path + "/v1/models", timeout);
      if (warden_.models()->generation != generation) co_return;
      const auto ids = listed.error || listed.status != 200
                           ? std::nullopt
                           : telemetry::served_model_ids(listed.body);
      if (ids) check_served(model, backend, names, *ids, unserved_said);
    }
    if (now && !was) {
      spdlog::info("model={} backend={} healthy again; taking new work", model.config.name,
                   backend.url);
    } else if (!now && was) {
      model.telemetry.unhealthy(backend_index)
          .note(fmt::format("{} failed probes in a row: {}", failures, problem));
      spdlog::warn(
          "model={} backend={} unhealthy after {} failed probes ({}); its conversations re-home",
          model.config.name, backend.url, failures, problem);
    }

    timer.expires_at(round_start + interval_);
    co_await timer.async_wait(net::kAsTuple);
  }
}

}  // namespace lmwarden::proxy
