// How long one engine step takes, from the shape of the batch it runs.
#pragma once

#include <cstdint>

#include "engine/types.h"

namespace lmwarden::engine {

// What a step computes; enough to price it.
struct BatchShape {
  std::int64_t prefill_tokens = 0;         // prompt (or recomputed) tokens run this step
  std::int64_t decode_context_tokens = 0;  // KV tokens read by the decoding sequences
  std::int32_t num_seqs = 0;               // sequences in the batch (prefill and decode)
  bool empty() const noexcept { return num_seqs == 0; }
};

// step = t0 + a·prefill_tokens + b·Σ decode context + c·seqs.
//
// Why this shape: a decode step on a small model is memory-bound. It streams
// every weight once (t0, ≈ weight bytes / bandwidth plus launch overhead) and
// each decoding sequence streams its own KV cache (b, ≈ KV bytes per token /
// bandwidth). Prefill is compute-bound (a, ≈ 2·params FLOP per token / achieved
// FLOP/s); sampling and bookkeeping grow with the batch (c). The attention
// FLOPs of long prefills are left out: at the context lengths of coding agents
// (≤ 40k) they add well under the spread between real runs.
struct StepTimeModel {
  Seconds fixed = 0.0;              // t0
  Seconds per_prefill_token = 0.0;  // a
  Seconds per_context_token = 0.0;  // b
  Seconds per_sequence = 0.0;       // c

  Seconds step_time(const BatchShape& shape) const noexcept {
    if (shape.empty()) return 0.0;
    return fixed + per_prefill_token * static_cast<double>(shape.prefill_tokens) +
           per_context_token * static_cast<double>(shape.decode_context_tokens) +
           per_sequence * static_cast<double>(shape.num_seqs);
  }
};

}  // namespace lmwarden::engine
