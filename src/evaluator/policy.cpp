#include "evaluator/policy.h"

#include <charconv>
#include <cstdint>
#include <unordered_map>

#include "config/config.h"
#include "core/router.h"

namespace lmwarden::evaluator {
namespace {

// vLLM's data-parallel balancer (DPLBAsyncMPClient): the rank with the lowest
// 4·waiting + running, ties to the lowest rank — engine::DpServer's rule, read
// from the same exact counts. Blind to where a conversation's prefix lives.
class VllmBalancer final : public Policy {
 public:
  std::string name() const override { return "vllm"; }
  Placement place(const TurnRequest&, std::span<const ReplicaSnapshot> live) override {
    int best = 0;
    std::int64_t best_score = INT64_MAX;
    for (std::size_t r = 0; r < live.size(); ++r) {
      const std::int64_t score = 4 * std::int64_t{live[r].waiting} + live[r].running;
      if (score < best_score) {
        best = static_cast<int>(r);
        best_score = score;
      }
    }
    return {.replica = best};
  }
};

// Each request to the next replica in turn: even by count, blind to load and
// to prefixes alike. The classic default of generic load balancers.
class RoundRobin final : public Policy {
 public:
  std::string name() const override { return "round-robin"; }
  Placement place(const TurnRequest&, std::span<const ReplicaSnapshot> live) override {
    return {.replica = static_cast<int>(next_++ % live.size())};
  }

 private:
  std::uint64_t next_ = 0;
};

// Session-id hashing (what a sticky load balancer does: nginx `hash $key`,
// Envoy ring hash): stable_hash(session) mod replicas. Perfectly sticky, no
// state, but blind to load: a replica that drew several heavy conversations
// thrashes its cache while another sits idle. Requests without a session
// fall back to round robin.
class SessionHash final : public Policy {
 public:
  std::string name() const override { return "session-hash"; }
  Placement place(const TurnRequest& request, std::span<const ReplicaSnapshot> live) override {
    const auto n = static_cast<std::uint64_t>(live.size());
    if (request.identity.kind != core::IdentityKind::kSession) {
      return {.replica = static_cast<int>(anonymous_++ % n)};
    }
    return {.replica = static_cast<int>(request.identity.session_hash % n)};
  }

 private:
  std::uint64_t anonymous_ = 0;
};

// The warden: core::Router, the very code `lmwarden serve` runs, configured as
// one vLLM server with --data-parallel-size N and fed like the proxy feeds it:
// route()/finish() around every request (in flight), set_engine_stats() from
// each scrape. With affinity on every request gets a rank; were the router to
// leave the choice to the server (replica -1), vLLM's rule applies.
class Warden final : public Policy {
 public:
  Warden(int replicas, std::optional<int> spill_threshold) {
    config::ModelConfig model;
    model.name = "bench";
    model.affinity = true;
    model.spill_threshold = spill_threshold;
    config::BackendConfig backend;
    backend.url = "http://simulated";
    backend.host = "simulated";
    backend.data_parallel_size = replicas;
    model.backends.push_back(backend);
    router_ = std::make_unique<core::Router>(model);
  }

  std::string name() const override {
    return "warden(spill=" + std::to_string(router_->spill_threshold()) + ")";
  }

  void observe(std::span<const ReplicaSnapshot> scraped, engine::Seconds now) override {
    for (std::size_t r = 0; r < scraped.size(); ++r) {
      router_->set_engine_stats(static_cast<int>(r), {.running = scraped[r].running,
                                                      .waiting = scraped[r].waiting,
                                                      .kv_used = scraped[r].kv_used});
    }
    router_->expire(at(now));
  }

  Placement place(const TurnRequest& request, std::span<const ReplicaSnapshot> live) override {
    const core::RouteDecision d = router_->route(request.identity, at(request.now));
    Placement p{.replica = d.replica, .cookie = next_cookie_++};
    if (!d.ok() || d.replica < 0) {
      p.replica = fallback_.place(request, live).replica;
    }
    if (d.ok()) decisions_.emplace(p.cookie, d);
    return p;
  }

  void finished(const Placement& placement, engine::Seconds now) override {
    const auto it = decisions_.find(placement.cookie);
    if (it == decisions_.end()) return;
    router_->finish(it->second, at(now));
    decisions_.erase(it);
  }

 private:
  static core::TimePoint at(engine::Seconds t) {
    return core::TimePoint{} +
           std::chrono::duration_cast<core::Clock::duration>(std::chrono::duration<double>(t));
  }

  std::unique_ptr<core::Router> router_;
  VllmBalancer fallback_;
  std::unordered_map<std::uint64_t, core::RouteDecision> decisions_;
  std::uint64_t next_cookie_ = 1;
};

constexpr PolicyInfo kPolicies[] = {
    {"vllm", "vLLM's own balancer: lowest 4·waiting + running (arm \"off\")"},
    {"round-robin", "each request to the next replica"},
    {"session-hash", "stable hash of the session id mod replicas (sticky, load-blind)"},
    {"warden", "LM Warden's policy, spill threshold auto (arm \"on\")"},
    {"warden:N", "LM Warden's policy with spill threshold N"},
};

}  // namespace

std::span<const PolicyInfo> known_policies() noexcept {
  return kPolicies;
}

Result<std::unique_ptr<Policy>, std::string> make_policy(std::string_view spec, int replicas) {
  if (replicas < 1) return unexpected(std::string("replicas must be >= 1"));
  if (spec == "vllm" || spec == "off") return std::unique_ptr<Policy>(new VllmBalancer());
  if (spec == "round-robin") return std::unique_ptr<Policy>(new RoundRobin());
  if (spec == "session-hash") return std::unique_ptr<Policy>(new SessionHash());
  if (spec == "warden" || spec == "on") {
    return std::unique_ptr<Policy>(new Warden(replicas, std::nullopt));
  }
  constexpr std::string_view kWardenPrefix = "warden:";
  if (spec.starts_with(kWardenPrefix)) {
    const std::string_view n = spec.substr(kWardenPrefix.size());
    int threshold = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), threshold);
    if (ec != std::errc{} || end != n.data() + n.size() || threshold < 1) {
      return unexpected("policy '" + std::string(spec) +
                        "': spill threshold must be an integer >= 1");
    }
    return std::unique_ptr<Policy>(new Warden(replicas, threshold));
  }
  std::string known;
  for (const auto& p : kPolicies) {
    if (!known.empty()) known += ", ";
    known += p.spec;
  }
  return unexpected("unknown policy '" + std::string(spec) + "' (known: " + known + ", off, on)");
}

}  // namespace lmwarden::evaluator
