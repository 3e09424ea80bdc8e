// Per-request view of the block pool, after vLLM V1's KVCacheManager: finds a
// request's cached prefix, allocates the slots a step needs, registers full
// blocks for prefix caching and frees a request's blocks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request_state.h"

namespace lmwarden::engine {

class KvCacheManager {
 public:
  KvCacheManager(std::int32_t num_blocks, std::int32_t block_size, bool enable_prefix_caching);

  struct PrefixHit {
    std::vector<BlockId> blocks;
    std::int32_t num_tokens = 0;
  };

  // The longest run of the request's full blocks found in the cache, chained
  // from the first block. At most num_tokens − 1 tokens: the last token must be
  // computed to produce logits, so a fully cached prompt still recomputes its
  // last block. Nothing is taken yet (allocate_slots does that).
  PrefixHit find_cached_prefix(RequestState& req);

  // How many tokens of `tokens` a request would find cached right now (same
  // rule as find_cached_prefix), without touching anything. For probes: tests,
  // prefix-aware placement experiments.
  std::int32_t probe_cached_prefix(std::span<const TokenId> tokens) const;

  // Makes room for `num_new_tokens` more tokens after the computed ones (and
  // after `hit`, when the request is being admitted). False, with nothing
  // changed, when the free queue is too short; true after taking the hit's
  // blocks, allocating new ones and caching every block that the step fills.
  bool allocate_slots(RequestState& req, std::int32_t num_new_tokens, const PrefixHit* hit);

  // Returns the request's blocks to the free queue, tail block first.
  void free(RequestState& req) noexcept;

  std::int32_t block_size() const noexcept { return block_size_; }
  const BlockPool& pool() const noexcept { return pool_; }
  double usage() const noexcept { return pool_.usage(); }

 private:
  // Extends req.block_hashes over every full block of req.tokens.
  void hash_full_blocks(RequestState& req) const;

  BlockPool pool_;
  std::int32_t block_size_;
  bool prefix_caching_;
};

}  // namespace lmwarden::engine
