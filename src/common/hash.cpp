#include "common/hash.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <random>

namespace lmwarden {

std::string short_hash(std::uint64_t h) { return fmt::format("{:08x}", h >> 32); }

std::uint64_t process_hash_seed() noexcept {
  static const std::uint64_t seed = []() -> std::uint64_t {
    try {
      std::random_device device;
      const std::uint64_t high = device();
      return (high << 32) ^ device();
    } catch (...) {
      // No entropy source at all: the start time and where the stack lies
      // (randomised by ASLR) still differ from run to run.
      int local = 0;
      const auto ticks =
          static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
      return (ticks * 0x9e3779b97f4a7c15ull) ^ reinterpret_cast<std::uintptr_t>(&local);
    }
  }();
  return seed;
}

}  // namespace lmwarden
