// The replicas' load scores, kept so that the least-loaded replica is found
// without scanning them all.
//
// A new conversation, an anonymous request and a spill each need "the healthy
// replica with the lowest score" (load_score.h). Scanning 512 replicas costs
// microseconds per decision; the scores change only when something happens to
// one replica (a request starts or ends there, a conversation is placed on it
// or forgotten, a scrape, a health change), so they are kept in a min-tree
// instead: a change costs O(log replicas), the minimum is at the root, and the
// k-th replica among those tied at the minimum (in index order, so the tie
// breaker sees the same candidates as a scan would) is one descent.
//
// Scores are compared as fixed-point integers (1/2^20 units, about 1e-6):
// two scores closer than that are a tie. A replica that must not be chosen
// (unhealthy) holds kUnavailable. Pure, not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace lmwarden::core {

class PlacementIndex {
 public:
  using Key = std::int64_t;
  static constexpr Key kUnavailable = INT64_MAX;

  explicit PlacementIndex(int replicas);

  // The fixed-point key of a score (>= 0); saturates far below kUnavailable.
  static Key key_of(double score) noexcept;

  void set(int replica, Key key) noexcept;
  Key key(int replica) const noexcept { return nodes_[leaf(replica)].min; }

  // The lowest key among all replicas (kUnavailable when none is available),
  // and how many replicas hold it.
  Key min() const noexcept { return nodes_[1].min; }
  int tied() const noexcept { return nodes_[1].count; }
  // The k-th (0-based, in replica order) of the replicas holding min();
  // k < tied(), and min() != kUnavailable.
  int nth_tied(int k) const noexcept;

 private:
  struct Node {
    Key min = kUnavailable;
    std::int32_t count = 0;  // leaves holding `min` in this subtree
  };
  std::size_t leaf(int replica) const noexcept { return leaves_ + static_cast<std::size_t>(replica); }
  static Node merge(const Node& a, const Node& b) noexcept;

  std::size_t leaves_;       // a power of two >= replicas; leaf i is nodes_[leaves_ + i]
  std::vector<Node> nodes_;  // 1-based heap layout; nodes_[1] is the root
};

}  // namespace lmwarden::core
