// The access log's cost per request (`access_log` in the configuration):
// what the I/O thread that ends a request spends on its line, formatting it
// and adding it to the buffer, with the log's own thread writing the buffer
// to /dev/null beside it.
//
// access_log/write/relayed: a streamed reply relayed whole, every field set
//   (conversation, route, replica, first byte, usage).
// access_log/write/refused: a 404 before routing, most fields null.
// access_log/write/escaped_target: a target with a quote, a backslash and
//   bytes that are not UTF-8, which the line escapes or replaces.
#include <benchmark/benchmark.h>

#include <chrono>

#include "proxy/access_log.h"

namespace lmwarden::bench {
namespace {

using namespace std::chrono_literals;

// A request's record as the proxy fills it: a streamed reply relayed to a
// known conversation, or a 404 before routing (most fields unset).
proxy::AccessRecord record(bool relayed) {
  proxy::AccessRecord r{.received = std::chrono::steady_clock::now()};
  r.status = relayed ? 200 : 404;
  if (!relayed) return r;
  r.model = "qwen3-4b";
  r.conversation = 0x9f2c4a1e5b6d7c8aull;
  r.route = "sticky";
  r.replica = 2;
  r.rank = 1;
  r.attempts = 1;
  r.outcome = "relayed";
  r.first_byte = r.received + 212400us;
  r.usage = telemetry::RequestUsage{.prompt_tokens = 48211,
                                    .cached_tokens = 47104,
                                    .completion_tokens = 311,
                                    .cache_measured = true};
  return r;
}

void write_lines(benchmark::State& state, const proxy::AccessRecord& record,
                 std::string_view target) {
  auto log = proxy::AccessLog::open("/dev/null");
  if (!log) {
    state.SkipWithError("/dev/null cannot be opened for appending");
    return;
  }
  std::uint64_t id = 0;
  for (auto _ : state)
    log->write(++id, "127.0.0.1", "POST", target, "claude-cli/2.1.332 (external, cli)", record);
  state.SetItemsProcessed(state.iterations());
}

void access_log_relayed(benchmark::State& state) {
  write_lines(state, record(true), "/v1/messages?beta=true");
}
BENCHMARK(access_log_relayed)->Name("access_log/write/relayed");

void access_log_refused(benchmark::State& state) {
  write_lines(state, record(false), "/v1/chat/completions");
}
BENCHMARK(access_log_refused)->Name("access_log/write/refused");

void access_log_escaped_target(benchmark::State& state) {
  write_lines(state, record(true), "/v1/messages?q=\"a\\b\"&x=\xff\xfe");
}
BENCHMARK(access_log_escaped_target)->Name("access_log/write/escaped_target");

}  // namespace
}  // namespace lmwarden::bench
