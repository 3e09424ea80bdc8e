#include "sim/response_store.h"

#include <utility>

namespace lmwarden::sim {

StoredTurn::~StoredTurn() {
  // Each link that only this chain holds is emptied before it is released, so
  // its own destructor finds nothing left to release. The turns are created
  // non-const (the store only hands them out as const), so the cast is sound.
  std::shared_ptr<const StoredTurn> next = std::move(previous);
  while (next && next.use_count() == 1) {
    next = std::move(const_cast<StoredTurn&>(*next).previous);
  }
}

std::vector<engine::ChatMessage> conversation_of(const StoredTurn& turn) {
  // Turn k's messages are its instructions, turn k−1's messages, turn k−1's
  // output, then its input. Unrolled: every turn's instructions, newest
  // first; then every turn's input and output, oldest first.
  std::vector<const StoredTurn*> chain;
  for (const StoredTurn* t = &turn; t != nullptr; t = t->previous.get()) chain.push_back(t);
  std::vector<engine::ChatMessage> out;
  for (const StoredTurn* t : chain) {
    out.insert(out.end(), t->instructions.begin(), t->instructions.end());
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const StoredTurn& t = **it;
    out.insert(out.end(), t.input.begin(), t.input.end());
    // vLLM adds one assistant message per output text; an empty reply has none.
    if (!t.output.empty()) out.push_back({.role = "assistant", .content = t.output});
  }
  return out;
}

ResponseStore::ResponseStore(std::size_t limit) : limit_(limit) {}

std::shared_ptr<const StoredTurn> ResponseStore::find(const std::string& id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

void ResponseStore::add(std::string id, std::shared_ptr<const StoredTurn> turn) {
  if (limit_ == 0) return;
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    it->second = std::move(turn);
    return;
  }
  while (by_id_.size() >= limit_) {
    by_id_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(id);
  by_id_.emplace(std::move(id), std::move(turn));
}

}  // namespace lmwarden::sim
