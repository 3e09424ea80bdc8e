#include "engine/kv_cache_manager.h"

#include <algorithm>
#include <cassert>
#include <span>

namespace lmwarden::engine {
namespace {

// Chain hash of a full block: its parent's hash and its token ids, so a block
// matches only when everything before it matches too (as vLLM's hash of
// (parent_hash, token_ids)).
BlockHash chain_hash(BlockHash parent, std::span<const TokenId> tokens) noexcept {
  std::uint64_t h = parent ^ 0xcbf29ce484222325ull;
  for (TokenId t : tokens) {
    h ^= t;
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

constexpr std::int32_t cdiv(std::int32_t a, std::int32_t b) noexcept {
  return (a + b - 1) / b;
}

}  // namespace

KvCacheManager::KvCacheManager(std::int32_t num_blocks, std::int32_t block_size,
                               bool enable_prefix_caching)
    : pool_(num_blocks), block_size_(block_size), prefix_caching_(enable_prefix_caching) {}

void KvCacheManager::hash_full_blocks(RequestState& req) const {
  const auto full = static_cast<std::size_t>(req.num_tokens() / block_size_);
  while (req.block_hashes.size() < full) {
    const std::size_t i = req.block_hashes.size();
    const BlockHash parent = i == 0 ? 0 : req.block_hashes[i - 1];
    const auto tokens = std::span<const TokenId>(req.tokens)
                            .subspan(i * static_cast<std::size_t>(block_size_),
                                     static_cast<std::size_t>(block_size_));
    req.block_hashes.push_back(chain_hash(parent, tokens));
  }
}

KvCacheManager::PrefixHit KvCacheManager::find_cached_prefix(RequestState& req) {
  PrefixHit hit;
  if (!prefix_caching_) return hit;
  hash_full_blocks(req);
  const std::int32_t max_blocks = (req.num_tokens() - 1) / block_size_;
  for (std::int32_t i = 0; i < max_blocks; ++i) {
    const BlockId b = pool_.lookup(req.block_hashes[static_cast<std::size_t>(i)]);
    if (b < 0) break;
    hit.blocks.push_back(b);
  }
  hit.num_tokens = static_cast<std::int32_t>(hit.blocks.size()) * block_size_;
  return hit;
}

std::int32_t KvCacheManager::probe_cached_prefix(std::span<const TokenId> tokens) const {
  if (!prefix_caching_ || tokens.empty()) return 0;
  const auto max_blocks = (static_cast<std::int32_t>(tokens.size()) - 1) / block_size_;
  const auto bs = static_cast<std::size_t>(block_size_);
  BlockHash parent = 0;
  std::int32_t hits = 0;
  for (; hits < max_blocks; ++hits) {
    parent = chain_hash(parent, tokens.subspan(static_cast<std::size_t>(hits) * bs, bs));
    if (pool_.lookup(parent) < 0) break;
  }
  return hits * block_size_;
}

bool KvCacheManager::allocate_slots(RequestState& req, std::int32_t num_new_tokens,
                                    const PrefixHit* hit) {
  const std::int32_t hit_blocks = hit ? static_cast<std::int32_t>(hit->blocks.size()) : 0;
  const std::int32_t hit_tokens = hit ? hit->num_tokens : 0;
  const std::int32_t total_tokens = req.num_computed_tokens + hit_tokens + num_new_tokens;
  const std::int32_t needed =
      cdiv(total_tokens, block_size_) - static_cast<std::int32_t>(req.blocks.size()) - hit_blocks;

  // Cached blocks idle in the free queue are counted there but are about to be
  // taken by this request, so they cannot also serve as new blocks.
  std::int32_t idle_hits = 0;
  if (hit) {
    idle_hits = static_cast<std::int32_t>(
        std::count_if(hit->blocks.begin(), hit->blocks.end(),
                      [&](BlockId b) { return pool_.ref_count(b) == 0; }));
  }
  if (needed > pool_.num_free() - idle_hits) return false;

  if (hit && hit_blocks > 0) {
    pool_.touch(hit->blocks);
    req.blocks.insert(req.blocks.end(), hit->blocks.begin(), hit->blocks.end());
    req.num_registered_blocks = static_cast<std::int32_t>(req.blocks.size());
  }
  if (needed > 0) {
    [[maybe_unused]] const bool ok = pool_.allocate(needed, req.blocks);
    assert(ok);
  }

  // Register every block that is full once this step has run, so requests
  // admitted after it can share it (vLLM caches at allocation time too).
  if (prefix_caching_) {
    hash_full_blocks(req);
    const std::int32_t full = std::min(total_tokens, req.num_tokens()) / block_size_;
    for (std::int32_t i = req.num_registered_blocks; i < full; ++i) {
      pool_.cache(req.blocks[static_cast<std::size_t>(i)],
                  req.block_hashes[static_cast<std::size_t>(i)]);
    }
    req.num_registered_blocks = std::max(req.num_registered_blocks, full);
  }
  return true;
}

void KvCacheManager::free(RequestState& req) noexcept {
  std::reverse(req.blocks.begin(), req.blocks.end());
  pool_.release(req.blocks);
  req.blocks.clear();
  req.num_registered_blocks = 0;
}

}  // namespace lmwarden::engine
