// What the warden measures per model and replica: tokens by source, upstream
// errors, time to first byte, and what the scraper last read from the engine.
// Written by the I/O threads (request accounting) and the scraper, read by
// /metrics, /api/*. Counters are atomics; the scraped state has its own lock.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "telemetry/counter_delta.h"
#include "telemetry/histogram.h"
#include "telemetry/open_requests.h"
#include "telemetry/token_series.h"

namespace lmwarden::proxy {

// Why something last left service, and since when, kept until the next time
// it leaves (the card shows it while it is out: api.md). Written by the
// scraper and the request path, read by /api.
class OutageRecord {
 public:
  struct Outage {
    std::string reason;  // empty: never out
    telemetry::WallTime since{};
  };
  void note(std::string reason) {
    std::lock_guard lock{mutex_};
    outage_ = {std::move(reason), telemetry::WallClock::now()};
  }
  Outage get() const {
    std::lock_guard lock{mutex_};
    return outage_;
  }
  void set(Outage outage) {
    std::lock_guard lock{mutex_};
    outage_ = std::move(outage);
  }

 private:
  mutable std::mutex mutex_;
  Outage outage_;
};

struct ReplicaTelemetry {
  telemetry::TokenSeries series;
  std::atomic<std::uint64_t> prompt_cached{0};
  std::atomic<std::uint64_t> prompt_computed{0};
  std::atomic<std::uint64_t> completion{0};
  std::atomic<std::uint64_t> unmeasured_requests{0};  // replies that carried no usage
  // Server errors (5xx replies) in a row, for passive health (note_reply).
  std::atomic<int> server_errors_in_row{0};

  void count_error(const std::string& kind) {
    std::lock_guard lock{errors_mutex};
    ++errors[kind];
  }
  std::map<std::string, std::uint64_t> error_counts() const {
    std::lock_guard lock{errors_mutex};
    return errors;
  }

  // Why the replica was last ejected for its 5xx replies, and since when
  // (its server's health is its server's: ModelTelemetry::unhealthy).
  OutageRecord ejection;

  // Scraper-owned: counter deltas since the warden started (or the reload
  // that started the replica's counters afresh), under scrape_mutex: the
  // scrapers of two configurations may share a replica for a moment.
  std::mutex scrape_mutex;
  telemetry::RankCounters engine_counters;
  std::atomic<double> prefix_hit_rate{-1.0};  // -1: nothing measured yet

 private:
  mutable std::mutex errors_mutex;
  std::map<std::string, std::uint64_t> errors;
};

// Whether one vLLM server's replies say how many prompt tokens came from its
// prefix cache. vLLM says so only when started with
// --enable-prompt-tokens-details (and leaves the count out when none did), so
// without it every prompt token is booked as computed. The flag is the
// server's, so the check is per server: one started without it among several
// with it would otherwise go unseen. One reply with a count settles it; 20 with
// usage and none with a count most likely mean the flag is off (a coding
// agent's second turn, or any request sharing a system prompt, is served from
// the cache in part), unless the engine's own counters say that nothing was
// served from its cache, which is what the flag's absent count says too. Once
// settled the request path only reads these, so the cache line they share is
// not written per reply.
class CachedCountCheck {
 public:
  static constexpr std::uint64_t kExpectedWithin = 20;

  // Notes one reply's usage. `engine_cached_nothing()` says whether the
  // engine's own counters show prompts read and none from the cache; it is
  // asked only while the check is unsettled. True once: for the reply that
  // makes the count's absence worth telling (the one to log it).
  template <typename EngineCachedNothing>
  bool count(bool cached_count, EngineCachedNothing&& engine_cached_nothing) noexcept {
    if (seen_.load(std::memory_order_relaxed)) return false;
    if (cached_count) {
      seen_.store(true, std::memory_order_relaxed);
      return false;
    }
    if (without_.load(std::memory_order_relaxed) < kExpectedWithin) {
      if (without_.fetch_add(1, std::memory_order_relaxed) + 1 < kExpectedWithin) return false;
    } else if (reported_.load(std::memory_order_relaxed)) {
      return false;  // said already
    }
    return !engine_cached_nothing() && !reported_.exchange(true, std::memory_order_relaxed);
  }
  bool missing(bool engine_cached_nothing) const noexcept {
    return !seen_.load(std::memory_order_relaxed) &&
           without_.load(std::memory_order_relaxed) >= kExpectedWithin && !engine_cached_nothing;
  }

