#include "engine/tokenizer.h"

#include "common/hash.h"

namespace lmwarden::engine {
namespace {

enum class CharClass { kLetter, kDigit, kSpace, kWhitespace, kPunct };

constexpr CharClass classify(unsigned char c) noexcept {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80) {
    return CharClass::kLetter;
  }
  if (c >= '0' && c <= '9') return CharClass::kDigit;
  if (c == ' ') return CharClass::kSpace;
  if (c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v') return CharClass::kWhitespace;
  return CharClass::kPunct;
}

constexpr std::size_t kMaxWordChars = 4;  // letters in one piece (plus a leading space)
constexpr std::size_t kMaxDigits = 3;     // as Qwen and GPT-4 split numbers
constexpr std::size_t kMaxPunct = 2;
constexpr std::size_t kMaxWhitespace = 4;

// Length of the piece starting at `i`.
std::size_t piece_length(std::string_view s, std::size_t i) noexcept {
  const std::size_t n = s.size();
  auto cls = [&](std::size_t k) { return classify(static_cast<unsigned char>(s[k])); };
  auto run = [&](std::size_t start, CharClass c, std::size_t max) {
    std::size_t k = start;
    while (k < n && k - start < max && cls(k) == c) ++k;
    return k - start;
  };
  const CharClass c = cls(i);
  switch (c) {
    case CharClass::kLetter:
      return run(i, CharClass::kLetter, kMaxWordChars);
    case CharClass::kDigit:
      return run(i, CharClass::kDigit, kMaxDigits);
    case CharClass::kPunct:
      return run(i, CharClass::kPunct, kMaxPunct);
    case CharClass::kSpace:
      // " word": a single space joins the letters after it.
      if (i + 1 < n && cls(i + 1) == CharClass::kLetter) {
        return 1 + run(i + 1, CharClass::kLetter, kMaxWordChars);
      }
      [[fallthrough]];
    case CharClass::kWhitespace: {
      std::size_t k = i;
      while (k < n && k - i < kMaxWhitespace) {
        const CharClass ck = cls(k);
        if (ck != CharClass::kSpace && ck != CharClass::kWhitespace) break;
        // Leave the last space before a word to that word.
        if (ck == CharClass::kSpace && k > i && k + 1 < n && cls(k + 1) == CharClass::kLetter)
          break;
        ++k;
      }
      return k - i;
    }
  }
  return 1;
}

}  // namespace

TokenId piece_token_id(std::string_view piece) noexcept {
  return static_cast<TokenId>(stable_hash(piece) % kVocabSize);
}

void tokenize_append(std::string_view text, std::vector<TokenId>& out) {
  out.reserve(out.size() + text.size() / 3 + 1);
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = piece_length(text, i);
    out.push_back(piece_token_id(text.substr(i, len)));
    i += len;
  }
}

std::vector<TokenId> tokenize(std::string_view text) {
  std::vector<TokenId> out;
  tokenize_append(text, out);
  return out;
}

std::size_t count_tokens(std::string_view text) noexcept {
  std::size_t count = 0;
  for (std::size_t i = 0; i < text.size(); i += piece_length(text, i)) ++count;
  return count;
}

}  // namespace lmwarden::engine
