#include "engine/output_text.h"

#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>

#include "engine/tokenizer.h"

namespace lmwarden::engine {
namespace {

// Four letters at most, so " word" is one piece of the tokenizer.
constexpr std::array<std::string_view, 48> kWords{
    "the",  "code", "test", "file", "line", "call", "then", "this", "that", "with", "from", "into",
    "we",   "can",  "use",  "it",   "is",   "to",   "of",   "and",  "a",    "in",   "for",  "on",
    "path", "read", "send", "run",  "fix",  "add",  "new",  "old",  "each", "loop", "type", "data",
    "map",  "key",  "next", "step", "once", "here", "will", "now",  "all",  "its",  "one",  "set"};

constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Pieces with and without the leading space, and the punctuation marks.
struct PieceTable {
  std::array<std::string, kWords.size()> spaced;
  std::unordered_map<TokenId, std::string_view> by_id;

  PieceTable() {
    for (std::size_t i = 0; i < kWords.size(); ++i) {
      spaced[i] = " " + std::string(kWords[i]);
      by_id.emplace(piece_token_id(spaced[i]), spaced[i]);
      by_id.emplace(piece_token_id(kWords[i]), kWords[i]);
    }
    by_id.emplace(piece_token_id("."), ".");
    by_id.emplace(piece_token_id(","), ",");
  }
};

const PieceTable& table() {
  static const PieceTable t;
  return t;
}

std::uint64_t piece_hash(std::uint64_t output_seed, std::int32_t index) noexcept {
  return mix(output_seed ^ mix(static_cast<std::uint64_t>(index)));
}

// About one sentence end per 14 tokens and one comma per 20.
std::string_view drawn_mark(std::uint64_t h) noexcept {
  const std::uint64_t r = h % 140;
  if (r < 10) return ".";
  if (r < 17) return ",";
  return {};
}

}  // namespace

std::string_view output_piece(std::uint64_t output_seed, std::int32_t index) noexcept {
  const std::uint64_t h = piece_hash(output_seed, index);
  const std::size_t word = (h >> 8) % kWords.size();
  if (index == 0) return kWords[word];
  // Two marks in a row would tokenize as one piece (".,"), so the reply sent
  // back would stop matching the generated ids there. A mark is drawn only
  // where the previous position drew a word; that decides from the draws
  // alone, and a demoted mark is a word, so no two marks are ever adjacent.
  const std::string_view mark = drawn_mark(h);
  if (!mark.empty() && (index == 1 || drawn_mark(piece_hash(output_seed, index - 1)).empty()))
    return mark;
  return table().spaced[word];
}

TokenId output_token(std::uint64_t output_seed, std::int32_t index) noexcept {
  return piece_token_id(output_piece(output_seed, index));
}

std::optional<std::string_view> output_piece_of(TokenId id) noexcept {
  const auto& by_id = table().by_id;
  if (auto it = by_id.find(id); it != by_id.end()) return it->second;
  return std::nullopt;
}

OutputPlan plan_output(std::uint64_t output_seed, std::int32_t max_tokens,
                       double early_stop_probability) noexcept {
  max_tokens = std::max(max_tokens, 1);
  const std::uint64_t h = mix(output_seed ^ 0x5eed5eed5eed5eedull);
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  if (max_tokens > 1 && u < early_stop_probability) {
    const auto len =
        1 + static_cast<std::int32_t>(mix(h) % static_cast<std::uint64_t>(max_tokens - 1));
    return {.num_tokens = len, .finish = FinishReason::kStop};
  }
  return {.num_tokens = max_tokens, .finish = FinishReason::kLength};
}

}  // namespace lmwarden::engine
