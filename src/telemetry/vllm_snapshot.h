// What the router needs from one scrape of a vLLM server's /metrics, per rank.
//
// A vLLM server started with --data-parallel-size N labels every engine series
// with engine="r"; a single-engine server may omit the label, which means rank
// 0 (DESIGN §3). vLLM renamed two families in V1; both spellings are read and
// the current name wins when a server exports both:
//
//   current                               older
//   vllm:kv_cache_usage_perc              vllm:gpu_cache_usage_perc
//   vllm:prefix_cache_queries_total       vllm:gpu_prefix_cache_queries_total
//   vllm:prefix_cache_hits_total          vllm:gpu_prefix_cache_hits_total
//
// plus vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:prompt_tokens_total and vllm:generation_tokens_total. Counters' _created
// companions (creation timestamps, not counts) are never read as values.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lmwarden::telemetry {

struct RankMetrics {
  int rank = 0;
  // Gauges. kv_cache_usage is a fraction in [0, 1] as vLLM reports it.
  std::optional<double> running;
  std::optional<double> waiting;
  std::optional<double> kv_cache_usage;
  // Counters since the engine started, in tokens.
  std::optional<double> prefix_cache_queries;
  std::optional<double> prefix_cache_hits;
  std::optional<double> prompt_tokens;
  std::optional<double> generation_tokens;
};

struct VllmSnapshot {
  std::vector<RankMetrics> ranks;  // ascending rank; only ranks that had a sample
  bool legacy_names = false;       // some value came from a pre-rename family
  std::size_t samples = 0;         // samples in the exposition, read or not
  std::size_t skipped_lines = 0;   // malformed lines the parser passed over
  std::size_t first_skipped_line = 0;
  // With model names asked for, none of which the exposition's model_name
  // labels named while they named two models or more: each model's figures,
  // summed per rank, were read. The models it named, sorted (at most 8).
  std::vector<std::string> unmatched_models;

  const RankMetrics* rank(int r) const noexcept;
};

// Ranks above this are treated as hostile input and ignored, so a broken
// exporter cannot make the router allocate per-rank state without bound.
inline constexpr int kMaxRank = 4095;

// Extracts per-rank metrics. With `model_names` (a model's name and its
// aliases), only series whose model_name label is one of them are read, with
// those that carry no such label (a server serving several models through one
// endpoint). When no series names any of them, every series is read: vLLM
// labels its series with the first of its --served-model-name only, which a
// client may address by another. Series that share a rank after filtering
// (e.g. a LoRA adapter and its base) are summed, except KV usage, where the
// largest value is kept (usage does not add up). Non-finite values are
// ignored: a NaN gauge says "unknown", not zero.
VllmSnapshot extract_vllm_snapshot(std::string_view exposition,
                                   std::span<const std::string> model_names = {});

}  // namespace lmwarden::telemetry
