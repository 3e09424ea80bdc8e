// One simulated vLLM engine (one data-parallel rank) on a virtual clock.
//
// The engine never reads a clock and never blocks. A driver adds requests at a
// time it names, then calls step(now) whenever the engine is free: the step
// schedules a batch (scheduler.h), prices it (step_time_model.h) and applies
// it at once, returning the tokens that become visible at now + duration. The
// driver must not call step again before that end time (the GPU is busy). The
// real-time server sleeps until the end and then streams the tokens; the
// offline evaluator just jumps its event clock there.
//
// Requests are owned by the engine from add_request until their last token
// (finished) or abort_request; their ids must be unique among live requests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_stats.h"
#include "engine/hardware_profile.h"
#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"
#include "engine/step_time_model.h"

namespace lmwarden::engine {

struct EngineConfig {
  std::int32_t num_gpu_blocks = 2503;
  std::int32_t block_size = 16;
  std::int32_t max_num_seqs = 256;
  std::int32_t max_num_batched_tokens = 2048;
  std::int32_t max_model_len = 32768;
  bool enable_prefix_caching = true;
  StepTimeModel step_time;
  // Seeds the output of every request (text and early stops). Engines that
  // share a seed give a prompt the same output, whichever of them serves it.
  std::uint64_t seed = 0;
  double early_stop_probability = 0.0;

  static EngineConfig from_profile(const HardwareProfile& profile);
};

// Why an engine so configured could not serve its longest context (the KV
// cache holds fewer tokens than max_model_len), as vLLM refuses to start
// then; none when it can.
std::optional<std::string> cache_shortfall(const EngineConfig& config);

struct NewRequest {
  RequestId id = 0;
  std::vector<TokenId> prompt;
  // Output cap; ≤ 0 or more than the context allows means "up to the context
  // length" (max_model_len − prompt), as vLLM does when max_tokens is absent.
  std::int32_t max_tokens = 0;
  // Overrides the output seed derived from the engine seed and the prompt.
  std::optional<std::uint64_t> output_seed;
};

enum class AddStatus : std::uint8_t { kOk, kDuplicateId, kEmptyPrompt, kPromptTooLong };

struct AddResult {
  AddStatus status = AddStatus::kOk;
  std::int32_t prompt_tokens = 0;
  std::int32_t max_tokens = 0;  // the effective cap
  bool ok() const noexcept { return status == AddStatus::kOk; }
};

// One token produced for one request by a step.
struct TokenOutput {
  RequestId id = 0;
  TokenId token = 0;
  std::int32_t index = 0;  // position in the output; 0 is the first token
  std::int32_t num_prompt_tokens = 0;
  std::int32_t num_cached_tokens = 0;    // prompt tokens served from the prefix cache
  std::optional<FinishReason> finished;  // set on the request's last token
};

struct StepResult {
  Seconds start = 0.0;
  Seconds duration = 0.0;  // 0 when there was nothing to run
  BatchShape shape;
  std::int32_t num_scheduled_tokens = 0;  // within max_num_batched_tokens
  std::vector<TokenOutput> outputs;
  std::vector<RequestId> preempted;

  bool idle() const noexcept { return shape.empty(); }
  Seconds end() const noexcept { return start + duration; }
};

class Engine {
 public:
  explicit Engine(EngineConfig config);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  AddResult add_request(NewRequest request, Seconds now);
  // Drops a live request and frees its blocks; counted as finished "abort".
  // False when no such request is live (already finished, say).
  bool abort_request(RequestId id);

  // Runs one step starting at `now` (see the file comment).
  StepResult step(Seconds now);

  bool has_unfinished_requests() const noexcept { return scheduler_.has_requests(); }
  std::int32_t num_running() const noexcept { return scheduler_.num_running(); }
  std::int32_t num_waiting() const noexcept { return scheduler_.num_waiting(); }
  double kv_cache_usage() const noexcept { return kv_.usage(); }
  const EngineCounters& counters() const noexcept { return counters_; }
  const EngineConfig& config() const noexcept { return config_; }
  const KvCacheManager& kv_cache() const noexcept { return kv_; }
  const Scheduler& scheduler() const noexcept { return scheduler_; }
  // Prompt tokens a request with this prompt would find cached now.
  std::int32_t probe_cached_prefix(std::span<const TokenId> prompt) const {
    return kv_.probe_cached_prefix(prompt);
  }
  // A live request, or nullptr.
  const RequestState* find(RequestId id) const noexcept;

 private:
  EngineConfig config_;
  std::int32_t context_limit_;  // max_model_len, capped by what the cache can hold
  KvCacheManager kv_;
  Scheduler scheduler_;
  std::unordered_map<RequestId, std::unique_ptr<RequestState>> requests_;
  EngineCounters counters_;
};

}  // namespace lmwarden::engine
