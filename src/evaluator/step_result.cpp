#include "evaluator/step_result.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lmwarden::evaluator {

std::optional<double> percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

std::optional<double> mean(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

std::optional<double> hit_pct(double queries, double hits) {
  if (!(queries > 0)) return std::nullopt;
  return 100.0 * hits / queries;
}

void summarize(StepResult& step) {
  const StepSamples& s = step.samples;
  if (step.duration_s > 0) {
    step.sessions_per_hour =
        static_cast<double>(step.sessions_completed) * 3600.0 / step.duration_s;
    step.output_tokens_per_min = step.output_tokens * 60.0 / step.duration_s;
  }
  step.ttfb_p50_s = percentile(s.ttfb_s, 50);
  step.ttfb_p95_s = percentile(s.ttfb_s, 95);
  step.replicas_busy = mean(s.replicas_busy);
  double queries = 0;
  double hits = 0;
  for (const auto& r : s.replicas) {
    queries += r.prefix_cache_queries;
    hits += r.prefix_cache_hits;
  }
  step.prefix_hit_pct = hit_pct(queries, hits);
  if (s.warden_sticky && s.warden_moved) {
    const double routed = *s.warden_sticky + *s.warden_moved;
    step.stayed_pct = routed > 0 ? std::optional(100.0 * *s.warden_sticky / routed) : std::nullopt;
  } else if (s.followups > 0) {
    step.stayed_pct =
        100.0 * static_cast<double>(s.followups_stayed) / static_cast<double>(s.followups);
  } else {
    step.stayed_pct = std::nullopt;
  }
}

namespace {

void append(std::vector<double>& to, const std::vector<double>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

std::optional<double> add(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b) return std::nullopt;
  return *a + *b;
}

}  // namespace

void pool(StepResult& into, const StepResult& more) {
  into.duration_s += more.duration_s;
  into.sessions_completed += more.sessions_completed;
  into.output_tokens += more.output_tokens;
  StepSamples& s = into.samples;
  const StepSamples& m = more.samples;
  append(s.ttfb_s, m.ttfb_s);
  append(s.turn_s, m.turn_s);
  append(s.output_tokens, m.output_tokens);
  append(s.replicas_busy, m.replicas_busy);
  append(s.session_end_s, m.session_end_s);
  const auto in = [](const std::vector<ReplicaStep>& replicas, int replica) {
    return std::any_of(replicas.begin(), replicas.end(),
                       [&](const ReplicaStep& x) { return x.replica == replica; });
  };
  // A replica one run has not seen: its optional counts are not the pool's.
  for (ReplicaStep& r : s.replicas) {
    if (!in(m.replicas, r.replica)) r.preemptions = r.requests = std::nullopt;
  }
  for (const ReplicaStep& r : m.replicas) {
    auto it = std::find_if(s.replicas.begin(), s.replicas.end(),
                           [&](const ReplicaStep& x) { return x.replica == r.replica; });
    if (it == s.replicas.end()) {
      s.replicas.push_back(r);
      s.replicas.back().preemptions = s.replicas.back().requests = std::nullopt;
      continue;
    }
    it->prefix_cache_queries += r.prefix_cache_queries;
    it->prefix_cache_hits += r.prefix_cache_hits;
    it->busy_polls += r.busy_polls;
    it->preemptions = add(it->preemptions, r.preemptions);
    it->requests = add(it->requests, r.requests);
  }
  s.requests_sent += m.requests_sent;
  s.requests_failed += m.requests_failed;
  if (s.first_failure.empty()) s.first_failure = m.first_failure;
  s.metrics_polls_failed += m.metrics_polls_failed;
  s.followups += m.followups;
  s.followups_stayed += m.followups_stayed;
  s.warden_sticky = add(s.warden_sticky, m.warden_sticky);
  s.warden_moved = add(s.warden_moved, m.warden_moved);
  summarize(into);
}

}  // namespace lmwarden::evaluator
