// Constant concurrency, closed loop (DESIGN §9): N slots, each running one
// conversation at a time. A slot sends its next turn as soon as the previous
// reply is complete (no think time: the agent is the user), and a finished
// session is replaced at once by the next unused session index, so exactly N
// conversations are always live. Both the offline evaluator and the online
// runner drive their sessions through this, so they open the same sessions in
// the same order of slots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workload/session.h"

namespace lmwarden::workload {

class ClosedLoop {
 public:
  // Slots 0..concurrency-1 start sessions first_index, first_index+1, …
  ClosedLoop(const Workload& workload, int concurrency, std::string salt,
             std::uint64_t first_index = 0);

  int concurrency() const noexcept { return static_cast<int>(slots_.size()); }
  const Conversation& conversation(int slot) const {
    return slots_[static_cast<std::size_t>(slot)];
  }

  // Records the reply to the slot's current turn. When that ended the session,
  // the slot moves on to a fresh session and this returns true.
  bool complete_turn(int slot, std::string reply);
  // Gives up on the slot's session (its request failed) and starts the next
  // one; not counted as completed.
  void abandon(int slot);

  // Seconds the slot waits before sending its next turn (the tool run after
  // the reply it just completed); 0 for a fresh session.
  double pause_before_next(int slot) const;

  std::uint64_t sessions_started() const noexcept { return next_index_ - first_index_; }
  std::uint64_t sessions_completed() const noexcept { return completed_; }

 private:
  const Workload& workload_;
  std::string salt_;
  std::uint64_t first_index_;
  std::uint64_t next_index_;
  std::uint64_t completed_ = 0;
  std::vector<Conversation> slots_;
};

}  // namespace lmwarden::workload
