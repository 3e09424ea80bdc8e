#include "telemetry/counter_delta.h"

#include <algorithm>
#include <cmath>

namespace lmwarden::telemetry {

double CounterDelta::observe(double value, bool restarted) noexcept {
  if (!std::isfinite(value) || value < 0.0) return 0.0;
  if (!last_) {
    last_ = value;  // baseline: what happened before the warden started is not ours
    return 0.0;
  }
  const double added = (restarted || value < *last_) ? value : value - *last_;
  last_ = value;
  increase_ += added;
  return added;
}

std::optional<double> RankTotals::prefix_cache_hit_rate() const noexcept {
  if (!(prefix_cache_queries > 0.0)) return std::nullopt;
  return std::clamp(prefix_cache_hits / prefix_cache_queries, 0.0, 1.0);
}

void RankCounters::observe(const RankMetrics& m) noexcept {
  const auto backwards = [](const CounterDelta& c, const std::optional<double>& v) {
    return v && std::isfinite(*v) && *v >= 0.0 && c.goes_backwards(*v);
  };
  const bool restarted =
      backwards(queries_, m.prefix_cache_queries) || backwards(hits_, m.prefix_cache_hits) ||
      backwards(prompt_, m.prompt_tokens) || backwards(generation_, m.generation_tokens);
  if (restarted) ++totals_.restarts;

  const auto feed = [restarted](CounterDelta& c, const std::optional<double>& v, double& total) {
    if (!v) return;
    // A counter that has no baseline yet starts one even on a restart.
    c.observe(*v, restarted && c.has_baseline());
    total = c.increase();
  };
  feed(queries_, m.prefix_cache_queries, totals_.prefix_cache_queries);
  feed(hits_, m.prefix_cache_hits, totals_.prefix_cache_hits);
  feed(prompt_, m.prompt_tokens, totals_.prompt_tokens);
  feed(generation_, m.generation_tokens, totals_.generation_tokens);
}

}  // namespace lmwarden::telemetry
