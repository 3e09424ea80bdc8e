#include "engine/engine_stats.h"

namespace lmwarden::engine {

void Histogram::observe(double v) noexcept {
  for (std::size_t i = 0; i < kTtftBuckets.size(); ++i) {
    if (v <= kTtftBuckets[i]) ++cumulative_[i];
  }
  ++cumulative_.back();
  ++count_;
  sum_ += v;
}

}  // namespace lmwarden::engine
