#include "engine/block_pool.h"

#include <cassert>

namespace lmwarden::engine {

BlockPool::BlockPool(std::int32_t num_blocks) : blocks_(static_cast<std::size_t>(num_blocks)) {
  for (BlockId b = 0; b < num_blocks; ++b) push_tail(b);
}

double BlockPool::usage() const noexcept {
  if (blocks_.empty()) return 0.0;
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(blocks_.size());
}

bool BlockPool::allocate(std::int32_t n, std::vector<BlockId>& out) {
  if (n > num_free_) return false;
  for (std::int32_t i = 0; i < n; ++i) {
    const BlockId b = head_;
    unlink(b);
    evict_hash(b);
    blocks_[b].ref_cnt = 1;
    out.push_back(b);
  }
  return true;
}

void BlockPool::touch(std::span<const BlockId> blocks) noexcept {
  for (BlockId b : blocks) {
    if (blocks_[b].ref_cnt++ == 0) unlink(b);
  }
}

void BlockPool::release(std::span<const BlockId> blocks) noexcept {
  for (BlockId b : blocks) {
    assert(blocks_[b].ref_cnt > 0);
    if (--blocks_[b].ref_cnt == 0) push_tail(b);
  }
}

void BlockPool::cache(BlockId block, BlockHash hash) {
  Block& blk = blocks_[block];
  if (blk.has_hash) return;
  if (by_hash_.emplace(hash, block).second) {
    blk.has_hash = true;
    blk.hash = hash;
  }
}

BlockId BlockPool::lookup(BlockHash hash) const noexcept {
  auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? -1 : it->second;
}

std::vector<BlockId> BlockPool::free_queue() const {
  std::vector<BlockId> out;
  out.reserve(static_cast<std::size_t>(num_free_));
  for (BlockId b = head_; b != -1; b = blocks_[b].next) out.push_back(b);
  return out;
}

void BlockPool::push_tail(BlockId b) noexcept {
  Block& blk = blocks_[b];
  blk.prev = tail_;
  blk.next = -1;
  if (tail_ != -1)
    blocks_[tail_].next = b;
  else
    head_ = b;
  tail_ = b;
  ++num_free_;
}

void BlockPool::unlink(BlockId b) noexcept {
  Block& blk = blocks_[b];
  if (blk.prev != -1)
    blocks_[blk.prev].next = blk.next;
  else
    head_ = blk.next;
  if (blk.next != -1)
    blocks_[blk.next].prev = blk.prev;
  else
    tail_ = blk.prev;
  blk.prev = blk.next = -1;
  --num_free_;
}

void BlockPool::evict_hash(BlockId b) noexcept {
  Block& blk = blocks_[b];
  if (!blk.has_hash) return;
  by_hash_.erase(blk.hash);
  blk.has_hash = false;
  ++evictions_;
}

}  // namespace lmwarden::engine
