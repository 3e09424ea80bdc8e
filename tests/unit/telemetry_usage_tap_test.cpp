#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "telemetry/usage_json.h"
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

// The key search against std::string_view::find: the key at every offset of
// texts up to 70 bytes, and a near miss there; random texts of the key's
// letters; vLLM-shaped events, each with a 'g' (in "logprobs") where the
// search stops and compares.
TEST(FindUsageKey, FindsTheFirstKeyWhereFindDoes) {
  const std::string key = "\"usage\"";
  for (std::size_t size = 0; size <= 70; ++size) {
    for (std::size_t pos = 0; pos + key.size() <= size; ++pos) {
      std::string text(size, 'x');
      text.replace(pos, key.size(), key);
      ASSERT_EQ(find_usage_key(text), pos) << "size " << size;
      text[pos + 6] = '\'';  // no longer the key
      ASSERT_EQ(find_usage_key(text), std::string_view::npos) << "size " << size << " pos " << pos;
    }
  }
  std::mt19937 rng(3);
  const std::string letters = "\"usageug:";
  for (int round = 0; round < 20000; ++round) {
    std::string text(rng() % 80, ' ');
    for (char& c : text) c = letters[rng() % letters.size()];
    ASSERT_EQ(find_usage_key(text), std::string_view(text).find(key)) << text;
  }
  const std::string delta =
      R"(data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,)"
      R"("delta":{"content":"tok"},"logprobs":null,"finish_reason":null}]})"
      "\n\n";
  std::string stream;
  for (int i = 0; i < 40; ++i) stream += delta;
  EXPECT_EQ(find_usage_key(stream), std::string_view::npos);
  const std::string last = R"(data: {"choices":[],"usage":{"prompt_tokens":3}})";
  EXPECT_EQ(find_usage_key(stream + last), stream.size() + 20);
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
  expect_split_invariant(samples::with_crlf(stream), expected);
}

TEST(UsageTap, OpenAiStreamWithoutUsageIsNotMeasured) {
  const std::string stream = samples::openai_stream_without_usage();
  UsageTap tap;
  tap.feed(stream);
  tap.finish();
  EXPECT_EQ(tap.usage(), RequestUsage{});
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
  expect_split_invariant(samples::with_crlf(samples::kAnthropicStream), expected);
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

// Asked to, the tap names the Responses response a reply carries (the
// warden remembers where it is stored): a stream's `response.id`, however
// its bytes are cut, or a body's root `id`. The other dialects' ids are not
// stored responses.
TEST(UsageTap, ReadsTheResponsesIdWhenAsked) {
  auto id_of = [](std::string_view body, std::size_t cut, bool asked = true) {
    UsageTap tap;
    if (asked) tap.read_response_id();
    tap.feed(body.substr(0, cut));
    tap.feed(body.substr(cut));
    tap.finish();
    return std::string(tap.response_id());
  };
  for (std::string_view body : {samples::kResponsesStream, samples::kResponsesJson}) {
    for (std::size_t cut = 0; cut <= body.size(); ++cut)
      ASSERT_EQ(id_of(body, cut), "resp_1") << "cut at " << cut;
    EXPECT_EQ(id_of(body, 0, /*asked=*/false), "");
  }
  const std::string openai_stream = samples::openai_stream();
  for (std::string_view body : {std::string_view(openai_stream), samples::kOpenAiJson,
                                samples::kAnthropicStream, samples::kAnthropicJson})
    EXPECT_EQ(id_of(body, body.size() / 2), "") << body;
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

// A JSON reply of several MiB (here the answer of a long generation): the tap
// keeps only the end of it, and reads the usage from there as from the whole.
// The answer's text is full of what the walk back must not mistake for JSON:
// escaped quotes and backslashes, brackets, even a usage object in words.
std::string long_json_reply(std::size_t text_bytes, std::string_view after_usage) {
  std::string body =
      R"({"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":")";
  constexpr std::string_view kText = R"(a \"quote\", a \\ backslash, {braces} [brackets] \"usage\":{\"prompt_tokens\":99} )";
  while (body.size() < text_bytes) body += kText;
  body += R"("}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}})";
  body += after_usage;
  body += "}";
  return body;
}

