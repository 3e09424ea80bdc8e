#include "telemetry/open_requests.h"

#include <chrono>

namespace lmwarden::telemetry {

namespace {
std::int64_t unix_seconds(WallTime t) noexcept {
  return std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count();
}
}  // namespace

std::size_t OpenRequests::slot(std::int64_t unix_s) noexcept {
  constexpr auto n = static_cast<std::int64_t>(kSlots);
  return static_cast<std::size_t>(((unix_s % n) + n) % n);
}

std::int64_t OpenRequests::open(WallTime first_byte) noexcept {
  const std::int64_t s = unix_seconds(first_byte);
  counts_[slot(s)].fetch_add(1, std::memory_order_relaxed);
  return s;
}

void OpenRequests::close(std::int64_t unix_s) noexcept {
  counts_[slot(unix_s)].fetch_sub(1, std::memory_order_release);
}

OpenRequests::Snapshot OpenRequests::snapshot(WallTime now) const noexcept {
  Snapshot out;
  const std::int64_t last = unix_seconds(now);
  // Oldest first, so the first second with a count is the oldest open one.
  for (std::int64_t s = last - static_cast<std::int64_t>(kSlots) + 1; s <= last; ++s) {
    const std::uint32_t n = counts_[slot(s)].load(std::memory_order_acquire);
    if (n == 0) continue;
    if (!out.oldest_unix_s) out.oldest_unix_s = s;
    out.count += n;
  }
  return out;
}

}  // namespace lmwarden::telemetry
