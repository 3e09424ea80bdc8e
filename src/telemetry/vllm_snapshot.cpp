#include "telemetry/vllm_snapshot.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "telemetry/prometheus.h"

namespace lmwarden::telemetry {
namespace {

enum Field : std::uint8_t {
  kRunning,
  kWaiting,
  kKvUsage,
  kQueries,
  kHits,
  kPromptTokens,
  kGenerationTokens,
  kFieldCount,
};

struct Source {
  std::string_view sample_name;
  Field field;
  bool legacy;
};

// The table the scraper is built on; docs/metrics.md lists the same names.
constexpr std::array<Source, 10> kSources = {{
    {"vllm:num_requests_running", kRunning, false},
    {"vllm:num_requests_waiting", kWaiting, false},
    {"vllm:kv_cache_usage_perc", kKvUsage, false},
    {"vllm:gpu_cache_usage_perc", kKvUsage, true},
    {"vllm:prefix_cache_queries_total", kQueries, false},
    {"vllm:gpu_prefix_cache_queries_total", kQueries, true},
    {"vllm:prefix_cache_hits_total", kHits, false},
    {"vllm:gpu_prefix_cache_hits_total", kHits, true},
    {"vllm:prompt_tokens_total", kPromptTokens, false},
    {"vllm:generation_tokens_total", kGenerationTokens, false},
}};

const Source* find_source(std::string_view name) noexcept {
  if (!name.starts_with("vllm:")) return nullptr;
  for (const Source& s : kSources) {
    if (s.sample_name == name) return &s;
  }
  return nullptr;
}

std::optional<int> parse_rank(std::optional<std::string_view> engine) noexcept {
  if (!engine) return 0;
  int rank = -1;
  const char* end = engine->data() + engine->size();
  const auto [ptr, ec] = std::from_chars(engine->data(), end, rank);
  // One spelling per rank, digits only: "00" and "-0" are not "0".
  const bool starts_with_digit =
      !engine->empty() && engine->front() >= '0' && engine->front() <= '9';
  const bool leading_zero = engine->size() > 1 && engine->front() == '0';
  if (ec != std::errc{} || ptr != end || !starts_with_digit || leading_zero || rank > kMaxRank)
    return std::nullopt;
  return rank;
}

struct Accumulator {
  std::array<std::optional<double>, kFieldCount> current;
  std::array<std::optional<double>, kFieldCount> legacy;
};

void accumulate(std::optional<double>& slot, Field field, double value) noexcept {
  if (!slot) {
    slot = value;
  } else if (field == kKvUsage) {
    slot = std::max(*slot, value);
  } else {
    *slot += value;
  }
}

}  // namespace

const RankMetrics* VllmSnapshot::rank(int r) const noexcept {
  for (const RankMetrics& m : ranks) {
    if (m.rank == r) return &m;
  }
  return nullptr;
}

VllmSnapshot extract_vllm_snapshot(std::string_view exposition,
                                   std::span<const std::string> model_names) {
  VllmSnapshot snapshot;
  // Every series, and the series of the models asked for (with those that
  // name no model): the second wins when any series named one of them.
  std::map<int, Accumulator> all;
  std::map<int, Accumulator> named;
  bool matched = false;
  // Copies: a name read with an escape is a view into the reader's buffer,
  // which the next line reuses.
  std::set<std::string, std::less<>> models_seen;

  ExpositionReader reader(exposition);
  while (const ExpositionEntry* entry = reader.next()) {
    if (entry->kind != ExpositionEntry::Kind::kSample) continue;
    ++snapshot.samples;
    const SampleView& sample = entry->sample;
    const Source* source = find_source(sample.name);
    if (source == nullptr || !std::isfinite(sample.value)) continue;
    const auto rank = parse_rank(sample.label("engine"));
    if (!rank) continue;
    const auto add_to = [&](std::map<int, Accumulator>& by_rank) {
      Accumulator& acc = by_rank[*rank];
      auto& slots = source->legacy ? acc.legacy : acc.current;
      accumulate(slots[source->field], source->field, sample.value);
    };
    add_to(all);
    if (model_names.empty()) continue;
    const auto model = sample.label("model_name");
    if (model) {
      const bool ours =
          std::find(model_names.begin(), model_names.end(), *model) != model_names.end();
      matched = matched || ours;
      if (!ours) {
        if (!models_seen.contains(*model)) models_seen.emplace(*model);
        continue;
      }
    }
    add_to(named);
  }

  const std::map<int, Accumulator>& by_rank = matched ? named : all;
  if (!matched && models_seen.size() > 1) {
    for (const std::string& m : models_seen) {
      if (snapshot.unmatched_models.size() == 8) break;
      snapshot.unmatched_models.push_back(m);
    }
  }
  snapshot.ranks.reserve(by_rank.size());
  for (const auto& [rank, acc] : by_rank) {
    std::array<std::optional<double>, kFieldCount> merged;
    for (std::size_t f = 0; f < kFieldCount; ++f) {
      merged[f] = acc.current[f] ? acc.current[f] : acc.legacy[f];
      if (!acc.current[f] && acc.legacy[f]) snapshot.legacy_names = true;
    }
    snapshot.ranks.push_back(RankMetrics{
        .rank = rank,
        .running = merged[kRunning],
        .waiting = merged[kWaiting],
        .kv_cache_usage = merged[kKvUsage],
        .prefix_cache_queries = merged[kQueries],
        .prefix_cache_hits = merged[kHits],
        .prompt_tokens = merged[kPromptTokens],
        .generation_tokens = merged[kGenerationTokens],
    });
  }
  snapshot.skipped_lines = reader.skipped_lines();
  snapshot.first_skipped_line = reader.first_skipped_line();
  return snapshot;
}

}  // namespace lmwarden::telemetry
