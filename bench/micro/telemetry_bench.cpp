// Telemetry parsers on the data path and beside it.
//
// prometheus/*: one scrape of a 4-engine vLLM server (shared fixture
//   vllm/metrics-dp4.txt): the pull parser alone, and the per-rank snapshot
//   the scraper builds from it.
// usage_tap/*: the tap every relayed reply goes through, one upstream chunk
//   per SSE event as vLLM flushes them: per chunk time for content deltas, and
//   for a whole reply of 256 events ending in the usage chunk and [DONE].
// usage_stripper/*: what inject_stream_usage adds to such a reply: the
//   stripper that removes the usage chunk the client did not ask for, fed the
//   reply one event per chunk and in 4 KB pieces.
// usage_json/*: a non-streamed chat completion's usage, read from the body's
//   end (what the tap does) and by parsing the whole body (its fallback), on
//   a short reply and on one whose answer is 16 KB long.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "fixtures.h"
#include "telemetry/prometheus.h"
#include "telemetry/stream_usage_injection.h"
#include "telemetry/usage_tap.h"
#include "telemetry/vllm_snapshot.h"

namespace lmwarden::bench {
namespace {

void prometheus_reader(benchmark::State& state) {
  const std::string text = read_file(fixture_path("vllm/metrics-dp4.txt"));
  for (auto _ : state) {
    telemetry::ExpositionReader reader(text);
    std::size_t n = 0;
    while (reader.next()) ++n;
    benchmark::DoNotOptimize(n);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}
BENCHMARK(prometheus_reader)->Name("prometheus/reader/metrics-dp4")->Unit(benchmark::kMicrosecond);

void prometheus_snapshot(benchmark::State& state) {
  const std::string text = read_file(fixture_path("vllm/metrics-dp4.txt"));
  for (auto _ : state) {
    auto snapshot = telemetry::extract_vllm_snapshot(text);
    benchmark::DoNotOptimize(snapshot.ranks.size());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}
BENCHMARK(prometheus_snapshot)
    ->Name("prometheus/vllm_snapshot/metrics-dp4")
    ->Unit(benchmark::kMicrosecond);

std::string openai_delta(int i) {
  return "data: "
         "{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1767000000,"
         "\"model\":\"qwen3-4b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token" +
         std::to_string(i) + "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
}
const std::string kOpenAiUsage =
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1767000000,"
    "\"model\":\"qwen3-4b\",\"choices\":[],\"usage\":{\"prompt_tokens\":30000,\"total_tokens\":"
    "30256,"
    "\"completion_tokens\":256,\"prompt_tokens_details\":{\"cached_tokens\":29696}}}\n\n";

std::string anthropic_delta(int i) {
  return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
         "\"delta\":{\"type\":\"text_delta\",\"text\":\" token" +
         std::to_string(i) + "\"}}\n\n";
}

// One chunk per iteration, cycling through 256 deltas of one dialect.
void usage_tap_per_chunk(benchmark::State& state, std::string (*delta)(int)) {
  std::vector<std::string> chunks;
  for (int i = 0; i < 256; ++i) chunks.push_back(delta(i));
  telemetry::UsageTap tap(telemetry::BodyFormat::kEventStream);
  std::size_t i = 0, bytes = 0;
  for (auto _ : state) {
    const std::string& c = chunks[i++ & 255];
    tap.feed(c);
    bytes += c.size();
  }
  benchmark::DoNotOptimize(tap.fields().seen);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}
BENCHMARK_CAPTURE(usage_tap_per_chunk, openai, openai_delta)->Name("usage_tap/openai/per_chunk");
BENCHMARK_CAPTURE(usage_tap_per_chunk, anthropic, anthropic_delta)->Name("usage_tap/anthropic/per_chunk");

// A whole streamed reply, as the relay sees it: 256 deltas, usage, [DONE].
void usage_tap_openai_reply(benchmark::State& state) {
  std::vector<std::string> chunks;
  for (int i = 0; i < 256; ++i) chunks.push_back(openai_delta(i));
  chunks.push_back(kOpenAiUsage);
  chunks.push_back("data: [DONE]\n\n");
  std::size_t bytes = 0;
  for (const auto& c : chunks) bytes += c.size();
  for (auto _ : state) {
    telemetry::UsageTap tap(telemetry::BodyFormat::kEventStream);
    for (const auto& c : chunks) tap.feed(c);
    tap.finish();
    benchmark::DoNotOptimize(tap.usage().cached_tokens);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * chunks.size()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK(usage_tap_openai_reply)
    ->Name("usage_tap/openai/reply_256_events")
    ->Unit(benchmark::kMicrosecond);

// The same reply as the relay usually hands it over when events arrive
// faster than they are relayed: several events per piece, pieces cut
// anywhere (here every 4 KB).
void usage_tap_openai_reply_in_pieces(benchmark::State& state) {
  std::string reply;
  for (int i = 0; i < 256; ++i) reply += openai_delta(i);
  reply += kOpenAiUsage;
  reply += "data: [DONE]\n\n";
  constexpr std::size_t kPiece = 4096;
  for (auto _ : state) {
    telemetry::UsageTap tap(telemetry::BodyFormat::kEventStream);
    for (std::size_t pos = 0; pos < reply.size(); pos += kPiece)
      tap.feed(std::string_view(reply).substr(pos, kPiece));
    tap.finish();
    benchmark::DoNotOptimize(tap.usage().cached_tokens);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * 258));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * reply.size()));
}
BENCHMARK(usage_tap_openai_reply_in_pieces)
    ->Name("usage_tap/openai/reply_256_events_in_4k_pieces")
    ->Unit(benchmark::kMicrosecond);

// The stripper on the same reply, as the relay hands it over: one event per
// chunk (events spaced by decode steps), or 4 KB pieces cut anywhere (events
// arriving faster than they are relayed).
void usage_stripper_openai_reply(benchmark::State& state, std::size_t piece) {
  std::vector<std::string> chunks;
  for (int i = 0; i < 256; ++i) chunks.push_back(openai_delta(i));
  chunks.push_back(kOpenAiUsage);
  chunks.push_back("data: [DONE]\n\n");
  if (piece > 0) {
    std::string reply;
    for (const auto& c : chunks) reply += c;
    chunks.clear();
    for (std::size_t pos = 0; pos < reply.size(); pos += piece)
      chunks.push_back(reply.substr(pos, piece));
  }
  std::size_t bytes = 0;
  for (const auto& c : chunks) bytes += c.size();
  for (auto _ : state) {
    telemetry::InjectedUsageStripper stripper;
    std::size_t forwarded = 0;
    for (const auto& c : chunks)
      for (std::string_view v : stripper.feed(c)) forwarded += v.size();
    for (std::string_view v : stripper.finish()) forwarded += v.size();
    benchmark::DoNotOptimize(forwarded);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * 258));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}
BENCHMARK_CAPTURE(usage_stripper_openai_reply, per_event, 0)
    ->Name("usage_stripper/openai/reply_256_events")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(usage_stripper_openai_reply, in_pieces, 4096)
    ->Name("usage_stripper/openai/reply_256_events_in_4k_pieces")
    ->Unit(benchmark::kMicrosecond);

// A split line: every event arrives in two pieces (the carry-over path).
void usage_tap_split_chunk(benchmark::State& state) {
  std::vector<std::string> pieces;
  for (int i = 0; i < 128; ++i) {
    const std::string e = openai_delta(i);
    pieces.push_back(e.substr(0, e.size() / 2));
    pieces.push_back(e.substr(e.size() / 2));
  }
  telemetry::UsageTap tap(telemetry::BodyFormat::kEventStream);
  std::size_t i = 0;
  for (auto _ : state) tap.feed(pieces[i++ & 255]);
  benchmark::DoNotOptimize(tap.fields().seen);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(usage_tap_split_chunk)->Name("usage_tap/openai/per_half_event");

// A vLLM chat completion as its OpenAI server writes it (fields in its
// order, the trailing ones null), with an answer of `content_bytes`.
std::string chat_completion(std::size_t content_bytes) {
  return R"({"id":"chatcmpl-bench","object":"chat.completion","created":1767000000,"model":"qwen3-4b",)"
         R"("choices":[{"index":0,"message":{"role":"assistant","content":")" +
         std::string(content_bytes, 'x') +
         R"(","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],)"
         R"("reasoning_content":null},"logprobs":null,"finish_reason":"stop","stop_reason":null}],)"
         R"("service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":30000,)"
         R"("total_tokens":30256,"completion_tokens":256,"prompt_tokens_details":{"cached_tokens":)"
         R"(29696}},"prompt_logprobs":null,"prompt_token_ids":null,"kv_transfer_params":null})";
}

void usage_json_body(benchmark::State& state, bool from_end) {
  telemetry::PaddedBuffer body;
  body.append(chat_completion(static_cast<std::size_t>(state.range(0))));
  for (auto _ : state) {
    telemetry::UsageFields fields;
    if (from_end) {
      telemetry::merge_body_usage(body.padded(), fields);
    } else {
      telemetry::merge_usage(body.padded(), fields);
    }
    benchmark::DoNotOptimize(fields.prompt_cached_tokens);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
}
BENCHMARK_CAPTURE(usage_json_body, from_end, true)
    ->Name("usage_json/chat_completion/from_end")
    ->Arg(30)
    ->Arg(16 << 10);
BENCHMARK_CAPTURE(usage_json_body, whole_parse, false)
    ->Name("usage_json/chat_completion/whole_parse")
    ->Arg(30)
    ->Arg(16 << 10);

}  // namespace
}  // namespace lmwarden::bench
