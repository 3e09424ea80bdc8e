#include "engine/dp_server.h"

namespace lmwarden::engine {

DpServer::DpServer(std::int32_t dp_size, const EngineConfig& config) {
  engines_.reserve(static_cast<std::size_t>(dp_size));
  for (std::int32_t r = 0; r < dp_size; ++r) engines_.push_back(std::make_unique<Engine>(config));
}

std::int32_t DpServer::balanced_rank() const noexcept {
  std::int32_t best = 0;
  std::int64_t best_score = INT64_MAX;
  for (std::int32_t r = 0; r < size(); ++r) {
    const Engine& e = engine(r);
    const std::int64_t score = 4 * std::int64_t{e.num_waiting()} + e.num_running();
    if (score < best_score) {  // strict: ties keep the lower rank
      best = r;
      best_score = score;
    }
  }
  return best;
}

DpServer::Placement DpServer::add_request(NewRequest request, Seconds now,
                                          std::optional<std::int64_t> pinned_rank) {
  Placement p;
  if (pinned_rank && !valid_rank(*pinned_rank)) return p;
  p.rank = pinned_rank ? static_cast<std::int32_t>(*pinned_rank) : balanced_rank();
  p.result = engine(p.rank).add_request(std::move(request), now);
  return p;
}

}  // namespace lmwarden::engine
