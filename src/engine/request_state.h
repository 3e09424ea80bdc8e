// One request inside an engine: its tokens, how far the engine has computed
// them, the KV blocks it holds and its timing.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/types.h"

namespace lmwarden::engine {

enum class RequestStatus : std::uint8_t { kWaiting, kRunning, kPreempted, kFinished };

struct RequestState {
  RequestId id = 0;
  // Prompt followed by the tokens generated so far.
  std::vector<TokenId> tokens;
  std::int32_t num_prompt_tokens = 0;
  // Planned output: this many tokens, then `finish`.
  std::int32_t target_output_tokens = 0;
  FinishReason finish = FinishReason::kLength;
  std::uint64_t output_seed = 0;

  RequestStatus status = RequestStatus::kWaiting;
  // Tokens whose KV is computed (or taken from the cache). Reset to 0 when the
  // request is preempted: vLLM V1 preempts by recompute.
  std::int32_t num_computed_tokens = 0;
  // Prompt tokens served from the prefix cache at the first scheduling; what
  // usage reports as cached_tokens. -1 until first scheduled.
  std::int32_t num_cached_tokens = -1;
  std::int32_t num_preemptions = 0;

  // KV blocks in token order, and the chain hashes of the full blocks of
  // `tokens` computed so far (block_hashes.size() ≤ tokens.size() / block size).
  std::vector<BlockId> blocks;
  std::vector<BlockHash> block_hashes;
  // How many leading blocks are registered in the pool's hash table.
  std::int32_t num_registered_blocks = 0;

  Seconds arrival_time = 0.0;
  std::optional<Seconds> first_token_time;
  // Order of admission to the running set; larger is newer (preempted first).
  std::uint64_t admission_seq = 0;

  std::int32_t num_tokens() const noexcept { return static_cast<std::int32_t>(tokens.size()); }
  std::int32_t num_output_tokens() const noexcept { return num_tokens() - num_prompt_tokens; }
};

}  // namespace lmwarden::engine
