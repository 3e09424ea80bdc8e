#include "net/connection_deadline.h"

#include <utility>

#include "common/coarse_clock.h"

namespace lmwarden::net {

struct ConnectionDeadline::State {
  explicit State(const Executor& executor) : timer(executor) {}
  Timer timer;
  Clock::time_point deadline = Clock::time_point::max();  // max: nothing armed
  Clock::time_point wake = Clock::time_point::max();      // the timer's expiry while waiting
  Clock::duration horizon = Clock::duration::max();       // shortest timeout armed so far
  Socket* target = nullptr;
  OnExpiry action = OnExpiry::kCancel;
  unsigned epoch = 0;  // of the wait that counts; a superseded one returns quietly
  bool waiting = false;
  bool expired = false;
  bool stopped = false;
};

ConnectionDeadline::ConnectionDeadline(const Executor& executor)
    : state_(std::make_shared<State>(executor)) {}

ConnectionDeadline::~ConnectionDeadline() {
  state_->stopped = true;
  state_->target = nullptr;
  state_->timer.cancel();
}

ConnectionDeadline::Clock::time_point ConnectionDeadline::arm(Socket& target,
                                                              Clock::duration timeout,
                                                              OnExpiry action) noexcept {
  State& s = *state_;
  // Armed a few times per request: the coarse clock, plus what it may lag
  // by, so that the deadline does not fall before now + timeout (the
  // timeout runs up to that much longer instead). Expiry is checked against
  // the precise clock (on_timer).
  const auto now = coarse_steady_now();
  s.deadline = now + coarse_lag_allowance() + timeout;
  s.target = &target;
  s.action = action;
  s.expired = false;
  if (timeout < s.horizon) s.horizon = timeout;
  if (!s.waiting || s.deadline < s.wake) schedule(state_, now);
  return s.deadline;
}

void ConnectionDeadline::arm_until(Socket& target, Clock::time_point deadline,
                                   OnExpiry action) noexcept {
  State& s = *state_;
  s.deadline = deadline;
  s.target = &target;
  s.action = action;
  s.expired = false;
  if (!s.waiting || s.deadline < s.wake) schedule(state_, coarse_steady_now());
}

void ConnectionDeadline::disarm() noexcept {
  state_->deadline = Clock::time_point::max();
  state_->target = nullptr;
}

bool ConnectionDeadline::expired() const noexcept {
  return state_->expired;
}

void ConnectionDeadline::schedule(const std::shared_ptr<State>& state,
                                  Clock::time_point now) noexcept {
  State& s = *state;
  s.wake = s.deadline - now > s.horizon ? now + s.horizon : s.deadline;
  s.timer.expires_at(s.wake);  // a wait already pending completes as superseded
  const unsigned epoch = ++s.epoch;
  s.waiting = true;
  s.timer.async_wait([state, epoch](const boost::system::error_code&) { on_timer(state, epoch); });
}

void ConnectionDeadline::on_timer(const std::shared_ptr<State>& state, unsigned epoch) noexcept {
  State& s = *state;
  if (s.stopped || epoch != s.epoch) return;
  s.waiting = false;
  if (s.deadline == Clock::time_point::max()) return;  // nothing armed: the next arm() waits again
  const auto now = Clock::now();
  if (now < s.deadline) {
    schedule(state, now);
    return;
  }
  s.expired = true;
  s.deadline = Clock::time_point::max();
  if (auto* socket = std::exchange(s.target, nullptr)) {
    boost::system::error_code ignored;
    if (s.action == OnExpiry::kClose)
      socket->close(ignored);
    else
      socket->cancel(ignored);
  }
}

}  // namespace lmwarden::net
