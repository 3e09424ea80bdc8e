#include "engine/hardware_profile.h"

#include <array>

namespace lmwarden::engine {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Bytes of K and V one token occupies across all layers:
// layers × KV heads × head dim × 2 (K and V) × bytes per element.
constexpr std::int64_t kv_bytes_per_token(int layers, int kv_heads, int head_dim, int dtype_bytes) {
  return std::int64_t{layers} * kv_heads * head_dim * 2 * dtype_bytes;
}

// Qwen3-4B and Qwen3-8B share the attention shape: 36 layers, 8 KV heads (GQA),
// head dim 128, bf16 → 36·8·128·2·2 = 147,456 B = 144 KiB per token.
constexpr std::int64_t kQwen3KvBytes = kv_bytes_per_token(36, 8, 128, 2);
static_assert(kQwen3KvBytes == 144 * 1024);

constexpr std::int32_t blocks_for(double kv_gib, std::int64_t bytes_per_token, int block_size) {
  return static_cast<std::int32_t>(kv_gib * kGiB / static_cast<double>(bytes_per_token)) /
         block_size;
}

// --- a4000-qwen3-4b -------------------------------------------------------
// RTX A4000: 16 GB GDDR6 (≈ 16.0 GiB visible), 448 GB/s, 76.7 dense bf16
// tensor TFLOP/s. vLLM with gpu_memory_utilization 0.9 claims 14.4 GiB; the
// Qwen3-4B weights (4.02 B params × 2 B) take 7.5 GiB; activations at 2048
// batched tokens, CUDA graphs and the allocator keep ≈ 1.4 GiB. That leaves
// ≈ 5.5 GiB of KV: 5.5 GiB / 144 KiB = 40,049 tokens = 2,503 blocks of 16.
// Step time:
//   t0 = 8.04 GB of weights / (448 GB/s × 0.8 achieved) ≈ 22 ms per step
//        (≈ 45 tokens/s for a lone stream, what A4000 owners report);
//   b  = 147,456 B / (448 GB/s × 0.8) ≈ 0.41 µs per context token read;
//   a  = 2 × 4.02 GFLOP / (76.7 TFLOP/s × 35 % MFU) ≈ 0.30 ms per prompt
//        token (≈ 3,300 prefill tokens/s);
//   c  = 60 µs per sequence (sampling, input preparation).
// Scheduler: max_num_batched_tokens 2048, max_num_seqs 256; max_model_len
// 32768 because 40,960 (the model's native window) does not fit the cache.
constexpr double kA4000KvGiB = 5.5;

// --- h100-qwen3-8b --------------------------------------------------------
// H100 SXM: 80 GB HBM3 (≈ 79.6 GiB visible), 3.35 TB/s, 989 dense bf16
// TFLOP/s. 0.9 × 79.6 = 71.6 GiB; Qwen3-8B weights (8.19 B × 2 B) 15.3 GiB;
// activations at 8192 batched tokens and CUDA graphs ≈ 4.3 GiB. KV ≈ 52 GiB:
// 52 GiB / 144 KiB = 378,652 tokens = 23,665 blocks.
// Step time:
//   t0 = 16.4 GB / (3.35 TB/s × 0.8) ≈ 6.1 ms, plus ≈ 0.9 ms of scheduling
//        and launch overhead that no longer hides behind the GPU → 7 ms;
//   b  = 147,456 B / (3.35 TB/s × 0.8) ≈ 55 ns per context token;
//   a  = 2 × 8.19 GFLOP / (989 TFLOP/s × 40 % MFU) ≈ 41 µs per prompt token
//        (≈ 24k prefill tokens/s);
//   c  = 30 µs per sequence.
// Scheduler: vLLM V1's defaults on an H100 for the API server:
// max_num_batched_tokens 8192, max_num_seqs 1024; max_model_len 40960.
constexpr double kH100KvGiB = 52.0;

constexpr std::array<HardwareProfile, 2> kProfiles{{
    {
        .name = "a4000-qwen3-4b",
        .description = "Qwen3-4B bf16 on a 16 GB RTX A4000 (448 GB/s), ~40k tokens of KV",
        .num_gpu_blocks = blocks_for(kA4000KvGiB, kQwen3KvBytes, 16),
        .block_size = 16,
        .max_num_seqs = 256,
        .max_num_batched_tokens = 2048,
        .max_model_len = 32768,
        .kv_bytes_per_token = kQwen3KvBytes,
        .step_time = {.fixed = 0.022,
                      .per_prefill_token = 0.30e-3,
                      .per_context_token = 0.41e-6,
                      .per_sequence = 60e-6},
    },
    {
        .name = "h100-qwen3-8b",
        .description = "Qwen3-8B bf16 on an 80 GB H100 SXM (3.35 TB/s), ~379k tokens of KV",
        .num_gpu_blocks = blocks_for(kH100KvGiB, kQwen3KvBytes, 16),
        .block_size = 16,
        .max_num_seqs = 1024,
        .max_num_batched_tokens = 8192,
        .max_model_len = 40960,
        .kv_bytes_per_token = kQwen3KvBytes,
        .step_time = {.fixed = 0.007,
                      .per_prefill_token = 41e-6,
                      .per_context_token = 55e-9,
                      .per_sequence = 30e-6},
    },
}};

static_assert(kProfiles[0].num_gpu_blocks == 2503);
static_assert(kProfiles[1].num_gpu_blocks == 23665);
// vLLM refuses to start when one full-length sequence cannot fit the cache.
static_assert(kProfiles[0].max_model_len <= kProfiles[0].num_gpu_blocks * 16);
static_assert(kProfiles[1].max_model_len <= kProfiles[1].num_gpu_blocks * 16);

}  // namespace

std::span<const HardwareProfile> hardware_profiles() noexcept {
  return kProfiles;
}

const HardwareProfile* find_hardware_profile(std::string_view name) noexcept {
  for (const auto& p : kProfiles) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace lmwarden::engine
