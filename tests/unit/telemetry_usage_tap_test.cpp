#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "telemetry/usage_tap.h"
#include "telemetry_stream_samples.h"

namespace lmwarden::telemetry {
namespace {

// Feeds each piece from a buffer that is scribbled over right after, as a
// relay reusing its read buffer would: a tap that kept a view would misread.
RequestUsage tap_pieces(const std::vector<std::string_view>& pieces,
                        BodyFormat format = BodyFormat::kAuto) {
  UsageTap tap(format);
  std::string buffer;
  for (std::string_view piece : pieces) {
    buffer.assign(piece);
    tap.feed(buffer);
    std::fill(buffer.begin(), buffer.end(), '#');
  }
  tap.finish();
  return tap.usage();
}

RequestUsage tap_whole(std::string_view body) {
  return tap_pieces({body});
}

std::string with_crlf(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out.push_back('\r');
    out.push_back(c);
  }
  return out;
}

// The same bytes give the same usage however they are cut: every cut into two
// pieces, byte by byte, and random cuts into many pieces.
void expect_split_invariant(std::string_view body, const RequestUsage& expected) {
  for (std::size_t cut = 0; cut <= body.size(); ++cut) {
    ASSERT_EQ(tap_pieces({body.substr(0, cut), body.substr(cut)}), expected) << "cut at " << cut;
  }
  std::vector<std::string_view> bytes;
  for (std::size_t i = 0; i < body.size(); ++i) bytes.push_back(body.substr(i, 1));
  ASSERT_EQ(tap_pieces(bytes), expected) << "byte by byte";

  std::mt19937 rng(42);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::string_view> pieces;
    std::size_t pos = 0;
    while (pos < body.size()) {
      const std::size_t len = std::uniform_int_distribution<std::size_t>(1, 40)(rng);
      pieces.push_back(body.substr(pos, std::min(len, body.size() - pos)));
      pos += pieces.back().size();
    }
    ASSERT_EQ(tap_pieces(pieces), expected) << "random round " << round;
  }
}

TEST(UsageTap, OpenAiStreamWithUsageChunk) {
  const RequestUsage expected{.prompt_tokens = 1200,
                              .cached_tokens = 1024,
                              .completion_tokens = 50,
                              .cache_measured = true,
                              .cached_reported = true};
  const std::string stream = samples::openai_stream();
  EXPECT_EQ(tap_whole(stream), expected);
  EXPECT_EQ(expected.computed_tokens(), 176u);
  expect_split_invariant(stream, expected);
  expect_split_invariant(with_crlf(stream), expected);
}

TEST(UsageTap, OpenAiStreamWithoutUsageIsNotMeasured) {
  const std::string stream = samples::openai_stream_without_usage();
  UsageTap tap;
  tap.feed(stream);
  tap.finish();
  EXPECT_EQ(tap.usage(), RequestUsage{});
  EXPECT_TRUE(tap.saw_done());
  EXPECT_EQ(tap.events(), 4u);
  expect_split_invariant(stream, RequestUsage{});
}

TEST(UsageTap, OpenAiJsonWithoutCachedCountIsMeasuredAsZeroCached) {
  const RequestUsage expected{.prompt_tokens = 300,
                              .cached_tokens = 0,
                              .completion_tokens = 10,
                              .cache_measured = true,
                              .cached_reported = false};
  EXPECT_EQ(tap_whole(samples::kOpenAiJson), expected);
  expect_split_invariant(samples::kOpenAiJson, expected);
  // Leading whitespace before the body does not confuse detection.
  EXPECT_EQ(tap_pieces({"\n ", samples::kOpenAiJson}), expected);
}

TEST(UsageTap, AnthropicStreamCombinesStartAndDelta) {
  const RequestUsage expected{.prompt_tokens = 1200,
                              .cached_tokens = 1024,
                              .completion_tokens = 15,
                              .cache_measured = true,
                              .cached_reported = true};
  EXPECT_EQ(tap_whole(samples::kAnthropicStream), expected);
  expect_split_invariant(samples::kAnthropicStream, expected);
  expect_split_invariant(with_crlf(samples::kAnthropicStream), expected);
}

TEST(UsageTap, AnthropicJson) {
  const RequestUsage expected{.prompt_tokens = 500,
                              .cached_tokens = 400,
                              .completion_tokens = 7,
                              .cache_measured = true,
                              .cached_reported = true};
  EXPECT_EQ(tap_whole(samples::kAnthropicJson), expected);
  expect_split_invariant(samples::kAnthropicJson, expected);
}

TEST(UsageTap, ResponsesApiStreamAndJson) {
  const RequestUsage stream{.prompt_tokens = 900,
                            .cached_tokens = 512,
                            .completion_tokens = 20,
                            .cache_measured = true,
                            .cached_reported = true};
  EXPECT_EQ(tap_whole(samples::kResponsesStream), stream);
  expect_split_invariant(samples::kResponsesStream, stream);
  const RequestUsage body{.prompt_tokens = 64,
                          .cached_tokens = 48,
                          .completion_tokens = 3,
                          .cache_measured = true,
                          .cached_reported = true};
  EXPECT_EQ(tap_whole(samples::kResponsesJson), body);
  expect_split_invariant(samples::kResponsesJson, body);
}

