// One deadline per client connection, covering whichever phase the connection
// is in: the idle wait between requests, reading a request, and the upstream
// exchange a request is waiting on.
//
// Why not a timer per phase: arming an Asio timer that becomes the earliest of
// its io_context moves the kernel timer (timerfd_settime, a system call), and
// racing a read against a timer costs the awaitable operators' allocations.
// Per request that was about two system calls. Here one steady_timer per
// connection is armed rarely, and a phase only writes a time point:
//
//   - arm(socket, timeout) sets deadline = now + timeout. The timer is moved
//     only when the new deadline falls before the timer's expiry.
//   - When the timer is (re)armed, its expiry is min(deadline, now + shortest
//     timeout armed so far on this connection). Any later arm(), being at
//     least that shortest timeout away, then lands at or after the expiry, so
//     the timer is not moved again while timeouts keep their usual lengths.
//   - When the timer fires early it checks the real deadline and re-arms for
//     the rest: a connection wakes about once per shortest timeout (seconds to
//     minutes), not once per request.
//
// On expiry the armed socket is cancelled (client reads, so that a 408 can
// still be written) or closed (upstream connections: every later operation on
// it fails at once, like Beast's tcp_stream timeout), and expired() turns true
// until the next arm(). Callers check expired() before each read they start and
// map an aborted operation to a timeout when it is set.
//
// Single-threaded: use it only from its connection's io_context thread.
#pragma once

#include <chrono>
#include <memory>

#include "net/executor.h"

namespace lmwarden::net {

class ConnectionDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  enum class OnExpiry { kCancel, kClose };

  explicit ConnectionDeadline(const Executor& executor);
  ~ConnectionDeadline();
  ConnectionDeadline(const ConnectionDeadline&) = delete;
  ConnectionDeadline& operator=(const ConnectionDeadline&) = delete;

  // `target` must stay open until disarm() or the next arm(). Returns the
  // deadline armed (for arm_until, to arm what is left of it later).
  Clock::time_point arm(Socket& target, Clock::duration timeout,
                        OnExpiry action = OnExpiry::kCancel) noexcept;
  // The same with a deadline in time, for what is left of a timeout armed
  // before: it does not count as a timeout of that length, so a rest near
  // zero does not make the timer wake at once for the connection's life.
  void arm_until(Socket& target, Clock::time_point deadline,
                 OnExpiry action = OnExpiry::kCancel) noexcept;
  void disarm() noexcept;
  bool expired() const noexcept;

 private:
  struct State;
  static void schedule(const std::shared_ptr<State>& state, Clock::time_point now) noexcept;
  static void on_timer(const std::shared_ptr<State>& state, unsigned epoch) noexcept;

  // Shared with the pending wait, which may complete after this object is gone.
  std::shared_ptr<State> state_;
};

}  // namespace lmwarden::net
