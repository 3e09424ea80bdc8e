// The homes file (saved_homes) with 1k, 100k and 1M live conversations on
// 4 replicas (max_conversations 1M):
//
// saved_homes/snapshot/N: copying one model's homes out of its router, the
//   whole of which holds the model's lock (requests of that model wait for
//   it; other models' do not).
// saved_homes/format/N: the file's text from the copy (no lock held).
// saved_homes/read/N: parsing that text and taking the homes into a fresh
//   model, as a start does before it listens.
// Each reports the file's bytes per conversation as `bytes_per_home`.
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>

#include "common/hash.h"
#include "config/config_loader.h"
#include "proxy/home_saver.h"
#include "proxy/saved_homes.h"
#include "proxy/warden.h"

namespace lmwarden::bench {
namespace {

config::Config four_replicas() {
  auto loaded = config::load_config_string(
      "models:\n  - name: m\n    session_ttl: 10h\n    backends:\n"
      "      - url: http://10.0.0.1:8000\n        data_parallel_size: 2\n"
      "      - url: http://10.0.0.2:8000\n        data_parallel_size: 2\n",
      "bench.yaml");
  if (!loaded) throw std::runtime_error(loaded.error().message());
  return std::move(loaded).value();
}

// A model with `n` live conversations, placed as requests place them.
std::shared_ptr<proxy::ModelSet> with_conversations(std::int64_t n) {
  auto set = proxy::make_model_set(four_replicas(), nullptr);
  proxy::ModelState& m = *set->models[0];
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock{m.mutex};
  for (std::int64_t i = 0; i < n; ++i) {
    const core::Identity id{.kind = core::IdentityKind::kSession,
                            .session_hash = stable_hash("conversation-" + std::to_string(i))};
    const auto d = m.router.route(id, now);
    m.router.finish(d, now);
  }
  return set;
}

void snapshot(benchmark::State& state) {
  const auto set = with_conversations(state.range(0));
  std::size_t homes = 0;
  for (auto _ : state) {
    const auto saved = proxy::snapshot_homes(*set, std::chrono::system_clock::now(),
                                             std::chrono::steady_clock::now());
    homes = saved.models[0].conversations.size();
    benchmark::DoNotOptimize(saved);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(homes));
}

void format(benchmark::State& state) {
  const auto set = with_conversations(state.range(0));
  const auto saved = proxy::snapshot_homes(*set, std::chrono::system_clock::now(),
                                           std::chrono::steady_clock::now());
  std::size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = proxy::format_saved_homes(saved);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["bytes_per_home"] =
      static_cast<double>(bytes) / static_cast<double>(state.range(0));
}

void read(benchmark::State& state) {
  const auto set = with_conversations(state.range(0));
  const std::string text = proxy::format_saved_homes(proxy::snapshot_homes(
      *set, std::chrono::system_clock::now(), std::chrono::steady_clock::now()));
  std::shared_ptr<proxy::ModelSet> fresh;
  for (auto _ : state) {
    state.PauseTiming();  // a fresh model each time, its making and teardown not timed
    fresh.reset();
    fresh = proxy::make_model_set(set->config, nullptr);
    state.ResumeTiming();
    const auto homes = proxy::parse_saved_homes(text);
    if (!homes) {
      state.SkipWithError(homes.error().c_str());
      return;
    }
    benchmark::DoNotOptimize(proxy::restore_homes(*homes, *fresh, std::chrono::system_clock::now(),
                                                  std::chrono::steady_clock::now()));
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(1'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond);
}

BENCHMARK(snapshot)->Name("saved_homes/snapshot")->Apply(sizes);
BENCHMARK(format)->Name("saved_homes/format")->Apply(sizes);
BENCHMARK(read)->Name("saved_homes/read")->Apply(sizes);

}  // namespace
}  // namespace lmwarden::bench