 private:
  std::atomic<bool> seen_{false};
  std::atomic<bool> reported_{false};
  std::atomic<std::uint64_t> without_{0};  // replies with usage and no count, up to kExpectedWithin
};

struct ModelTelemetry {
  // One configured server of the model: its URL and its replicas (ranks).
  struct Server {
    std::string url;
    int data_parallel_size = 1;
  };

  ModelTelemetry(std::string model_name, const std::vector<Server>& servers)
      : ModelTelemetry(std::move(model_name), servers, nullptr, {}) {}
  // After a reload that changed the model's replicas: continues `previous`
  // (its time to first byte, open requests, the unassigned bucket and each
  // server's cached-count check, by URL) and, for each replica i with
  // same_as[i] >= 0, that replica of `previous`, shared: requests still
  // running under the old configuration book their tokens where the new one
  // reads them.
  ModelTelemetry(std::string model_name, const std::vector<Server>& servers,
                 const ModelTelemetry& previous, const std::vector<int>& same_as)
      : ModelTelemetry(std::move(model_name), servers, &previous, same_as) {}

  // Replica `index`, or the "unassigned" bucket (index -1: requests whose rank
  // vLLM's own balancer picked, with affinity off).
  ReplicaTelemetry& replica(int index) {
    return index < 0 ? *unassigned_ : *replicas_[static_cast<std::size_t>(index)];
  }
  const ReplicaTelemetry& replica(int index) const {
    return index < 0 ? *unassigned_ : *replicas_[static_cast<std::size_t>(index)];
  }
  int replica_count() const noexcept { return static_cast<int>(replicas_.size()); }

  // The model's window: the sum of its replicas' (and the unassigned bucket).
  telemetry::TokenWindow window(telemetry::WallTime now, std::chrono::seconds window,
                                std::chrono::seconds step) const {
    telemetry::TokenWindow total = unassigned_->series.query(now, window, step);
    for (const auto& r : replicas_) total.add(r->series.query(now, window, step));
    return total;
  }

  const std::string name;  // the model's, for what the warden logs of it

  // Notes the usage of one reply from server `server` (an index into the
  // model's backends); true once per server, for the reply to log that its
  // replies seem not to say how much of the prompt was cached.
  bool count_usage(int server, bool cached_count) noexcept {
    ServerState& s = *servers_[static_cast<std::size_t>(server)];
    return s.cached_count->count(cached_count, [&] { return engine_cached_nothing(s); });
  }
  const std::string& server_url(int server) const {
    return servers_[static_cast<std::size_t>(server)]->url;
  }
  // The URLs of the servers whose replies seem not to say it (CachedCountCheck).
  std::vector<std::string> cached_count_missing() const {
    std::vector<std::string> urls;
    for (const auto& s : servers_)
      if (s->cached_count->missing(engine_cached_nothing(*s))) urls.push_back(s->url);
    return urls;
  }

  // Why server `server` was last taken out of service for its health (failed
  // probes, or a connection to it that failed): its ranks share it.
  OutageRecord& unhealthy(int server) {
    return servers_[static_cast<std::size_t>(server)]->unhealthy;
  }
  const OutageRecord& unhealthy(int server) const {
    return servers_[static_cast<std::size_t>(server)]->unhealthy;
  }

