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

struct ReplicaTelemetry {
  telemetry::TokenSeries series;
  std::atomic<std::uint64_t> prompt_cached{0};
  std::atomic<std::uint64_t> prompt_computed{0};
  std::atomic<std::uint64_t> completion{0};
  std::atomic<std::uint64_t> unmeasured_requests{0};  // replies that carried no usage

  void count_error(const std::string& kind) {
    std::lock_guard lock{errors_mutex};
    ++errors[kind];
  }
  std::map<std::string, std::uint64_t> error_counts() const {
    std::lock_guard lock{errors_mutex};
    return errors;
  }

  // Scraper-owned: counter deltas since the warden started.
  telemetry::RankCounters engine_counters;
  std::atomic<double> prefix_hit_rate{-1.0};  // -1: nothing measured yet

 private:
  mutable std::mutex errors_mutex;
  std::map<std::string, std::uint64_t> errors;
};

struct ModelTelemetry {
  ModelTelemetry(std::string model_name, int replicas) : name(std::move(model_name)) {
    for (int i = 0; i < replicas; ++i) replicas_.push_back(std::make_unique<ReplicaTelemetry>());
  }
  // Replica `index`, or the "unassigned" bucket (index -1: requests whose rank
  // vLLM's own balancer picked, with affinity off).
  ReplicaTelemetry& replica(int index) {
    return index < 0 ? unassigned_ : *replicas_[static_cast<std::size_t>(index)];
  }
  const ReplicaTelemetry& replica(int index) const {
    return index < 0 ? unassigned_ : *replicas_[static_cast<std::size_t>(index)];
  }
  int replica_count() const noexcept { return static_cast<int>(replicas_.size()); }

  // The model's window: the sum of its replicas' (and the unassigned bucket).
  telemetry::TokenWindow window(telemetry::WallTime now, std::chrono::seconds window,
                                std::chrono::seconds step) const {
    telemetry::TokenWindow total = unassigned_.series.query(now, window, step);
    for (const auto& r : replicas_) total.add(r->series.query(now, window, step));
    return total;
  }

  const std::string name;  // the model's, for what the warden logs of it

  // Whether replies say how many prompt tokens came from the prefix cache.
  // vLLM says so only when started with --enable-prompt-tokens-details (and
  // leaves the count out when none did), so without it every prompt token is
  // booked as computed. One reply with a count settles it; 20 with usage and
  // none with a count most likely mean the flag is off: a coding agent's
  // second turn, or any request sharing a system prompt, is served from the
  // cache in part. Once settled either way the request path only reads these,
  // so the cache line they share is not written per reply.
  std::atomic<bool> cached_count_seen{false};
  std::atomic<std::uint64_t> replies_without_cached_count{0};  // counted up to the threshold
  static constexpr std::uint64_t kCachedCountExpectedWithin = 20;
  // Notes one reply's usage; true once, for the reply that makes it likely
  // the engine does not report cached counts (the one to log it).
  bool count_usage(bool cached_count) noexcept {
    if (cached_count) {
      if (!cached_count_seen.load(std::memory_order_relaxed))
        cached_count_seen.store(true, std::memory_order_relaxed);
      return false;
    }
    if (replies_without_cached_count.load(std::memory_order_relaxed) >= kCachedCountExpectedWithin)
      return false;
    const std::uint64_t n =
        replies_without_cached_count.fetch_add(1, std::memory_order_relaxed) + 1;
    return n == kCachedCountExpectedWithin && !cached_count_seen.load(std::memory_order_relaxed);
  }
  bool cached_count_missing() const noexcept {
    return !cached_count_seen.load(std::memory_order_relaxed) &&
           replies_without_cached_count.load(std::memory_order_relaxed) >=
               kCachedCountExpectedWithin;
  }

  telemetry::Histogram time_to_first_byte;
  // Successful replies under way whose tokens are booked when they end: where
  // the chart's seconds stop being final (GET /api/stats, settled_until).
  telemetry::OpenRequests open_requests;

 private:
  std::vector<std::unique_ptr<ReplicaTelemetry>> replicas_;
  ReplicaTelemetry unassigned_;
};

}  // namespace lmwarden::proxy
