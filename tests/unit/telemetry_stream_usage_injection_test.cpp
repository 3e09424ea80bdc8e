#include <gtest/gtest.h>
#include <simdjson.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "telemetry/stream_usage_injection.h"
#include "telemetry/usage_tap.h"
#include "telemetry_stream_samples.h"

namespace lmwarden::telemetry {
namespace {

struct Stripped {
  std::string client_bytes;
  std::size_t stripped = 0;
  RequestUsage usage;  // of the stripped chunks
};

// Feeds pieces from a reused, scribbled-over buffer (as a relay would) and
// collects what the client would receive.
Stripped strip_pieces(const std::vector<std::string_view>& pieces) {
  InjectedUsageStripper stripper;
  Stripped out;
  std::string buffer;
  for (std::string_view piece : pieces) {
    buffer.assign(piece);
    for (std::string_view v : stripper.feed(buffer)) out.client_bytes.append(v);
    std::fill(buffer.begin(), buffer.end(), '#');
  }
  for (std::string_view v : stripper.finish()) out.client_bytes.append(v);
  out.stripped = stripper.stripped_events();
  out.usage = to_request_usage(stripper.stripped_usage());
  return out;
}

void expect_every_split(std::string_view input, std::string_view client, std::size_t stripped) {
  for (std::size_t cut = 0; cut <= input.size(); ++cut) {
    const Stripped s = strip_pieces({input.substr(0, cut), input.substr(cut)});
    ASSERT_EQ(s.client_bytes, client) << "cut at " << cut;
    ASSERT_EQ(s.stripped, stripped) << "cut at " << cut;
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::string_view> pieces;
    for (std::size_t pos = 0; pos < input.size();) {
      const std::size_t len = std::uniform_int_distribution<std::size_t>(1, 32)(rng);
      pieces.push_back(input.substr(pos, std::min(len, input.size() - pos)));
      pos += pieces.back().size();
    }
    ASSERT_EQ(strip_pieces(pieces).client_bytes, client) << "random round " << round;
  }
}

TEST(InjectedUsageStripper, RemovesOnlyTheUsageChunkAndStillMeasuresIt) {
  const std::string input = samples::openai_stream();
  const std::string client = samples::openai_stream_without_usage();
  const Stripped s = strip_pieces({input});
  EXPECT_EQ(s.client_bytes, client);
  EXPECT_EQ(s.stripped, 1u);
  EXPECT_EQ(s.usage.prompt_tokens, 1200u);
  EXPECT_EQ(s.usage.cached_tokens, 1024u);
  EXPECT_EQ(s.usage.completion_tokens, 50u);
  expect_every_split(input, client, 1);

  // The relay's tap, fed the upstream bytes, measures the same request.
  UsageTap tap;
  tap.feed(input);
  tap.finish();
  EXPECT_EQ(tap.usage(), s.usage);
}

TEST(InjectedUsageStripper, WholeEventChunksPassThroughUncopied) {
  const std::string input = samples::openai_stream_without_usage();
  InjectedUsageStripper stripper;
  const auto out = stripper.feed(input);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data(), input.data());
  EXPECT_EQ(out[0].size(), input.size());
  EXPECT_TRUE(stripper.finish().empty());
}

TEST(InjectedUsageStripper, LeavesEverythingElseByteIdentical) {
  // CRLF framing, comments, stray blank lines, a chunk with both choices and
  // usage (continuous usage stats): none of it is the injected chunk.
  const std::string input =
      ": keep-alive comment\r\n\r\n"
      "\n"
      "data: "
      "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":3}}"
      "\r\n\r\n"
      "event: custom\r\ndata: {\"choices\":[]}\r\n\r\n"
      "data: {\"choices\":[],\"usage\":null}\n\n"
      "data: [DONE]\r\n\r\n";
  expect_every_split(input, input, 0);

  const std::string usage_crlf =
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1}}\r\n\r\n";
  expect_every_split(input + usage_crlf + "data: [DONE]\r\n\r\n", input + "data: [DONE]\r\n\r\n",
                     1);
}

// Found by fuzz/usage_tap_fuzz.cpp: carriage returns before "data:" make the
// line something else, whether or not a chunk ends between them.
TEST(InjectedUsageStripper, PartialLinesAreJudgedWhole) {
  const std::string input = "\r\r" + std::string(samples::kOpenAiUsageChunk) + "\r\r\n" + "\r\n";
  expect_every_split(input, input, 0);
}

TEST(InjectedUsageStripper, UsageChunkCutOffAtEndOfStreamIsStillRemoved) {
  const std::string input =
      std::string(samples::kOpenAiContent) +
      std::string(samples::kOpenAiUsageChunk.substr(0, samples::kOpenAiUsageChunk.size() - 1));
  EXPECT_EQ(strip_pieces({input}).client_bytes, samples::kOpenAiContent);
}