  // After a reload that changed the model's replicas, before this is
  // published: the outages of `previous` that this one keeps, as the router
  // keeps their health: server b's if server_was[b] >= 0 (the same server in
  // `previous`), replica i's ejection if replica_was[i] >= 0.
  void carry_outages(const ModelTelemetry& previous, const std::vector<int>& server_was,
                     const std::vector<int>& replica_was) {
    for (std::size_t b = 0; b < servers_.size() && b < server_was.size(); ++b)
      if (server_was[b] >= 0) servers_[b]->unhealthy.set(previous.unhealthy(server_was[b]).get());
    for (std::size_t i = 0; i < replicas_.size() && i < replica_was.size(); ++i) {
      const int was = replica_was[i];
      // A replica whose telemetry the reload shares (counters carried) keeps
      // its record as it is: a copy could put back an older one over an
      // ejection its old state's requests note meanwhile.
      if (was >= 0 && &previous.replica(was) != replicas_[i].get())
        replicas_[i]->ejection.set(previous.replica(was).ejection.get());
    }
  }

  telemetry::Histogram& time_to_first_byte() noexcept { return model_wide_->time_to_first_byte; }
  const telemetry::Histogram& time_to_first_byte() const noexcept {
    return model_wide_->time_to_first_byte;
  }
  // Successful replies under way whose tokens are booked when they end: where
  // the chart's seconds stop being final (GET /api/stats, settled_until).
  telemetry::OpenRequests& open_requests() noexcept { return model_wide_->open_requests; }
  const telemetry::OpenRequests& open_requests() const noexcept {
    return model_wide_->open_requests;
  }

 private:
  ModelTelemetry(std::string model_name, const std::vector<Server>& servers,
                 const ModelTelemetry* previous, const std::vector<int>& same_as);

  // What is the model's as a whole, which a reload keeping its counters
  // shares with the configuration before.
  struct ModelWide {
    telemetry::Histogram time_to_first_byte;
    telemetry::OpenRequests open_requests;
  };
  struct ServerState {
    ServerState(std::string address, int first, int count, std::shared_ptr<CachedCountCheck> check)
        : url(std::move(address)),
          first_replica(first),
          replicas(count),
          cached_count(std::move(check)) {}
    const std::string url;
    const int first_replica;  // its ranks are replicas first_replica .. + replicas - 1
    const int replicas;
    const std::shared_ptr<CachedCountCheck> cached_count;
    OutageRecord unhealthy;
  };
  // Whether the scraper has read prompts on some rank of the server, and no
  // prefix-cache hit on any. A rank not measured yet (no query seen) says
  // nothing either way: traffic pinned to one rank leaves the others so.
  bool engine_cached_nothing(const ServerState& s) const noexcept {
    bool measured = false;
    for (int i = s.first_replica; i < s.first_replica + s.replicas; ++i) {
      const double rate = replica(i).prefix_hit_rate.load(std::memory_order_relaxed);
      if (rate > 0.0) return false;
      measured = measured || rate == 0.0;
    }
    return measured;
  }

  std::shared_ptr<ModelWide> model_wide_;
  std::vector<std::unique_ptr<ServerState>> servers_;
  std::vector<std::shared_ptr<ReplicaTelemetry>> replicas_;
  std::shared_ptr<ReplicaTelemetry> unassigned_;
};

inline ModelTelemetry::ModelTelemetry(std::string model_name, const std::vector<Server>& servers,
                                      const ModelTelemetry* previous,
                                      const std::vector<int>& same_as)
    : name(std::move(model_name)),
      model_wide_(previous ? previous->model_wide_ : std::make_shared<ModelWide>()),
      unassigned_(previous ? previous->unassigned_ : std::make_shared<ReplicaTelemetry>()) {
  for (const auto& s : servers) {
    std::shared_ptr<CachedCountCheck> check;
    if (previous)
      for (const auto& p : previous->servers_)
        if (p->url == s.url) check = p->cached_count;
    if (!check) check = std::make_shared<CachedCountCheck>();
    servers_.push_back(std::make_unique<ServerState>(s.url, replica_count(), s.data_parallel_size,
                                                     std::move(check)));
    for (int rank = 0; rank < s.data_parallel_size; ++rank) {
      const auto i = replicas_.size();
      const int from = previous && i < same_as.size() ? same_as[i] : -1;
      replicas_.push_back(from >= 0 ? previous->replicas_[static_cast<std::size_t>(from)]
                                    : std::make_shared<ReplicaTelemetry>());
    }
  }
}

}  // namespace lmwarden::proxy
