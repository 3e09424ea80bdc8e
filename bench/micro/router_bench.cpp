// The routing decision and the memory it keeps per live conversation.
//
// route/sticky: a request of a known conversation (the common case: every turn
//   after the first), picked at random among N live ones, so the session
//   table lookup misses the CPU caches as it would on a busy box.
// route/new: a conversation never seen, with the table full at N, so each
//   decision scans every replica for the least loaded and evicts the least
//   recently used conversation.
// Each decision is route() + finish() under no lock. Besides the mean, the
// p50/p99/max of single decisions are reported (ns, timed with steady_clock,
// whose own ~20 ns are included).
// memory/*: heap bytes per live conversation (glibc mallinfo2 before and after
//   filling a table), the figure that bounds what max_conversations costs.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/router.h"
#include "core/session_table.h"

namespace lmwarden::bench {
namespace {

using core::Clock;

config::ModelConfig model_with(int replicas, std::size_t max_conversations) {
  config::ModelConfig m;
  m.name = "bench";
  m.max_conversations = max_conversations;
  // Servers of up to 8 ranks, as on an 8-GPU box.
  const int per_server = std::min(replicas, 8);
  for (int left = replicas; left > 0; left -= per_server) {
    config::BackendConfig b;
    b.url = "http://127.0.0.1:8000";
    b.host = "127.0.0.1";
    b.port = 8000;
    b.data_parallel_size = std::min(per_server, left);
    m.backends.push_back(b);
  }
  return m;
}

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64: conversation keys
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Percentiles {
  std::vector<std::uint32_t> ns;
  void report(benchmark::State& state) {
    if (ns.empty()) return;
    std::sort(ns.begin(), ns.end());
    auto at = [&](double q) {
      return static_cast<double>(ns[static_cast<std::size_t>(q * (ns.size() - 1))]);
    };
    state.counters["p50_ns"] = at(0.50);
    state.counters["p99_ns"] = at(0.99);
    state.counters["max_ns"] = static_cast<double>(ns.back());
  }
};

// The router under test, filled with N live conversations. Filling a table of
// a million takes a second, and Google Benchmark calls a benchmark several
// times while it sizes the run, so the last one filled is kept for the next
// call with the same arguments.
struct Filled {
  int replicas = 0;
  std::size_t conversations = 0;
  std::unique_ptr<core::Router> router;
  Clock::time_point now;
};

Filled& filled(int replicas, std::size_t conversations) {
  static Filled f;
  if (f.router && f.replicas == replicas && f.conversations == conversations) return f;
  f.router.reset();
  f.router = std::make_unique<core::Router>(model_with(replicas, conversations));
  f.replicas = replicas;
  f.conversations = conversations;
  f.now = Clock::time_point{} + std::chrono::hours(1);
  core::Identity identity;
  identity.kind = core::IdentityKind::kSession;
  for (std::size_t i = 0; i < conversations; ++i) {
    identity.session_hash = mix(i);
    f.router->finish(f.router->route(identity, f.now), f.now);
    f.now += std::chrono::microseconds(1);
  }
  return f;
}

void route(benchmark::State& state, bool known) {
  const int replicas = static_cast<int>(state.range(0));
  const auto conversations = static_cast<std::size_t>(state.range(1));
  Filled& f = filled(replicas, conversations);
  core::Router& router = *f.router;
  auto& now = f.now;
  core::Identity identity;
  identity.kind = core::IdentityKind::kSession;
  Percentiles p;
  p.ns.reserve(static_cast<std::size_t>(state.max_iterations));
  static std::uint64_t fresh = 1ull << 40;  // keys never filled
  std::uint64_t rng = 42;
  for (auto _ : state) {
    rng = mix(rng);
    identity.session_hash = known ? mix(rng % conversations) : mix(fresh++);
    now += std::chrono::microseconds(1);
    const auto t0 = Clock::now();
    const core::RouteDecision d = router.route(identity, now);
    router.finish(d, now);
    const auto t1 = Clock::now();
    benchmark::DoNotOptimize(d.replica);
    p.ns.push_back(static_cast<std::uint32_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
  }
  p.report(state);
  state.counters["conversations"] = static_cast<double>(router.conversations());
}

void route_sticky(benchmark::State& state) {
  route(state, true);
}
void route_new(benchmark::State& state) {
  route(state, false);
}

void routing_args(benchmark::internal::Benchmark* b) {
  for (int replicas : {4, 64, 512})
    for (int conversations : {1'000, 100'000, 1'000'000}) b->Args({replicas, conversations});
  b->ArgNames({"replicas", "conversations"})->Unit(benchmark::kNanosecond);
}

BENCHMARK(route_sticky)->Name("route/sticky")->Apply(routing_args);
BENCHMARK(route_new)->Name("route/new")->Apply(routing_args);

// Small blocks plus the large ones glibc maps on their own (the table's arrays).
std::size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

void memory_session_table(benchmark::State& state) {
  const auto conversations = static_cast<std::size_t>(state.range(0));
  double per = 0;
  for (auto _ : state) {
    const std::size_t before = heap_in_use();
    {
      core::SessionTable table(8, conversations, std::chrono::minutes(30));
      const auto now = Clock::time_point{} + std::chrono::hours(1);
      for (std::size_t i = 0; i < conversations; ++i)
        table.assign(mix(i), static_cast<int>(i % 8), now);
      per = static_cast<double>(heap_in_use() - before) / static_cast<double>(conversations);
      benchmark::DoNotOptimize(table.size());
    }
  }
  state.counters["bytes_per_conversation"] = per;
}
BENCHMARK(memory_session_table)
    ->Name("memory/session_table")
    ->Arg(1'000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->ArgName("conversations")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lmwarden::bench
