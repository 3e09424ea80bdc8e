// A deterministic pseudo-tokenizer. The simulator needs token counts that look
// like a real BPE tokenizer's (about four characters per token on English and
// code) and, above all, prefix stability: two prompts that share a text prefix
// share the token prefix, so the prefix cache behaves as it does on real
// traffic. No vocabulary file, no allocation beyond the output.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "engine/types.h"

namespace lmwarden::engine {

// Size of the id space (Qwen3's vocabulary), so ids look plausible.
inline constexpr TokenId kVocabSize = 151'643;

// Splits greedily, left to right, into pieces; each piece's id is a hash of
// its bytes. Pieces: an optional single leading space and up to four more
// letters (bytes ≥ 0x80 count as letters, so UTF-8 text stays whole); up to
// three digits; up to two punctuation characters; up to four whitespace
// characters, a lone trailing space being kept for the word that follows.
// A piece's end depends only on the bytes up to one past it, so appending text
// can change only the last token of the shorter tokenization.
std::vector<TokenId> tokenize(std::string_view text);
void tokenize_append(std::string_view text, std::vector<TokenId>& out);
std::size_t count_tokens(std::string_view text) noexcept;

// The id of one piece, as tokenize would give it.
TokenId piece_token_id(std::string_view piece) noexcept;

}  // namespace lmwarden::engine
