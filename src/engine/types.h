// Vocabulary shared by every part of the simulated engine.
#pragma once

#include <cstdint>
#include <string_view>

namespace lmwarden::engine {

using TokenId = std::uint32_t;
using RequestId = std::uint64_t;
using BlockId = std::int32_t;
using BlockHash = std::uint64_t;
// Virtual time in seconds. The engine never reads a clock: whoever drives it
// (the real-time server, the offline evaluator) says what time it is.
using Seconds = double;

// Why a request stopped, with vLLM's spelling (the `finished_reason` label of
// `vllm:request_success_total` and the OpenAI `finish_reason`).
enum class FinishReason : std::uint8_t { kStop, kLength, kAbort, kError };
inline constexpr int kNumFinishReasons = 4;

constexpr std::string_view to_string(FinishReason r) noexcept {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

}  // namespace lmwarden::engine
