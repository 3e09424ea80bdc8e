#include "core/session_table.h"

#include <algorithm>
#include <cassert>

namespace lmwarden::core {

SessionTable::SessionTable(int replicas, std::size_t capacity, Clock::duration ttl,
                           std::uint64_t seed)
    : capacity_(capacity == 0 ? 1 : capacity),
      ttl_(ttl),
      active_window_(ttl),
      index_(0, SaltedHash{seed}),
      live_(static_cast<std::size_t>(replicas), 0),
      active_(static_cast<std::size_t>(replicas), 0) {
  index_.reserve(std::min<std::size_t>(capacity_, 1 << 16));
}

std::optional<int> SessionTable::find(std::uint64_t key, TimePoint now) {
  expire(now);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  // Past the TTL and not yet erased (expire's bound, below): gone.
  if (slots_[it->second].last_seen < (now - ttl_).time_since_epoch().count()) {
    erase(it->second);
    return std::nullopt;
  }
  touch_slot(it->second, now);
  return slots_[it->second].home;
}

void SessionTable::touch(std::uint64_t key, int home, TimePoint now) {
  const auto it = index_.find(key);
  if (it == index_.end()) return assign(key, home, now);  // which ages the table
  age(now);
  touch_slot(it->second, now);
}

void SessionTable::assign(std::uint64_t key, int home, TimePoint now) {
  assert(home >= 0 && static_cast<std::size_t>(home) < live_.size());
  age(now);
  auto it = index_.find(key);
  if (it != index_.end()) {
    Slot& slot = slots_[it->second];
    if (slot.home != home) {
      add_live(slot.home, -1);
      add_live(home, +1);
      if (slot.active) {
        add_active(slot.home, -1);
        add_active(home, +1);
      }
      slot.home = home;
    }
    touch_slot(it->second, now);
    return;
  }
  if (index_.size() >= capacity_) erase(tail_);
  std::uint32_t s;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
  } else {
    s = static_cast<std::uint32_t>(slots_.size());
    slots_.push_back({});
  }
  slots_[s] = Slot{key, now.time_since_epoch().count(), home, kNil, kNil, true};
  push_front(s);
  if (active_tail_ == kNil) active_tail_ = s;
  // The flat map rehashes in place, all at once, when erasures have used up
  // its slack. At its own 0.875 load a full table of 100k churning
  // conversations did that every ~40k new ones, 8 ms each under the router's
  // lock; kept at most 0.6 full it did not in 5 × 100k (and 5 × 1M) churns.
  if (index_.size() + 1 > index_.bucket_count() * 3 / 5) index_.reserve(index_.bucket_count() + 1);
  index_.emplace(key, s);
  add_live(home, +1);
  add_active(home, +1);
}

void SessionTable::expire(TimePoint now) {
  const std::int64_t cutoff = (now - ttl_).time_since_epoch().count();
  for (std::size_t n = 0;
       n < kMostExpiredPerCall && tail_ != kNil && slots_[tail_].last_seen < cutoff; ++n)
    erase(tail_);
  age(now);
}

void SessionTable::age(TimePoint now) noexcept {
  const std::int64_t cutoff = (now - active_window_).time_since_epoch().count();
  while (active_tail_ != kNil && slots_[active_tail_].last_seen < cutoff) {
    Slot& slot = slots_[active_tail_];
    slot.active = false;
    add_active(slot.home, -1);
    active_tail_ = slot.prev;
  }
}

void SessionTable::touch_slot(std::uint32_t s, TimePoint now) noexcept {
  Slot& slot = slots_[s];
  slot.last_seen = now.time_since_epoch().count();
  if (!slot.active) {  // past the cursor: it joins the active ones at the front
    slot.active = true;
    add_active(slot.home, +1);
    if (active_tail_ == kNil) active_tail_ = s;
  } else if (active_tail_ == s && slot.prev != kNil) {
    active_tail_ = slot.prev;  // the next least recent active one
  }
  if (head_ == s) return;
  unlink(s);
  push_front(s);
}

void SessionTable::unlink(std::uint32_t s) noexcept {
  Slot& slot = slots_[s];
  if (slot.prev != kNil) slots_[slot.prev].next = slot.next; else head_ = slot.next;
  if (slot.next != kNil) slots_[slot.next].prev = slot.prev; else tail_ = slot.prev;
  slot.prev = slot.next = kNil;
}

void SessionTable::push_front(std::uint32_t s) noexcept {
  Slot& slot = slots_[s];
  slot.prev = kNil;
  slot.next = head_;
  if (head_ != kNil) slots_[head_].prev = s;
  head_ = s;
  if (tail_ == kNil) tail_ = s;
}

void SessionTable::erase(std::uint32_t s) {
  assert(s != kNil);
  if (slots_[s].active) {
    add_active(slots_[s].home, -1);
    if (active_tail_ == s) active_tail_ = slots_[s].prev;
  }
  unlink(s);
  add_live(slots_[s].home, -1);
  index_.erase(slots_[s].key);
  free_.push_back(s);
}

void SessionTable::add_live(int replica, int delta) noexcept {
  live_[static_cast<std::size_t>(replica)] += delta;
}

void SessionTable::add_active(int replica, int delta) noexcept {
  active_[static_cast<std::size_t>(replica)] += delta;
  if (listener_) listener_->live_changed(replica);
}

}  // namespace lmwarden::core
