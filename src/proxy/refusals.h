// Requests the warden answered with an error of its own before any replica
// was tried, by model and reason: lmwarden_refused_requests_total. Counted
// on error paths only, never on a routed request's, so one lock will do.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"

namespace lmwarden::proxy {

class Refusals {
 public:
  struct Count {
    std::string model;  // empty when no model was known
    std::string reason;
    std::uint64_t n = 0;
  };

  void count(std::string_view model, std::string_view reason) {
    std::lock_guard lock{mutex_};
    ++counts_[{std::string(model), std::string(reason)}];
  }
  // A series that is there at 0 before its first count, so that rate() and
  // increase() see that count (a series that appears at 1 shows no rise).
  void declare(std::string_view model, std::string_view reason) {
    std::lock_guard lock{mutex_};
    counts_.try_emplace({std::string(model), std::string(reason)}, 0);
  }

  // A client asked for `name`, which no model has: logged with the names
  // that are served, which is how an operator learns the alias a client
  // wants. Each name once, and only the first kUnknownNamesLogged names, so
  // that a client that makes names up cannot fill the log.
  static constexpr std::size_t kUnknownNamesLogged = 32;
  void log_unknown_model(const config::Config& config, std::string_view name, std::string_view path,
                         std::string_view user_agent);

  // The reasons counted for `model` so far (declared ones at 0 included),
  // with their counts, in order.
  std::vector<std::pair<std::string, std::uint64_t>> of_model(std::string_view model) const {
    std::lock_guard lock{mutex_};
    std::vector<std::pair<std::string, std::uint64_t>> out;
    for (auto it = counts_.lower_bound({std::string(model), std::string()});
         it != counts_.end() && it->first.first == model; ++it)
      out.emplace_back(it->first.second, it->second);
    return out;
  }

  // Every (model, reason) counted so far, in order.
  std::vector<Count> snapshot() const {
    std::lock_guard lock{mutex_};
    std::vector<Count> out;
    out.reserve(counts_.size());
    for (const auto& [key, n] : counts_) out.push_back({key.first, key.second, n});
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> counts_;
  std::set<std::string, std::less<>> unknown_names_;
};

}  // namespace lmwarden::proxy
