// The KV cache's physical blocks, after vLLM V1's BlockPool.
//
// Every block is either in use (ref_cnt > 0) or in the free queue. A freed
// block keeps its contents and its hash, so a later request with the same
// prefix can take it back ("touch") while it waits in the queue. The queue is
// an LRU: freed blocks are appended at the tail, new allocations pop from the
// head, and popping a block evicts its hash — the least recently freed cached
// block is the first to be forgotten.
//
// The queue is an intrusive doubly linked list over block ids, so touch
// (removal from the middle), free and allocate are all O(1).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/types.h"

namespace lmwarden::engine {

class BlockPool {
 public:
  explicit BlockPool(std::int32_t num_blocks);

  std::int32_t num_blocks() const noexcept { return static_cast<std::int32_t>(blocks_.size()); }
  std::int32_t num_free() const noexcept { return num_free_; }
  // vLLM's kv_cache_usage_perc: the share of blocks held by requests.
  double usage() const noexcept;

  // Pops n blocks from the head of the free queue (evicting their hashes) and
  // gives them ref_cnt 1. False, with nothing changed, when fewer are free.
  bool allocate(std::int32_t n, std::vector<BlockId>& out);

  // Takes references on cached blocks found by lookup; those with ref_cnt 0
  // leave the free queue.
  void touch(std::span<const BlockId> blocks) noexcept;

  // Drops one reference on each block, in the order given; blocks reaching 0
  // are appended to the free queue in that order (callers pass a request's
  // blocks tail first, so its shared head outlives its private tail).
  void release(std::span<const BlockId> blocks) noexcept;

  // Registers a full block's chain hash so later prompts can find it. A hash
  // already held by another block keeps pointing there (the duplicate is
  // simply not shared).
  void cache(BlockId block, BlockHash hash);
  // The block cached under that hash, or -1.
  BlockId lookup(BlockHash hash) const noexcept;

  std::int32_t ref_count(BlockId b) const noexcept { return blocks_[b].ref_cnt; }
  bool is_cached(BlockId b) const noexcept { return blocks_[b].has_hash; }
  std::int64_t num_cached() const noexcept { return static_cast<std::int64_t>(by_hash_.size()); }
  std::int64_t num_evictions() const noexcept { return evictions_; }

  // The free queue from head (next to be evicted) to tail; for tests.
  std::vector<BlockId> free_queue() const;

 private:
  struct Block {
    std::int32_t ref_cnt = 0;
    BlockId prev = -1;
    BlockId next = -1;
    bool has_hash = false;
    BlockHash hash = 0;
  };

  void push_tail(BlockId b) noexcept;
  void unlink(BlockId b) noexcept;
  void evict_hash(BlockId b) noexcept;

  std::vector<Block> blocks_;
  BlockId head_ = -1;
  BlockId tail_ = -1;
  std::int32_t num_free_ = 0;
  std::int64_t evictions_ = 0;
  std::unordered_map<BlockHash, BlockId> by_hash_;
};

}  // namespace lmwarden::engine
