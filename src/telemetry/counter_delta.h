// Counter increases since the warden started, surviving engine restarts.
//
// vLLM's counters count from the engine's start; operators want "since the
// warden started" (DESIGN §7), so the first observation is a baseline and only
// increases after it count. A counter that goes backwards means the engine
// restarted and counts from zero again: everything it now shows was counted
// after the restart, so it is added whole (Prometheus' increase() does the
// same). The result never decreases, so a hit rate built from it is never
// negative and never jumps on a restart.
//
// The engine's counters restart together, so RankCounters treats a decrease of
// any one of them as a restart of all: with hits 50 → 60 and queries 100 → 80,
// the 60 hits were all counted after the restart, not 10. A restart between two
// scrapes that leaves every counter above its previous value cannot be seen
// from the values alone; the scrape interval (1 s) makes that unlikely.
//
// Not synchronised: one scraper owns each instance; readers copy totals().
#pragma once

#include <cstdint>
#include <optional>

#include "telemetry/vllm_snapshot.h"

namespace lmwarden::telemetry {

class CounterDelta {
 public:
  // Feeds one observation; returns what it adds to increase() (>= 0). With
  // `restarted` the value counts from zero even if it did not go backwards.
  // Non-finite or negative observations are ignored.
  double observe(double value, bool restarted = false) noexcept;

  // Whether `value` would be read as a restart (the counter went backwards).
  bool goes_backwards(double value) const noexcept { return last_ && value < *last_; }

  bool has_baseline() const noexcept { return last_.has_value(); }
  double increase() const noexcept { return increase_; }

 private:
  std::optional<double> last_;
  double increase_ = 0.0;
};

struct RankTotals {
  double prefix_cache_queries = 0.0;  // tokens looked up since the warden started
  double prefix_cache_hits = 0.0;     // of which found in the cache
  double prompt_tokens = 0.0;
  double generation_tokens = 0.0;
  std::uint32_t restarts = 0;  // engine restarts seen

  // Δhits / Δqueries in [0, 1]; nullopt until some query was counted.
  std::optional<double> prefix_cache_hit_rate() const noexcept;
};

// The counters of one replica (one engine rank).
class RankCounters {
 public:
  // Feeds one scrape of this rank. Counters the scrape lacks keep their state.
  void observe(const RankMetrics& metrics) noexcept;
  const RankTotals& totals() const noexcept { return totals_; }

 private:
  CounterDelta queries_;
  CounterDelta hits_;
  CounterDelta prompt_;
  CounterDelta generation_;
  RankTotals totals_;
};

}  // namespace lmwarden::telemetry
