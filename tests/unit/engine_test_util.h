// Helpers shared by the engine tests: small configurations and a driver that
// steps an engine on its virtual clock until it is idle.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "engine/engine.h"

namespace lmwarden::engine::testing {

// A tiny engine whose numbers are easy to reason about.
inline EngineConfig small_config(std::int32_t blocks = 64) {
  return EngineConfig{
      .num_gpu_blocks = blocks,
      .block_size = 16,
      .max_num_seqs = 8,
      .max_num_batched_tokens = 256,
      .max_model_len = 4096,
      .step_time = {.fixed = 0.01,
                    .per_prefill_token = 1e-4,
                    .per_context_token = 1e-6,
                    .per_sequence = 1e-3},
  };
}

// Distinct, deterministic token ids; `salt` separates prompts.
inline std::vector<TokenId> make_prompt(std::int32_t len, std::uint32_t salt = 0) {
  std::vector<TokenId> p;
  p.reserve(static_cast<std::size_t>(len));
  for (std::int32_t i = 0; i < len; ++i) p.push_back(salt * 100'003u + static_cast<TokenId>(i) + 1);
  return p;
}

struct RunLog {
  std::vector<StepResult> steps;
  std::map<RequestId, std::vector<TokenId>> tokens;
  std::map<RequestId, FinishReason> finished;
  std::map<RequestId, std::int32_t> cached;
  Seconds end = 0.0;
};

// Steps until no request is left (or max_steps), back to back from `now`.
inline RunLog run_to_idle(Engine& engine, Seconds now = 0.0, int max_steps = 100'000) {
  RunLog log;
  for (int i = 0; i < max_steps && engine.has_unfinished_requests(); ++i) {
    StepResult r = engine.step(now);
    now = r.end();
    for (const TokenOutput& o : r.outputs) {
      log.tokens[o.id].push_back(o.token);
      log.cached[o.id] = o.num_cached_tokens;
      if (o.finished) log.finished[o.id] = *o.finished;
    }
    log.steps.push_back(std::move(r));
  }
  log.end = now;
  return log;
}

}  // namespace lmwarden::engine::testing