TEST(UsageTap, AJsonReplyLongerThanWhatIsKeptHasItsUsageReadFromItsEnd) {
  const std::string body = long_json_reply(3u << 20, R"(,"prompt_logprobs":null)");
  for (std::size_t piece : {std::size_t{16} << 10, std::size_t{7919}, body.size()}) {
    SCOPED_TRACE(piece);
    UsageTap tap;
    std::size_t most_held = 0;
    for (std::size_t pos = 0; pos < body.size(); pos += piece) {
      tap.feed(std::string_view(body).substr(pos, piece));
      most_held = std::max(most_held, tap.held_capacity());
    }
    tap.finish();
    EXPECT_EQ(tap.oversized(), 0u);
    const RequestUsage u = tap.usage();
    EXPECT_EQ(u.prompt_tokens, 7u);
    EXPECT_EQ(u.cached_tokens, 4u);
    EXPECT_EQ(u.completion_tokens, 3u);
    // Twice what is kept, and what growing a buffer by doubling adds to it:
    // not the 3 MiB of the body.
    EXPECT_LE(most_held, 4 * kJsonTailBytes + 4096) << "held " << most_held << " bytes";
  }
}

TEST(UsageTap, AUsageFieldFurtherFromTheEndThanWhatIsKeptGoesUnreadAndIsCounted) {
  // What follows the usage field is longer than what is kept for sure.
  const std::string after = R"(,"prompt_logprobs":")" + std::string(2 * kJsonTailBytes, 'x') + "\"";
  const std::string body = long_json_reply(64u << 10, after);
  UsageTap tap;
  for (std::size_t pos = 0; pos < body.size(); pos += 16u << 10)
    tap.feed(std::string_view(body).substr(pos, 16u << 10));
  tap.finish();
  EXPECT_FALSE(tap.usage().cache_measured);
  EXPECT_EQ(tap.usage().prompt_tokens, 0u);
  EXPECT_EQ(tap.oversized(), 1u);
}

TEST(UsageTap, AStringCutByTheStartOfWhatIsKeptEndsTheWalkBack) {
  // The root's last field is a string longer than what is kept, made of
  // escaped backslashes and ending with a usage object in words: however the
  // kept bytes start (inside a pair of backslashes or not), the walk back
  // must not take the escaped quotes for real ones.
  std::string body = R"({"choices":[],"note":")";
  while (body.size() < 3 * kJsonTailBytes) body += R"(\\)";
  body += R"(\"usage\":{\"prompt_tokens\":99}"})";
  for (std::size_t shift : {0, 1}) {
    SCOPED_TRACE(shift);
    const std::string shifted = body.substr(0, 14) + std::string(shift, ' ') + body.substr(14);
    UsageTap tap;
    for (std::size_t pos = 0; pos < shifted.size(); pos += 16u << 10)
      tap.feed(std::string_view(shifted).substr(pos, 16u << 10));
    tap.finish();
    EXPECT_FALSE(tap.usage().cache_measured);
    EXPECT_EQ(tap.oversized(), 1u);
  }
}

// What a plain reading of the stream finds: split into lines at "\n" (a "\r"
// before it dropped), events ended by blank lines, each event's data lines
// joined with "\n" and handed to merge_usage, as the SSE format defines it.
UsageFields oracle_fields(std::string_view stream) {
  UsageFields fields;
  std::string data;
  bool has_data = false;
  auto dispatch = [&] {
    if (has_data) {
      PaddedBuffer doc;
      doc.append(data);
      merge_usage(doc.padded(), fields);
    }
    data.clear();
    has_data = false;
  };
  std::size_t pos = 0;
  while (pos < stream.size()) {
    std::size_t end = stream.find('\n', pos);
    if (end == std::string_view::npos) end = stream.size();
    std::string_view line = stream.substr(pos, end - pos);
    pos = end + 1;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty()) {
      dispatch();
    } else if (line.starts_with("data:")) {
      line.remove_prefix(5);
      if (line.starts_with(' ')) line.remove_prefix(1);
      if (has_data) data += '\n';
      data += line;
      has_data = true;
    }
  }
  dispatch();
  return fields;
}

