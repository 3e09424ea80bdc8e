// Deterministic model output. Each generated token is one piece of a small
// English-like vocabulary, chosen by a hash of the request's output seed and
// the token's position, so the same request yields the same text on every
// replica and every run. The pieces are whole tokens of the pseudo-tokenizer:
// an assistant reply sent back in the next turn tokenizes to the very ids the
// engine generated, so its full blocks hit the prefix cache as they do on vLLM.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/types.h"

namespace lmwarden::engine {

// The piece generated at `index` (0-based) of an output stream. Pieces after
// the first carry their leading space.
std::string_view output_piece(std::uint64_t output_seed, std::int32_t index) noexcept;

// The id of output_piece(seed, index).
TokenId output_token(std::uint64_t output_seed, std::int32_t index) noexcept;

// The text of an output token id; nullopt for ids that no output piece has.
std::optional<std::string_view> output_piece_of(TokenId id) noexcept;

// How long an output runs: max_tokens ("length"), or with probability
// `early_stop_probability` a uniformly drawn shorter length ("stop", as if the
// model emitted its end-of-sequence token).
struct OutputPlan {
  std::int32_t num_tokens = 0;
  FinishReason finish = FinishReason::kLength;
};
OutputPlan plan_output(std::uint64_t output_seed, std::int32_t max_tokens,
                       double early_stop_probability) noexcept;

}  // namespace lmwarden::engine
