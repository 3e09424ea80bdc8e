// Tokenizer, chat template and output text.
#include <gtest/gtest.h>

#include <string>

#include "engine/chat_template.h"
#include "engine/output_text.h"
#include "engine/tokenizer.h"

namespace lmwarden::engine {
namespace {

constexpr std::string_view kEnglish =
    "The scheduler admits waiting requests while the token budget lasts, and a request that "
    "no longer fits in the cache is preempted and later recomputed from its prefix. Operators "
    "should keep concurrent conversations times their typical context under the total KV cache.";

TEST(Tokenizer, IsDeterministicAndAboutFourCharactersPerTokenOnEnglish) {
  const auto a = tokenize(kEnglish);
  EXPECT_EQ(a, tokenize(kEnglish));
  EXPECT_EQ(a.size(), count_tokens(kEnglish));
  const double chars_per_token =
      static_cast<double>(kEnglish.size()) / static_cast<double>(a.size());
  EXPECT_GT(chars_per_token, 3.3);
  EXPECT_LT(chars_per_token, 4.8);
  for (TokenId t : a) EXPECT_LT(t, kVocabSize);
}

TEST(Tokenizer, ASharedTextPrefixGivesASharedTokenPrefix) {
  const std::string base(kEnglish);
  const auto whole = tokenize(base);
  for (std::size_t cut = 1; cut < base.size(); cut += 7) {
    const auto head = tokenize(std::string_view(base).substr(0, cut));
    ASSERT_FALSE(head.empty());
    // Everything but the last token of the shorter text is shared.
    ASSERT_TRUE(std::equal(head.begin(), head.end() - 1, whole.begin())) << "cut at " << cut;
  }
}

TEST(Tokenizer, SplitsWordsNumbersPunctuationAndWhitespace) {
  EXPECT_EQ(count_tokens("hello"), 2u);       // "hell" "o"
  EXPECT_EQ(count_tokens(" the"), 1u);        // leading space joins
  EXPECT_EQ(count_tokens("12345"), 2u);       // "123" "45"
  EXPECT_EQ(count_tokens("{\"a\": 1}"), 6u);  // {" a ": " 1 }  → 6 pieces
  EXPECT_EQ(count_tokens("\n\n  x"), 2u);     // "\n\n " then " x"
  EXPECT_EQ(count_tokens(""), 0u);
  EXPECT_EQ(piece_token_id(" the"), tokenize(" the").front());
}

TEST(ChatTemplate, RendersSystemToolsTurnsToolResultsAndTheGenerationPrompt) {
  ChatPrompt p;
  p.messages = {
      {.role = "system", .content = "Be brief."},
      {.role = "user", .content = "List files."},
      {.role = "assistant", .content = "", .tool_calls = {R"({"name":"ls","arguments":{}})"}},
      {.role = "tool", .content = "a.txt"},
      {.role = "tool", .content = "b.txt"}};
  p.tools = {R"({"name":"ls"})"};
  const std::string out = render_chat(p);
  EXPECT_TRUE(out.starts_with("<|im_start|>system\nBe brief.\n\n# Tools\n")) << out;
  EXPECT_NE(out.find("<tools>\n{\"name\":\"ls\"}\n</tools>"), std::string::npos);
  EXPECT_NE(out.find("<|im_start|>user\nList files.<|im_end|>\n"), std::string::npos);
  EXPECT_NE(out.find("<|im_start|>assistant\n<tool_call>\n{\"name\":\"ls\",\"arguments\":{}}\n"
                     "</tool_call><|im_end|>\n"),
            std::string::npos);
  EXPECT_NE(out.find("<|im_start|>user\n<tool_response>\na.txt\n</tool_response>\n"
                     "<tool_response>\nb.txt\n</tool_response><|im_end|>\n"),
            std::string::npos);
  EXPECT_TRUE(out.ends_with("<|im_start|>assistant\n"));
}

TEST(ChatTemplate, AppendingATurnKeepsThePreviousRenderingAsAPrefix) {
  ChatPrompt p;
  p.messages = {{.role = "user", .content = "one"}};
  p.add_generation_prompt = false;
  const std::string first = render_chat(p);
  p.messages.push_back({.role = "assistant", .content = "two"});
  p.messages.push_back({.role = "user", .content = "three"});
  EXPECT_TRUE(render_chat(p).starts_with(first));
}

TEST(OutputText, IsDeterministicAndRetokenizesToTheSameIds) {
  // Long replies from many seeds: a reply sent back as history must tokenize
  // to the generated ids all the way, or its cache hit stops where it differs.
  for (std::uint64_t seed = 1; seed <= 64; ++seed) {
    std::string text;
    std::vector<TokenId> ids;
    for (int i = 0; i < 2000; ++i) {
      text += output_piece(seed, i);
      ids.push_back(output_token(seed, i));
      ASSERT_EQ(output_piece_of(ids.back()), output_piece(seed, i));
    }
    ASSERT_EQ(tokenize(text), ids) << "seed " << seed;
  }
  std::string text;
  for (int i = 0; i < 200; ++i) text += output_piece(42, i);
  std::string other;
  for (int i = 0; i < 200; ++i) other += output_piece(43, i);
  EXPECT_NE(text, other);
}

TEST(OutputText, PlansEarlyStopsWithTheConfiguredProbability) {
  int stops = 0;
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    const OutputPlan plan = plan_output(seed, 100, 0.25);
    if (plan.finish == FinishReason::kStop) {
      ++stops;
      EXPECT_LT(plan.num_tokens, 100);
      EXPECT_GE(plan.num_tokens, 1);
    } else {
      EXPECT_EQ(plan.num_tokens, 100);
    }
  }
  EXPECT_NEAR(stops / 2000.0, 0.25, 0.04);
  EXPECT_EQ(plan_output(7, 100, 0.0).finish, FinishReason::kLength);
}

}  // namespace
}  // namespace lmwarden::engine
