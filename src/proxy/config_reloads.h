// What became of the reloads of the configuration file (SIGHUP), for
// /metrics: how many were applied and refused, and whether the last one
// was applied, so that an alert can say a file on disk is not in force; and
// for /api/models and the dashboard, why the last one was refused.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lmwarden::proxy {

class ConfigReloads {
 public:
  // `loaded`: when the configuration in force was first read (the start).
  explicit ConfigReloads(std::chrono::system_clock::time_point loaded) noexcept
      : last_applied_unix_s_(unix_seconds(loaded)) {}

  // A refused reload: when, and the loader's problems, one per line.
  struct Refusal {
    std::chrono::system_clock::time_point at;
    std::vector<std::string> problems;
  };

  void applied(std::chrono::system_clock::time_point when) {
    last_applied_unix_s_.store(unix_seconds(when), std::memory_order_relaxed);
    last_ok_.store(true, std::memory_order_relaxed);
    applied_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock{mutex_};
    last_refusal_.reset();
  }
  void refused(std::chrono::system_clock::time_point when, std::vector<std::string> problems) {
    {
      std::lock_guard lock{mutex_};
      last_refusal_ = Refusal{when, std::move(problems)};
    }
    last_ok_.store(false, std::memory_order_relaxed);
    refused_.fetch_add(1, std::memory_order_relaxed);
  }

  std::uint64_t applied_count() const noexcept { return applied_.load(std::memory_order_relaxed); }
  std::uint64_t refused_count() const noexcept { return refused_.load(std::memory_order_relaxed); }
  // True until a reload is refused, and again once one is applied.
  bool last_ok() const noexcept { return last_ok_.load(std::memory_order_relaxed); }
  // When the configuration in force was read: the start, or the last reload applied.
  std::int64_t last_applied_unix_s() const noexcept {
    return last_applied_unix_s_.load(std::memory_order_relaxed);
  }
  // The last reload's refusal, while no reload has been applied since.
  std::optional<Refusal> last_refusal() const {
    std::lock_guard lock{mutex_};
    return last_refusal_;
  }

 private:
  static std::int64_t unix_seconds(std::chrono::system_clock::time_point t) noexcept {
    return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
  }

  std::atomic<std::uint64_t> applied_{0};
  std::atomic<std::uint64_t> refused_{0};
  std::atomic<bool> last_ok_{true};
  std::atomic<std::int64_t> last_applied_unix_s_;
  mutable std::mutex mutex_;
  std::optional<Refusal> last_refusal_;  // under mutex_
};

}  // namespace lmwarden::proxy
