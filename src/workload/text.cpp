#include "workload/text.h"

#include <array>
#include <string_view>

#include "engine/tokenizer.h"

namespace lmwarden::workload {
namespace {

constexpr std::array<std::string_view, 48> kWords{
    "the",     "request", "handler",  "returns", "buffer",   "when",    "stream",  "cache",
    "replica", "session", "token",    "prefix",  "while",    "update",  "config",  "parser",
    "error",   "value",   "field",    "socket",  "reader",   "writer",  "queue",   "batch",
    "test",    "should",  "because",  "after",   "before",   "every",   "offset",  "length",
    "header",  "payload", "module",   "import",  "function", "result",  "context", "worker",
    "timeout", "retry",   "upstream", "engine",  "schedule", "metrics", "history", "reply"};

constexpr std::array<std::string_view, 16> kIdentifiers{
    "parse_header", "read_chunk",  "flush_queue", "kv_blocks",   "route_request", "make_key",
    "step_time",    "num_tokens",  "last_seen",   "try_connect", "on_finish",     "cache_hit",
    "max_len",      "build_reply", "split_lines", "tie_break"};

constexpr std::array<std::string_view, 8> kKeywords{"if",    "for",  "return", "let",
                                                    "const", "auto", "while",  "match"};

constexpr std::array<std::string_view, 8> kOperators{
    " = ", " + ", " < ", " == ", " - ", " * ", " >= ", " != "};

template <typename Array>
std::string_view pick(Rng& rng, const Array& a) {
  return a[rng.below(a.size())];
}

// One line, starting with a letter and ending with '\n'.
std::string make_line(Rng& rng) {
  std::string line;
  if (rng.chance(0.45)) {
    // Code: `keyword identifier(args) op number;`
    line += pick(rng, kKeywords);
    line += ' ';
    line += pick(rng, kIdentifiers);
    line += '(';
    const int args = 1 + static_cast<int>(rng.below(3));
    for (int a = 0; a < args; ++a) {
      if (a > 0) line += ", ";
      line += pick(rng, kWords);
      line += '_';
      line += pick(rng, kWords);
    }
    line += ')';
    line += pick(rng, kOperators);
    line += std::to_string(rng.below(100000));
    line += ";\n";
  } else {
    // Prose: a sentence of 6–17 words.
    const int words = 6 + static_cast<int>(rng.below(12));
    for (int w = 0; w < words; ++w) {
      if (w > 0) line += ' ';
      line += pick(rng, kWords);
    }
    line += rng.chance(0.2) ? ", see line " + std::to_string(rng.below(2000)) + ".\n" : ".\n";
  }
  // A capital first letter, as prose would have; code lines too, harmlessly.
  line[0] = static_cast<char>(line[0] - 'a' + 'A');
  return line;
}

}  // namespace

std::string synthetic_text(Rng& rng, std::size_t tokens) {
  std::string out;
  std::size_t have = 0;
  out.reserve(tokens * 5);
  if (tokens == 1) return "A";  // too short for a line and its newline
  // Whole lines while one more surely fits and leaves two tokens for the last
  // line (a bare "\n" would merge with the previous newline); a line is well
  // under 64 tokens.
  constexpr std::size_t kLineMax = 64;
  while (have + kLineMax + 2 <= tokens) {
    const std::string line = make_line(rng);
    have += engine::count_tokens(line);
    out += line;
  }
  // Then one last line grown word by word to land on the exact count. Words
  // are letters, so each costs one or two pieces; the closing '\n' costs one.
  std::string last = "And";
  while (have + engine::count_tokens(last) + 1 < tokens) {
    last += ' ';
    last += pick(rng, kWords);
    if (have + engine::count_tokens(last) + 1 > tokens) {
      // Overshot by a two-piece word: a single letter is always one piece.
      last.resize(last.rfind(' '));
      last += " a";
    }
  }
  if (tokens > have) {
    out += last;
    out += '\n';
  }
  return out;
}

}  // namespace lmwarden::workload
