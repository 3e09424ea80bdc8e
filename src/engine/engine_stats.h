// What one engine counts, under the names of the vLLM metrics it feeds.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "engine/types.h"

namespace lmwarden::engine {

// vLLM's buckets for vllm:time_to_first_token_seconds.
inline constexpr std::array<double, 22> kTtftBuckets{
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};

class Histogram {
 public:
  void observe(double v) noexcept;
  // Cumulative count per bucket of kTtftBuckets (the `le` series), then +Inf.
  std::span<const std::uint64_t> cumulative() const noexcept { return cumulative_; }
  std::uint64_t count() const noexcept { return count_; }
  double sum() const noexcept { return sum_; }

 private:
  std::array<std::uint64_t, kTtftBuckets.size() + 1> cumulative_{};
  std::uint64_t count_ = 0;
  double sum_ = 0.0;
};

struct EngineCounters {
  std::uint64_t prompt_tokens = 0;      // vllm:prompt_tokens_total (at first token)
  std::uint64_t generation_tokens = 0;  // vllm:generation_tokens_total
  // vllm:prefix_cache_queries_total / _hits_total, in tokens, counted when a
  // request is first admitted (re-admissions after preemption are not queries).
  std::uint64_t prefix_cache_queries = 0;
  std::uint64_t prefix_cache_hits = 0;
  std::uint64_t num_preemptions = 0;                        // vllm:num_preemptions_total
  std::array<std::uint64_t, kNumFinishReasons> finished{};  // vllm:request_success_total
  Histogram time_to_first_token;                            // vllm:time_to_first_token_seconds
  std::uint64_t num_steps = 0;
  Seconds busy_time = 0.0;  // sum of step durations

  std::uint64_t finished_with(FinishReason r) const noexcept {
    return finished[static_cast<std::size_t>(r)];
  }
};

}  // namespace lmwarden::engine
