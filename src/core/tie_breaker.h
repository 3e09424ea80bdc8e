// Chooses among replicas whose load scores are equal.
//
// Injected into the Router so every pick is reproducible: tests script it, the
// proxy uses a rotating cursor (so a burst of new conversations on an idle
// fleet goes 0, 1, 2, 3 … rather than piling onto replica 0), and the offline
// evaluator uses the same cursor as the proxy.
#pragma once

#include <cstddef>

namespace lmwarden::core {

class TieBreaker {
 public:
  virtual ~TieBreaker() = default;
  // Returns an index in [0, candidates); candidates >= 2.
  virtual std::size_t pick(std::size_t candidates) noexcept = 0;
};

// Deterministic round robin over the tied set: the n-th tie picks n mod size.
class RotatingTieBreaker final : public TieBreaker {
 public:
  std::size_t pick(std::size_t candidates) noexcept override { return cursor_++ % candidates; }

 private:
  std::size_t cursor_ = 0;
};

// Always the lowest-indexed tied replica (tests).
class FirstTieBreaker final : public TieBreaker {
 public:
  std::size_t pick(std::size_t) noexcept override { return 0; }
};

}  // namespace lmwarden::core
