// A Prometheus histogram with fixed buckets, observed lock-free from any
// thread: for lmwarden_time_to_first_byte_seconds (DESIGN §7.1).
//
// Buckets hold per-bucket counts (atomics, relaxed); snapshot() accumulates
// them, so _count always equals the +Inf bucket. _sum is updated separately
// and may lag the counts by the observations in progress, as in every
// Prometheus client library.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace lmwarden::telemetry {

// Time to first byte of an LLM reply: from tens of milliseconds (a cached
// prefix, an idle engine) to minutes (a long prefill behind a queue).
inline constexpr std::array<double, 14> kTimeToFirstByteBuckets = {
    0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320};

struct HistogramSnapshot {
  std::vector<double> upper_bounds;              // finite, ascending; +Inf implied
  std::vector<std::uint64_t> cumulative_counts;  // one per bound, then +Inf
  double sum = 0.0;
  std::uint64_t count() const noexcept {
    return cumulative_counts.empty() ? 0 : cumulative_counts.back();
  }
};

class Histogram {
 public:
  // `upper_bounds` must be finite and strictly ascending (checked: others are dropped).
  explicit Histogram(std::span<const double> upper_bounds = kTimeToFirstByteBuckets);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // NaN is ignored; negative values land in the first bucket.
  void observe(double value) noexcept;
  HistogramSnapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<double> sum_{0.0};
};

}  // namespace lmwarden::telemetry
