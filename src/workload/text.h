// Synthetic text of a given size in the simulator's tokens.
//
// A coding agent's prompt is mostly prose instructions, source code and tool
// output. The generator mixes sentence lines and code-like lines drawn from a
// fixed vocabulary, so the pseudo-tokenizer sees the same mix of words,
// identifiers, numbers and punctuation it would on real traffic (≈ 4 bytes per
// token). Sizes are measured with engine::count_tokens, not estimated, so a
// "6k-token message" is 6k tokens to the simulated engine too.
#pragma once

#include <cstddef>
#include <string>

#include "workload/random.h"

namespace lmwarden::workload {

// Text of exactly `tokens` pseudo-tokenizer tokens (engine::count_tokens),
// ending in a newline when tokens > 1. Deterministic in the Rng's state.
//
// Exactness holds because every line starts with a letter and ends in '\n':
// the tokenizer never merges a piece across such a boundary, so the count of
// the whole is the sum of the counts of its lines.
std::string synthetic_text(Rng& rng, std::size_t tokens);

}  // namespace lmwarden::workload
