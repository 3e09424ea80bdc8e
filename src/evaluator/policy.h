// Placement policies the offline evaluator compares, behind one small
// interface so that a new idea is one class and one line in the registry
// (policy.cpp, kPolicies).
//
// A policy sees what its real counterpart would see:
//  - `live` in place(): the engines' exact queue lengths at the moment of the
//    request, which is what vLLM's internal balancer reads (its coordinator
//    publishes them every ~100 ms, plus its own unreported sends);
//  - observe(): a scrape of every replica once per scrape interval, which is
//    all the warden learns about the engines (the rest it counts itself, in
//    flight, through place() and finished()).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"
#include "core/identity.h"
#include "engine/types.h"

namespace lmwarden::evaluator {

struct ReplicaSnapshot {
  int running = 0;
  int waiting = 0;
  double kv_used = 0;  // 0..1
};

struct TurnRequest {
  const core::Identity& identity;  // the session, as the warden would resolve it
  int turn = 0;                    // 0 for a session's first request
  engine::Seconds now = 0;
};

struct Placement {
  int replica = 0;
  std::uint64_t cookie = 0;  // private to the policy that made it
};

class Policy {
 public:
  virtual ~Policy() = default;
  // For tables and results.json, e.g. "warden(spill=8)".
  virtual std::string name() const = 0;
  // A scrape: what each replica's /metrics said at `now`.
  virtual void observe(std::span<const ReplicaSnapshot> scraped, engine::Seconds now) {
    (void)scraped;
    (void)now;
  }
  // Where the request goes: a replica in [0, live.size()).
  virtual Placement place(const TurnRequest& request, std::span<const ReplicaSnapshot> live) = 0;
  // The placed request ended (last token, error or abandoned), exactly once.
  virtual void finished(const Placement& placement, engine::Seconds now) {
    (void)placement;
    (void)now;
  }
};

struct PolicyInfo {
  std::string_view spec;  // what --arms accepts
  std::string_view description;
};

// Every policy the evaluator knows, for --help and docs.
std::span<const PolicyInfo> known_policies() noexcept;

// Builds a policy from its spec: "vllm" (also "off"), "round-robin",
// "session-hash", "warden" (also "on") or "warden:N" (spill threshold N ≥ 1).
Result<std::unique_ptr<Policy>, std::string> make_policy(std::string_view spec, int replicas);

}  // namespace lmwarden::evaluator
