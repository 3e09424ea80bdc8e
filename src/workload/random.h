// The workload's only source of randomness: splitmix64, seeded explicitly.
//
// Why not <random>: the standard distributions are implementation-defined, so
// std::uniform_int_distribution gives different prompts under libstdc++ and
// libc++. The benchmark promises that a seed names one workload everywhere
// (both arms, both machines, offline and online), so every draw here is
// spelled out.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/hash.h"

namespace lmwarden::workload {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) noexcept : state_(seed) {}
  // A stream derived from a seed and a label, e.g. ("session", 17): streams with
  // different labels are independent, so adding a draw in one place never
  // shifts the prompts drawn in another.
  Rng(std::uint64_t seed, std::string_view label, std::uint64_t index = 0) noexcept
      : state_(seed ^ stable_hash(label) ^ (index * 0x9e3779b97f4a7c15ull)) {
    next();
  }

  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); n > 0. The modulo bias is below 2^-40 for the small n
  // used here, far under anything a benchmark could notice.
  std::uint64_t below(std::uint64_t n) noexcept { return next() % n; }
  // Uniform in [0, 1).
  double unit() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  bool chance(double p) noexcept { return unit() < p; }

 private:
  std::uint64_t state_;
};

}  // namespace lmwarden::workload
