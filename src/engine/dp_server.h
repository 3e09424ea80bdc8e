// One vLLM server started with --data-parallel-size N: N engines behind one
// front end, placing each request on a rank.
//
// Placement, as vLLM's internal load balancer (DPLBAsyncMPClient): a request
// that names a rank (X-data-parallel-rank) goes there; otherwise to the rank
// with the lowest 4·waiting + running, ties to the lowest rank. vLLM's front
// end reads those counts from the DP coordinator (published every ~100 ms)
// plus its own not-yet-reported sends; the simulator reads them exactly, which
// is what that correction approximates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/engine.h"

namespace lmwarden::engine {

class DpServer {
 public:
  DpServer(std::int32_t dp_size, const EngineConfig& config);

  std::int32_t size() const noexcept { return static_cast<std::int32_t>(engines_.size()); }
  Engine& engine(std::int32_t rank) noexcept { return *engines_[static_cast<std::size_t>(rank)]; }
  const Engine& engine(std::int32_t rank) const noexcept {
    return *engines_[static_cast<std::size_t>(rank)];
  }
  bool valid_rank(std::int64_t rank) const noexcept { return rank >= 0 && rank < size(); }

  // The rank vLLM's balancer would pick now.
  std::int32_t balanced_rank() const noexcept;

  struct Placement {
    std::int32_t rank = -1;  // -1 when the pinned rank does not exist
    AddResult result;
  };
  // Adds the request to `pinned_rank` if given (which must be valid, else
  // rank -1 and nothing added), otherwise to balanced_rank().
  Placement add_request(NewRequest request, Seconds now, std::optional<std::int64_t> pinned_rank);

  // Fresh ids, unique across the ranks.
  RequestId next_request_id() noexcept { return next_id_++; }

 private:
  std::vector<std::unique_ptr<Engine>> engines_;
  RequestId next_id_ = 1;
};

}  // namespace lmwarden::engine