// Streams made of content deltas, usage events (with counts that change, so
// that which event was read shows), event: lines, comments, stray blank lines
// and multi-line data, with "\n" or "\r\n", cut anywhere: the tap, which
// passes over whole events without the key unread, reads what the plain
// reading reads.
TEST(UsageTap, RandomStreamsReadAsTheirEventsDo) {
  std::mt19937 rng(11);
  int measured = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string stream;
    for (const auto& event : samples::random_events(rng)) stream += event.text;
    if (rng() % 4 == 0) stream.resize(rng() % (stream.size() + 1));  // cut short
    if (rng() % 3 == 0) stream = samples::with_crlf(stream);
    const std::vector<std::string_view> pieces = samples::random_pieces(stream, rng);
    const RequestUsage expected = to_request_usage(oracle_fields(stream));
    measured += expected.cache_measured;
    ASSERT_EQ(tap_pieces(pieces, BodyFormat::kEventStream), expected) << "round " << round << ":\n"
                                                                      << stream;
  }
  EXPECT_GT(measured, 1000);
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

// What `read` (merge_body_usage or merge_usage) finds in `body`.
UsageFields read_fields(bool (*read)(simdjson::padded_string_view, UsageFields&),
                        std::string_view body) {
  PaddedBuffer doc;
  doc.append(body);
  UsageFields f;
  read(doc.padded(), f);
  return f;
}
UsageFields body_fields(std::string_view body) { return read_fields(merge_body_usage, body); }
UsageFields full_fields(std::string_view body) {
  return read_fields(
      [](simdjson::padded_string_view doc, UsageFields& f) { return merge_usage(doc, f); }, body);
}

TEST(UsageJson, RootUsageIsFoundFromTheEnd) {
  const std::string_view body =
      "{\"id\":\"x\",\"choices\":[{\"message\":{\"content\":\"a \\\"usage\\\":{\\\"prompt_tokens\\\""
      ":1} b\"}}],\"usage\":{\"prompt_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":8}}"
      ",\"prompt_logprobs\":null,\"kv_transfer_params\":{\"usage\":{\"prompt_tokens\":99}}}\n";
  const std::string_view found = find_root_usage_object(body);
  EXPECT_EQ(found, "{\"prompt_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":8}}");
  const UsageFields f = body_fields(body);
  EXPECT_EQ(f.prompt_tokens, 12u);
  EXPECT_EQ(f.prompt_cached_tokens, 8u);
  EXPECT_EQ(f, full_fields(body));
}

TEST(UsageJson, WhatIsNotTheRootsUsageObjectIsNotFound) {
  // Nested only; a string value "usage"; a key inside a string; escapes that
  // end a string just before a quote; usage that is not an object; no root.
  EXPECT_EQ(find_root_usage_object("{\"a\":{\"usage\":{\"prompt_tokens\":1}}}"), "");
  EXPECT_EQ(find_root_usage_object("{\"a\":\"usage\"}"), "");
  EXPECT_EQ(find_root_usage_object("{\"a\":\"\\\"usage\\\":{}\"}"), "");
  EXPECT_EQ(find_root_usage_object("{\"a\":\"x\\\\\",\"usage\":{\"b\":1}}"), "{\"b\":1}");
  EXPECT_EQ(find_root_usage_object("{\"usage\":null,\"b\":{\"c\":2}}"), "");
  EXPECT_EQ(find_root_usage_object("{\"usage\" : [ {\"c\":2} ]}"), "");
  EXPECT_EQ(find_root_usage_object("[{\"usage\":{\"c\":2}}]"), "");
  EXPECT_EQ(find_root_usage_object("{\"usage\":{\"c\":2}"), "");  // cut short
  EXPECT_EQ(find_root_usage_object(""), "");
  // Whitespace anywhere JSON allows it; the last of duplicate keys.
  EXPECT_EQ(find_root_usage_object("{ \"usage\"\n:\t{ \"a\" : 1 } , \"z\" : [ ] }\r\n"),
            "{ \"a\" : 1 }");
  EXPECT_EQ(find_root_usage_object("{\"usage\":{\"a\":1},\"usage\":{\"a\":2}}"), "{\"a\":2}");
  EXPECT_EQ(body_fields("{\"usage\":{\"prompt_tokens\":1},\"usage\":{\"prompt_tokens\":2}}")
                .prompt_tokens,
            2u);
  EXPECT_EQ(full_fields("{\"usage\":{\"prompt_tokens\":1},\"usage\":{\"prompt_tokens\":2}}")
                .prompt_tokens,
            2u);
}