TEST(UsageTap, StreamCutBeforeTheFinalBlankLineStillCounts) {
  std::string stream(samples::kOpenAiContent);
  stream += samples::kOpenAiUsageChunk.substr(0, samples::kOpenAiUsageChunk.size() - 2);
  EXPECT_EQ(tap_whole(stream).prompt_tokens, 1200u);
}

TEST(UsageTap, MultiLineDataEventIsJoined) {
  const std::string_view stream =
      "data: {\"choices\":[],\n"
      "data:  \"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n";
  const RequestUsage u = tap_whole(stream);
  EXPECT_EQ(u.prompt_tokens, 7u);
  EXPECT_EQ(u.completion_tokens, 2u);
  expect_split_invariant(stream, u);
}

TEST(UsageTap, ErrorsAndJunkMeasureNothing) {
  EXPECT_EQ(tap_whole("{\"error\":{\"message\":\"boom\",\"type\":\"BadRequestError\"}}"),
            RequestUsage{});
  EXPECT_EQ(tap_whole("{\"usage\":{\"prompt_tokens\":5"), RequestUsage{});  // truncated body
  EXPECT_EQ(tap_whole("data: {\"usage\": oops}\n\n"), RequestUsage{});
  EXPECT_EQ(tap_whole(std::string_view("\x00\xff garbage\n\n\n", 14)), RequestUsage{});
  EXPECT_EQ(tap_whole(""), RequestUsage{});
  // Negative, fractional and absurd counts are not token counts.
  const RequestUsage odd = tap_whole(
      "{\"usage\":{\"prompt_tokens\":-4,\"completion_tokens\":2.5,\"prompt_tokens_details\":"
      "{\"cached_tokens\":1e300}}}");
  EXPECT_TRUE(odd.cache_measured);
  EXPECT_EQ(odd.prompt_tokens, 0u);
  EXPECT_EQ(odd.completion_tokens, 0u);
}

TEST(UsageTap, CachedNeverExceedsPrompt) {
  const RequestUsage u = tap_whole(
      "{\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1,"
      "\"prompt_tokens_details\":{\"cached_tokens\":64}}}");
  EXPECT_EQ(u.cached_tokens, 10u);
  EXPECT_EQ(u.computed_tokens(), 0u);
}

TEST(UsageTap, ExplicitFormatOverridesDetection) {
  // A JSON body declared as an event stream carries no data lines.
  EXPECT_FALSE(tap_pieces({samples::kAnthropicJson}, BodyFormat::kEventStream).cache_measured);
  EXPECT_TRUE(tap_pieces({samples::kAnthropicStream}, BodyFormat::kEventStream).cache_measured);
}

TEST(UsageTap, OversizedEventIsSkippedNotBuffered) {
  std::string stream = "data: {\"pad\":\"";
  stream.append(kMaxDocumentBytes, 'x');
  stream += "\",\"usage\":{\"prompt_tokens\":1}}\n\n";
  stream += samples::kOpenAiUsageChunk;
  UsageTap tap;
  for (std::size_t pos = 0; pos < stream.size(); pos += 1 << 16) {
    tap.feed(std::string_view(stream).substr(pos, 1 << 16));
  }
  tap.finish();
  EXPECT_EQ(tap.oversized(), 1u);
  EXPECT_EQ(tap.usage().prompt_tokens, 1200u);
}

TEST(UsageJson, MentionsUsageFindsTheQuotedKeyAnywhere) {
  EXPECT_TRUE(mentions_usage("\"usage\""));
  EXPECT_TRUE(mentions_usage("{\"choices\":[],\"usage\":{\"prompt_tokens\":1}}"));
  EXPECT_TRUE(mentions_usage(std::string(5000, '"') + "\"usage\""));
  EXPECT_FALSE(mentions_usage(""));
  EXPECT_FALSE(mentions_usage("usage"));
  EXPECT_FALSE(mentions_usage("{\"usages\":1,\"usage_\":2,\"Usage\":3}"));
  EXPECT_FALSE(mentions_usage("\"usag\"e\""));
  // Against a plain search, on text made of pieces of the key (near misses
  // and hits alike).
  std::mt19937 rng(7);
  const std::string_view pieces[] = {"\"",     "u",   "usage", "\"usag",
                                     "sage\"", "e\"", "x",     "\"usage\""};
  int hits = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    for (int n = static_cast<int>(rng() % 12); n > 0; --n)
      text += pieces[rng() % std::size(pieces)];
    const bool expected = text.find("\"usage\"") != std::string::npos;
    hits += expected;
    EXPECT_EQ(mentions_usage(text), expected) << text;
  }
  EXPECT_GT(hits, 1000);
  EXPECT_LT(hits, 19000);
}

// Found by fuzz/usage_tap_fuzz.cpp: a usage object whose nested string is cut
// and resumed. Must read as nothing, not crash the JSON reader.
TEST(UsageTap, MalformedNestedUsageIsIgnored) {
  const std::string_view stream =
      "data: "
      "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
      "\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"total_tokens\":1250,\"completion_"
      "tokens\":50,\"prompt_tes\":[],\"usage\":{\"prompt_tokens\":1200,\"total_tokens\":1250,"
      "\"completion_tokens\":50,\"prompt_tokens_details\":{\"cached_tokeokens_details\":{\"cached_"
      "tokens\":1024}}}\n\n";
  const RequestUsage u = tap_whole(stream);
  EXPECT_FALSE(u.cache_measured);
  expect_split_invariant(stream, u);
}

}  // namespace
}  // namespace lmwarden::telemetry
