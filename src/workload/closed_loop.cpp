#include "workload/closed_loop.h"

#include <cassert>

namespace lmwarden::workload {

ClosedLoop::ClosedLoop(const Workload& workload, int concurrency, std::string salt,
                       std::uint64_t first_index)
    : workload_(workload),
      salt_(std::move(salt)),
      first_index_(first_index),
      next_index_(first_index) {
  assert(concurrency >= 1);
  slots_.reserve(static_cast<std::size_t>(concurrency));
  for (int s = 0; s < concurrency; ++s)
    slots_.emplace_back(workload_.session(next_index_++, salt_));
}

bool ClosedLoop::complete_turn(int slot, std::string reply) {
  Conversation& c = slots_[static_cast<std::size_t>(slot)];
  assert(!c.done());
  c.add_reply(std::move(reply));
  if (!c.done()) return false;
  ++completed_;
  c = Conversation(workload_.session(next_index_++, salt_));
  return true;
}

double ClosedLoop::pause_before_next(int slot) const {
  const Conversation& c = slots_[static_cast<std::size_t>(slot)];
  const std::int32_t t = c.next_turn();
  if (t == 0) return 0.0;
  const auto& pauses = c.session().pauses;
  return static_cast<std::size_t>(t - 1) < pauses.size() ? pauses[static_cast<std::size_t>(t - 1)]
                                                         : 0.0;
}

void ClosedLoop::abandon(int slot) {
  slots_[static_cast<std::size_t>(slot)] = Conversation(workload_.session(next_index_++, salt_));
}

}  // namespace lmwarden::workload