TEST(UsageJson, BodyWithoutRootUsageFallsBackToTheWholeParse) {
  // A wrapper with no root usage is still read; a malformed usage object and
  // a body cut short read nothing.
  EXPECT_EQ(body_fields("{\"message\":{\"usage\":{\"input_tokens\":4}}}").input_tokens, 4u);
  EXPECT_FALSE(body_fields("{\"usage\":{\"prompt_tokens\":1,}}").seen);
  EXPECT_FALSE(body_fields("{\"usage\":{\"prompt_tokens\":5").seen);
  EXPECT_FALSE(body_fields("{\"error\":{\"message\":\"x\"}}").seen);
}

TEST(UsageJson, BodyReadTakesWhatTheWholeParseTakes) {
  // Of duplicate counts the last; of a details object's duplicate
  // cached_tokens the first; values of the wrong type read nothing; a float
  // form of a whole number counts; an escaped key is its unescaped name.
  const std::string_view bodies[] = {
      "{\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":3,\"x\":[1],"
      "\"cached_tokens\":4},\"prompt_tokens\":7,\"prompt_tokens\":8}}",
      "{\"usage\":{\"prompt_tokens\":\"12\",\"completion_tokens\":null,"
      "\"prompt_tokens_details\":[1],\"input_tokens\":3.0,\"output_tokens\":2.5,"
      "\"input_tokens_details\":{\"cached_tokens\":{\"n\":1}},\"cache_read_input_tokens\":-1}}",
      "{\"usage\":{\"prompt\\u005ftokens\":9,\"prompt_tokens_details\":null}}",
      // Spaces, zero, a null first cached_tokens, a later null count, an
      // unknown object.
      "{\"usage\":{ \"prompt_tokens\" : 0 ,\"completion_tokens\":15,\"completion_tokens\":null,"
      "\"prompt_tokens_details\":{\"cached_tokens\":null,\"cached_tokens\":5},\"x\":{\"y\":1}} }",
      // 16 digits, an exponent, deeper nesting, a non-ASCII key.
      "{\"usage\":{\"prompt_tokens\":123456789012345,\"completion_tokens\":1234567890123456}}",
      "{\"usage\":{\"prompt_tokens\":1e2,\"x\":{\"y\":{\"z\":1}},\"\xc3\xa9\":2}}",
  };
  for (std::string_view body : bodies) {
    SCOPED_TRACE(body);
    const UsageFields fast = body_fields(body);
    EXPECT_TRUE(fast.seen);
    EXPECT_EQ(fast, full_fields(body));
  }
  EXPECT_EQ(body_fields(bodies[0]).prompt_cached_tokens, 3u);
  EXPECT_EQ(body_fields(bodies[0]).prompt_tokens, 8u);
  EXPECT_EQ(body_fields(bodies[1]).input_tokens, 3u);
  EXPECT_FALSE(body_fields(bodies[1]).prompt_tokens.has_value());
  EXPECT_FALSE(body_fields(bodies[1]).output_tokens.has_value());
  EXPECT_EQ(body_fields(bodies[2]).prompt_tokens, 9u);
  EXPECT_EQ(body_fields(bodies[3]).prompt_tokens, 0u);
  EXPECT_EQ(body_fields(bodies[3]).completion_tokens, 15u);
  EXPECT_FALSE(body_fields(bodies[3]).prompt_cached_tokens.has_value());
  EXPECT_EQ(body_fields(bodies[4]).completion_tokens, 1234567890123456u);
  EXPECT_EQ(body_fields(bodies[5]).prompt_tokens, 100u);
  // Malformed usage objects read nothing.
  for (std::string_view bad :
       {"{\"usage\":{\"prompt_tokens\":01}}", "{\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":}}",
        "{\"usage\":{\"prompt_tokens\":7 \"completion_tokens\":1}}",
        "{\"usage\":{\"prompt_tokens\":7,,\"completion_tokens\":1}}", "{\"usage\":{\"prompt_tokens\":nul}}"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(body_fields(bad).seen);
  }
}

