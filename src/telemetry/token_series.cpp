#include "telemetry/token_series.h"

#include <algorithm>
#include <limits>

namespace lmwarden::telemetry {
namespace {

std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {
  const std::int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

std::int64_t unix_seconds(WallTime t) noexcept {
  return std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count();
}

// Counts per slot are 32-bit (4 billion tokens per 10 s per replica is far
// beyond any engine); saturate rather than wrap should a caller misreport.
void saturating_add(std::uint32_t& slot, std::uint64_t v) noexcept {
  const std::uint64_t sum = std::uint64_t{slot} + v;
  slot = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(sum, std::numeric_limits<std::uint32_t>::max()));
}

}  // namespace

TokenCounts& TokenCounts::operator+=(const TokenCounts& o) noexcept {
  cached += o.cached;
  computed += o.computed;
  completion += o.completion;
  return *this;
}

std::optional<double> TokenWindow::cache_hit_ratio() const noexcept {
  if (total.prompt() == 0) return std::nullopt;
  return static_cast<double>(total.cached) / static_cast<double>(total.prompt());
}

void TokenWindow::add(const TokenWindow& other) {
  total += other.total;
  if (buckets.empty()) {  // an empty accumulator takes the first window's shape
    step = other.step;
    buckets = other.buckets;
    return;
  }
  if (other.step != step) return;
  const std::int64_t first = buckets.front().start_unix_s;
  const std::int64_t step_s = step.count();
  for (const TokenBucket& b : other.buckets) {
    const std::int64_t i = floor_div(b.start_unix_s - first, step_s);
    if (i >= 0 && static_cast<std::size_t>(i) < buckets.size()) buckets[i].tokens += b.tokens;
  }
}

void TokenSeries::Ring::add(std::int64_t unix_s, const TokenCounts& tokens) noexcept {
  const std::int64_t index = floor_div(unix_s, resolution_s);
  const auto n = static_cast<std::int64_t>(slots.size());
  Slot& slot = slots[static_cast<std::size_t>(((index % n) + n) % n)];
  if (slot.index > index) return;  // the slot already moved on to newer time
  if (slot.index != index) slot = Slot{.index = index};
  saturating_add(slot.cached, tokens.cached);
  saturating_add(slot.computed, tokens.computed);
  saturating_add(slot.completion, tokens.completion);
}

// Sum over slots whose interval starts in [from, to).
TokenCounts TokenSeries::Ring::sum(std::int64_t from_unix_s,
                                   std::int64_t to_unix_s) const noexcept {
  TokenCounts out;
  const auto n = static_cast<std::int64_t>(slots.size());
  const std::int64_t first = floor_div(from_unix_s, resolution_s);
  const std::int64_t last = floor_div(to_unix_s - 1, resolution_s);
  for (std::int64_t index = first; index <= last; ++index) {
    const Slot& slot = slots[static_cast<std::size_t>(((index % n) + n) % n)];
    if (slot.index != index) continue;
    out.cached += slot.cached;
    out.computed += slot.computed;
    out.completion += slot.completion;
  }
  return out;
}

TokenSeries::TokenSeries()
    : fine_{kFineResolution.count(), std::vector<Slot>(kFineSlots)},
      coarse_{kCoarseResolution.count(), std::vector<Slot>(kCoarseSlots)} {}

void TokenSeries::add_locked(std::int64_t unix_s, const TokenCounts& tokens) noexcept {
  fine_.add(unix_s, tokens);
  coarse_.add(unix_s, tokens);
}

void TokenSeries::record(WallTime at, const TokenCounts& tokens) noexcept {
  if (tokens == TokenCounts{}) return;
  std::lock_guard lock(mutex_);
  add_locked(unix_seconds(at), tokens);
}

void TokenSeries::record_request(WallTime first_token, WallTime end,
                                 const TokenCounts& tokens) noexcept {
  const std::int64_t first_s = unix_seconds(first_token);
  const std::int64_t end_s = std::max(first_s, unix_seconds(end));
  // A request longer than the fine ring spreads over its last hour only: the
  // seconds before would be overwritten at 1 s anyway, and the loop stays short.
  const std::int64_t span =
      std::min<std::int64_t>(end_s - first_s + 1, static_cast<std::int64_t>(kFineSlots));
  const std::int64_t spread_from = end_s - span + 1;
  const std::uint64_t per_second = tokens.completion / static_cast<std::uint64_t>(span);
  std::uint64_t remainder = tokens.completion % static_cast<std::uint64_t>(span);

  std::lock_guard lock(mutex_);
  add_locked(first_s, TokenCounts{.cached = tokens.cached, .computed = tokens.computed});
  for (std::int64_t s = spread_from; s < spread_from + span; ++s) {
    // The remainder goes to the first seconds, one token each, so the spread
    // adds up exactly.
    const std::uint64_t extra = remainder > 0 ? 1 : 0;
    remainder -= extra;
    if (per_second + extra > 0) add_locked(s, TokenCounts{.completion = per_second + extra});
  }
}

TokenWindow TokenSeries::query(WallTime now, std::chrono::seconds window,
                               std::chrono::seconds step) const {
  window = std::clamp(window, std::chrono::seconds{1}, kMaxWindow);
  const bool fine = window <= kFineResolution * kFineSlots;
  const Ring& ring = fine ? fine_ : coarse_;
  const std::int64_t res = ring.resolution_s;
  const std::int64_t step_s = std::max<std::int64_t>(1, (step.count() + res - 1) / res) * res;
  const std::int64_t count = (window.count() + step_s - 1) / step_s;
  const std::int64_t last_start = floor_div(unix_seconds(now), step_s) * step_s;
  const std::int64_t first_start = last_start - (count - 1) * step_s;

  TokenWindow out;
  out.step = std::chrono::seconds{step_s};
  out.buckets.reserve(static_cast<std::size_t>(count));
  std::lock_guard lock(mutex_);
  for (std::int64_t start = first_start; start <= last_start; start += step_s) {
    TokenBucket& b = out.buckets.emplace_back(TokenBucket{.start_unix_s = start});
    b.tokens = ring.sum(start, start + step_s);
    out.total += b.tokens;
  }
  return out;
}

}  // namespace lmwarden::telemetry
