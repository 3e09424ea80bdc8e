// Named hardware profiles: a model on a GPU, reduced to the numbers the engine
// model needs. The derivation of every number is written next to it in
// hardware_profile.cpp and summarised in docs/simulator.md.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "engine/step_time_model.h"

namespace lmwarden::engine {

struct HardwareProfile {
  std::string_view name;
  std::string_view description;
  std::int32_t num_gpu_blocks = 0;             // KV cache capacity per replica, in blocks
  std::int32_t block_size = 16;                // tokens per KV block (vLLM default)
  std::int32_t max_num_seqs = 256;             // sequences per batch
  std::int32_t max_num_batched_tokens = 2048;  // token budget per step (chunked prefill)
  std::int32_t max_model_len = 32768;          // longest prompt + output accepted
  std::int64_t kv_bytes_per_token = 0;         // for the record and for /metrics info
  StepTimeModel step_time;
};

inline constexpr std::string_view kDefaultProfile = "a4000-qwen3-4b";

// Every profile, the default first.
std::span<const HardwareProfile> hardware_profiles() noexcept;

// nullptr when no profile has that name.
const HardwareProfile* find_hardware_profile(std::string_view name) noexcept;

}  // namespace lmwarden::engine
