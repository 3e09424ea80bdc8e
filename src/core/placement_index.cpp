#include "core/placement_index.h"

#include <bit>
#include <cassert>
#include <cmath>

namespace lmwarden::core {
namespace {

constexpr double kScale = 1 << 20;
// Scores beyond this all weigh the same; far above any real load, far below
// kUnavailable.
constexpr double kMaxKey = 0x1p61;

}  // namespace

PlacementIndex::PlacementIndex(int replicas)
    : leaves_(std::bit_ceil(static_cast<std::size_t>(replicas < 1 ? 1 : replicas))),
      nodes_(2 * leaves_) {
  // Padding leaves stay kUnavailable with count 0, so they never win or tie.
  for (int i = 0; i < replicas; ++i) nodes_[leaf(i)] = Node{0, 1};
  for (std::size_t n = leaves_ - 1; n >= 1; --n) nodes_[n] = merge(nodes_[2 * n], nodes_[2 * n + 1]);
}

PlacementIndex::Key PlacementIndex::key_of(double score) noexcept {
  const double scaled = std::nearbyint(score * kScale);
  if (!(scaled > 0)) return 0;  // also NaN
  return scaled >= kMaxKey ? static_cast<Key>(kMaxKey) : static_cast<Key>(scaled);
}

PlacementIndex::Node PlacementIndex::merge(const Node& a, const Node& b) noexcept {
  if (a.min < b.min) return a;
  if (b.min < a.min) return b;
  return Node{a.min, a.count + b.count};
}

void PlacementIndex::set(int replica, Key key) noexcept {
  std::size_t n = leaf(replica);
  assert(n < nodes_.size());
  if (nodes_[n].min == key) return;
  nodes_[n].min = key;
  for (n /= 2; n >= 1; n /= 2) {
    const Node merged = merge(nodes_[2 * n], nodes_[2 * n + 1]);
    if (merged.min == nodes_[n].min && merged.count == nodes_[n].count) break;  // nothing above changes
    nodes_[n] = merged;
  }
}

int PlacementIndex::nth_tied(int k) const noexcept {
  const Key m = min();
  assert(m != kUnavailable && k >= 0 && k < tied());
  std::size_t n = 1;
  while (n < leaves_) {
    const Node& left = nodes_[2 * n];
    if (left.min == m && k < left.count) {
      n = 2 * n;
    } else {
      if (left.min == m) k -= left.count;
      n = 2 * n + 1;
    }
  }
  return static_cast<int>(n - leaves_);
}

}  // namespace lmwarden::core