// Against the whole-document parse, on random documents built from pieces
// that make the walk's hard cases: strings holding quotes, backslashes and
// the key, nested and duplicate usage fields, arrays, whitespace. Wherever
// simdjson accepts the document as an object without a root message or
// response wrapper, the two must agree.
TEST(UsageJson, BodyReadAgreesWithTheWholeParse) {
  std::mt19937 rng(11);
  const auto pick = [&rng](std::initializer_list<std::string_view> options) {
    return *(options.begin() + rng() % options.size());
  };
  std::function<std::string(int)> value = [&](int depth) -> std::string {
    switch (rng() % (depth > 2 ? 4 : 7)) {
      case 0:
        return std::to_string(rng() % 5000);
      case 1:
        return std::string(pick({"null", "true", "\"usage\"", "\"\\\\\"", "\"a\\\"usage\\\":{\"",
                                 "\"}]\\\\\\\"{[\"", "\"\\u0022usage\""}));
      case 2:
        return "{\"prompt_tokens\":" + std::to_string(rng() % 900) +
               ",\"prompt_tokens_details\":{\"cached_tokens\":" + std::to_string(rng() % 900) + "}}";
      case 3:
        return std::string(pick({"1.5", "-3", "\" \"", "[]", "{}"}));
      case 4: {
        std::string a = "[";
        for (int n = static_cast<int>(rng() % 3); n > 0; --n) a += value(depth + 1) + ",";
        if (a.size() > 1) a.pop_back();
        return a + "]";
      }
      default: {
        std::string o = "{";
        for (int n = static_cast<int>(rng() % 4); n > 0; --n) {
          o += std::string(pick({"\"usage\"", "\"x\"", "\"usage \"", "\"u\\\"sage\""})) +
               std::string(pick({":", " : ", "\n:"})) + value(depth + 1) + ",";
        }
        if (o.size() > 1) o.pop_back();
        return o + "}";
      }
    }
  };
  simdjson::dom::parser parser;
  int compared = 0;
  int found = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string body = "{";
    for (int n = static_cast<int>(rng() % 5); n > 0; --n) {
      body += std::string(pick({"\"usage\"", "\"id\"", "\"choices\"", "\"usag\""})) + ":" +
              value(1) + std::string(pick({",", " ,\n"}));
    }
    if (body.size() > 1) body.erase(body.find_last_of(','));
    body += std::string(pick({"}", "}\n", " } "}));
    // Cut short now and then: not compared (the walk does not validate what
    // it skips), but read without harm.
    if (rng() % 16 == 0) body.resize(rng() % body.size());
    const UsageFields fast = body_fields(body);
    simdjson::dom::object root;
    if (parser.parse(body).get_object().get(root) != simdjson::SUCCESS) continue;
    ++compared;
    found += !find_root_usage_object(body).empty();
    ASSERT_EQ(fast, full_fields(body)) << body;
  }
  EXPECT_GT(compared, 10000);
  EXPECT_GT(found, 3000);
}

}  // namespace
}  // namespace lmwarden::telemetry