TEST(InjectedUsageStripper, LongEventsAreForwardedAsTheyArrive) {
  std::string big = "data: {\"choices\":[{\"delta\":{\"content\":\"";
  big.append(InjectedUsageStripper::kMaxHeldEventBytes + 10, 'y');
  big += "\"}}]}\n\n";
  InjectedUsageStripper stripper;
  std::string client;
  const std::size_t half = InjectedUsageStripper::kMaxHeldEventBytes + 1;
  for (std::string_view v : stripper.feed(std::string_view(big).substr(0, 100))) client.append(v);
  EXPECT_TRUE(client.empty());  // short so far: held until the event is known
  for (std::string_view v : stripper.feed(std::string_view(big).substr(100, half - 100)))
    client.append(v);
  EXPECT_EQ(client.size(), half);  // now too long to be a usage chunk: released
  for (std::string_view v : stripper.feed(std::string_view(big).substr(half))) client.append(v);
  for (std::string_view v : stripper.finish()) client.append(v);
  EXPECT_EQ(client, big);
}

// Random streams (telemetry_stream_samples.h), "\n" or "\r\n", cut into
// random pieces: the client gets every byte but those of the usage-only
// chunks, which the stripper passes over unread unless an event mentions
// usage, and the stripped chunks' usage is counted.
TEST(InjectedUsageStripper, RandomStreamsLoseOnlyTheirUsageOnlyChunks) {
  std::mt19937 rng(13);
  std::size_t stripped_total = 0;
  for (int round = 0; round < 3000; ++round) {
    const bool crlf = rng() % 3 == 0;
    std::string stream, client;
    std::size_t usage_only = 0;
    for (const auto& event : samples::random_events(rng)) {
      const std::string text = crlf ? samples::with_crlf(event.text) : event.text;
      stream += text;
      if (event.usage_only)
        ++usage_only;
      else
        client += text;
    }
    const Stripped s = strip_pieces(samples::random_pieces(stream, rng));
    ASSERT_EQ(s.client_bytes, client) << "round " << round << ":\n" << stream;
    ASSERT_EQ(s.stripped, usage_only) << "round " << round << ":\n" << stream;
    stripped_total += usage_only;
  }
  EXPECT_GT(stripped_total, 3000u);
}

// --- request side ---

std::string minify_member(simdjson::dom::object obj, std::string_view key) {
  simdjson::dom::element e;
  if (obj.at_key(key).get(e) != simdjson::SUCCESS) return "<absent>";
  return simdjson::minify(e);
}

void expect_injected(std::string_view body) {
  const auto rewritten = with_stream_usage(body);
  ASSERT_TRUE(rewritten);
  simdjson::dom::parser p1, p2;
  simdjson::dom::object before, after;
  ASSERT_EQ(p1.parse(body.data(), body.size()).get_object().get(before), simdjson::SUCCESS);
  ASSERT_EQ(p2.parse(*rewritten).get_object().get(after), simdjson::SUCCESS) << *rewritten;
  bool include = false;
  ASSERT_EQ(after.at_pointer("/stream_options/include_usage").get_bool().get(include),
            simdjson::SUCCESS);
  EXPECT_TRUE(include);
  for (auto [key, value] : before) {
    EXPECT_EQ(minify_member(after, key), simdjson::minify(value)) << key;
  }
  EXPECT_EQ(after.size(), before.size() + 1);
  EXPECT_EQ(rewritten->size(), body.size() + kIncludeUsageMember.size() + (before.size() ? 1 : 0));
}

std::string codex_chat_body() {
  std::ifstream in(std::string(LMWARDEN_FIXTURES) + "/clients/codex-0.63.0_chat-completions.json");
  std::ostringstream ss;
  ss << in.rdbuf();
  simdjson::dom::parser parser;
  simdjson::dom::element body;
  EXPECT_EQ(parser.parse(ss.str()).at_key("body").get(body), simdjson::SUCCESS);
  return simdjson::minify(body);
}

TEST(WithStreamUsage, SplicesAfterTheOpeningBrace) {
  EXPECT_EQ(*with_stream_usage(R"({"model":"m","stream":true})"),
            R"({"stream_options":{"include_usage":true},"model":"m","stream":true})");
  EXPECT_EQ(*with_stream_usage(" \n{ }"), R"( 
{"stream_options":{"include_usage":true} })");
  expect_injected(
      R"({"model":"m","stream":true,"messages":[{"role":"user","content":"h\u00e9 {\"a\":1}"}]})");
  expect_injected("  {\n  \"model\" : \"m\",\n  \"stream\" : true\n}\n");
  expect_injected(codex_chat_body());
}

TEST(WithStreamUsage, KeepsALeadingByteOrderMarkInFront) {
  const auto rewritten = with_stream_usage("\xEF\xBB\xBF{\"model\":\"m\"}");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(*rewritten, "\xEF\xBB\xBF{\"stream_options\":{\"include_usage\":true},\"model\":\"m\"}");
  EXPECT_FALSE(with_stream_usage("\xEF\xBB\xBF"));
  EXPECT_FALSE(with_stream_usage("\xEF\xBB\xBF[1]"));
}

TEST(WithStreamUsage, RejectsNonObjects) {
  EXPECT_FALSE(with_stream_usage(""));
  EXPECT_FALSE(with_stream_usage("   "));
  EXPECT_FALSE(with_stream_usage("[1,2]"));
  EXPECT_FALSE(with_stream_usage("{"));
  EXPECT_FALSE(with_stream_usage("null"));
}

}  // namespace
}  // namespace lmwarden::telemetry
