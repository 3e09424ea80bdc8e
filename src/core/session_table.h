// Conversation → home replica, bounded and expiring.
//
// An open-addressing hash map (Boost's unordered_flat_map) from the
// conversation's 64-bit id hash to a slot, and the slots threaded on an
// intrusive doubly linked list in order of last use. Lookups
// and updates are O(1); expiry pops from the least-recent end while entries
// are older than the idle TTL; when the table is full the least recently used
// conversation is forgotten (it will be placed afresh if it comes back, which
// costs one cold prefill, never a failure). About 65 bytes per conversation.
//
// Of the live conversations, those used within the active window (at most
// the TTL) are counted apart, per replica: they stand for the next turns
// about to arrive, where one idle for most of the TTL does not. A cursor
// marks the least recently used of them on the list; time moves it towards
// the most recent end, one conversation at a time, so keeping the counts is
// O(1) amortised.
//
// The map hashes each key xor a seed (by default process_hash_seed()) before
// its own bit mixing. Keys are stable_hash values of ids the client chooses,
// and anyone can compute those: unsalted, a client could pick ids whose keys
// share one probe group and make every find and assign under the model's
// lock walk that group (8000 such keys: over 100 times slower each, in a
// trial). The salt costs one xor; nothing outside the map sees it, so the
// keys themselves stay stable for logs and the offline evaluator.
//
// Not thread-safe: the owner (a Router) is used under one lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "common/hash.h"

namespace lmwarden::core {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

class SessionTable {
 public:
  // Told whenever a replica's count of active conversations changes.
  class Listener {
   public:
    virtual void live_changed(int replica) noexcept = 0;

   protected:
    ~Listener() = default;
  };

  // `seed` salts the map's hash of the keys (tests pass their own).
  SessionTable(int replicas, std::size_t capacity, Clock::duration ttl,
               std::uint64_t seed = process_hash_seed());
  void set_listener(Listener* listener) noexcept { listener_ = listener; }

  // The home of a live conversation, touching it; nullopt when unknown/expired.
  std::optional<int> find(std::uint64_t key, TimePoint now);
  // Sets (or moves) a conversation's home and touches it.
  void assign(std::uint64_t key, int home, TimePoint now);
  // Touches a conversation without moving it; one forgotten meanwhile (its
  // request outlived the TTL, or the table was full) comes back with `home`.
  void touch(std::uint64_t key, int home, TimePoint now);
  // Forgets conversations idle longer than the TTL, at most
  // kMostExpiredPerCall of them (the rest at the next calls; find() takes
  // one past the TTL for gone meanwhile), and counts those idle longer than
  // the active window as no longer active. The bound is for a reload that
  // shortens the TTL, which leaves a whole table past it: a million
  // conversations took 85 ms in one call, under the model's lock.
  void expire(TimePoint now);
  static constexpr std::size_t kMostExpiredPerCall = 4096;
  // Each conversation, least recently used first: f(key, home, last_seen).
  // Assigning them in this order to another table, each at its last_seen,
  // keeps their order there (and so which are forgotten first).
  template <class F>
  void for_each_oldest_first(F&& f) const {
    for (std::uint32_t s = tail_; s != kNil; s = slots_[s].prev)
      f(slots_[s].key, static_cast<int>(slots_[s].home),
        TimePoint{Clock::duration{slots_[s].last_seen}});
  }

  std::size_t size() const noexcept { return index_.size(); }
  std::size_t capacity() const noexcept { return capacity_; }
  int live(int replica) const noexcept { return live_[static_cast<std::size_t>(replica)]; }
  // Live conversations used within the active window (as of the last call
  // given a time).
  int active(int replica) const noexcept { return active_[static_cast<std::size_t>(replica)]; }
  void set_ttl(Clock::duration ttl) noexcept { ttl_ = ttl; }
  // The active window; the TTL until set. A longer one counts conversations
  // already past the shorter again from their next use.
  void set_active_window(Clock::duration window) noexcept { active_window_ = window; }
  Clock::duration ttl() const noexcept { return ttl_; }
  // What the map hashes for `key`, before its own bit mixing: `key` salted.
  std::size_t index_hash(std::uint64_t key) const noexcept { return index_.hash_function()(key); }

 private:
  static constexpr std::uint32_t kNil = UINT32_MAX;
  // Not marked avalanching, so the map still mixes the result (xmx).
  struct SaltedHash {
    std::uint64_t seed = 0;
    std::size_t operator()(std::uint64_t key) const noexcept {
      return static_cast<std::size_t>(key ^ seed);
    }
  };
  struct Slot {
    std::uint64_t key;
    std::int64_t last_seen;  // steady clock ticks
    std::int32_t home;
    std::uint32_t prev;  // towards the most recent
    std::uint32_t next;  // towards the least recent
    bool active;         // counted in active_
  };
  // The flag sits in what was padding: memory per conversation is as before.
  static_assert(sizeof(Slot) == 32);

  void touch_slot(std::uint32_t s, TimePoint now) noexcept;
  void unlink(std::uint32_t s) noexcept;
  void push_front(std::uint32_t s) noexcept;
  void erase(std::uint32_t s);
  void add_live(int replica, int delta) noexcept;
  void add_active(int replica, int delta) noexcept;
  // Counts the slots used before the active window as no longer active.
  void age(TimePoint now) noexcept;

  std::size_t capacity_;
  Clock::duration ttl_;
  Clock::duration active_window_;
  boost::unordered_flat_map<std::uint64_t, std::uint32_t, SaltedHash> index_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;
  std::vector<int> live_;
  std::vector<int> active_;
  // The least recently used active slot: it and every slot towards head_
  // are active, every slot past it is not.
  std::uint32_t active_tail_ = kNil;
  std::uint32_t head_ = kNil;  // most recently used
  std::uint32_t tail_ = kNil;  // least recently used
  Listener* listener_ = nullptr;
};

}  // namespace lmwarden::core
