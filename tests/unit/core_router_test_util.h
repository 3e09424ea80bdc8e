// Fleets and routers for the router's tests (core_router_*_test.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/hash.h"
#include "core/router.h"

namespace lmwarden::core {

// `n` servers of `ranks` ranks each, on 127.0.0.1:9000 and up.
inline config::ModelConfig servers(int n, int ranks = 1, std::optional<int> spill = std::nullopt) {
  config::ModelConfig m;
  m.name = "m";
  m.spill_threshold = spill;
  for (int i = 0; i < n; ++i)
    m.backends.push_back({.url = "http://127.0.0.1:" + std::to_string(9000 + i),
                          .host = "127.0.0.1",
                          .port = static_cast<std::uint16_t>(9000 + i),
                          .data_parallel_size = ranks});
  return m;
}

// Ties go to the first candidate, so that tests can say where a request lands.
inline Router make_router(const config::ModelConfig& m) {
  return Router{m, std::make_unique<FirstTieBreaker>()};
}

// A request of the conversation `id`.
inline Identity session(const std::string& id) {
  return {.kind = IdentityKind::kSession, .session_hash = stable_hash(id)};
}

}  // namespace lmwarden::core
