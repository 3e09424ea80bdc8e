// Clock reads for time stamps that need no better than a few milliseconds:
// deadlines of seconds, idle stamps, the per-second token chart. The kernel's
// coarse clocks are its last tick's time, read from the vDSO without reading
// the CPU's time-stamp counter, so a read costs a few nanoseconds where a
// precise one costs tens (on a VM, more). The request path reads the clock
// about ten times per request; latencies it reports (time to first byte)
// keep the precise clocks.
//
// Each coarse clock has the epoch of its precise twin (CLOCK_MONOTONIC for
// std::chrono::steady_clock and CLOCK_REALTIME for std::chrono::system_clock
// with libstdc++), so their time points mix. A coarse read is usually less
// than one tick (`coarse_resolution()`, 1 to 10 ms with the usual kernel HZ)
// behind the precise clock, but a tickless kernel lets ticks lapse while its
// CPUs idle: on the 2-vCPU VM of docs/performance-history.md, round 15 (a 4
// ms tick), 18 % of reads taken after a short sleep lagged by 4 to 8 ms.
#pragma once

#include <chrono>
#include <ctime>

namespace lmwarden {

namespace detail {
inline std::chrono::nanoseconds to_duration(const timespec& ts) noexcept {
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

inline std::chrono::nanoseconds read_clock(clockid_t id) noexcept {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return to_duration(ts);
}
}  // namespace detail

// std::chrono::steady_clock's time, to the kernel's last tick.
inline std::chrono::steady_clock::time_point coarse_steady_now() noexcept {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          detail::read_clock(CLOCK_MONOTONIC_COARSE)));
}

// std::chrono::system_clock's time, to the kernel's last tick.
inline std::chrono::system_clock::time_point coarse_system_now() noexcept {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          detail::read_clock(CLOCK_REALTIME_COARSE)));
}

// One kernel tick: how far a coarse read usually lags the precise clock.
// A deadline computed from a coarse read that should not fall early adds
// coarse_lag_allowance().
inline std::chrono::nanoseconds coarse_resolution() noexcept {
  static const std::chrono::nanoseconds resolution = [] {
    timespec ts{};
    ::clock_getres(CLOCK_MONOTONIC_COARSE, &ts);
    return detail::to_duration(ts);
  }();
  return resolution;
}

// Two ticks: the largest lag measured (see above). A lag beyond it makes
// such a deadline fall early by the difference.
inline std::chrono::nanoseconds coarse_lag_allowance() noexcept {
  return 2 * coarse_resolution();
}

}  // namespace lmwarden
