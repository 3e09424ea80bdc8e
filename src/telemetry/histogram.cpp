#include "telemetry/histogram.h"

#include <algorithm>
#include <cmath>

namespace lmwarden::telemetry {

Histogram::Histogram(std::span<const double> upper_bounds) {
  for (double b : upper_bounds) {
    if (std::isfinite(b) && (bounds_.empty() || b > bounds_.back())) bounds_.push_back(b);
  }
  counts_ = std::make_unique<std::atomic<std::uint64_t>[]>(bounds_.size() + 1);
}

void Histogram::observe(double value) noexcept {
  if (std::isnan(value)) return;
  // First bucket whose bound is >= value ("le"), or +Inf.
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  counts_[static_cast<std::size_t>(it - bounds_.begin())].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

HistogramSnapshot Histogram::snapshot() const {
  HistogramSnapshot out;
  out.upper_bounds = bounds_;
  out.cumulative_counts.resize(bounds_.size() + 1);
  std::uint64_t running = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    out.cumulative_counts[i] = running;
  }
  out.sum = sum_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace lmwarden::telemetry
