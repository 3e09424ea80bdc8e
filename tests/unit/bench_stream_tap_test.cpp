// The benchmark client's reading of a streamed reply, in each dialect, fed in
// pieces that split events, lines and UTF-8 anywhere.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "bench/stream_tap.h"

namespace lmwarden::bench {
namespace {

using workload::Dialect;

// Feeds `stream` in pieces of `piece` bytes; returns how many calls said they
// delivered the first token.
int feed_in_pieces(StreamTap& tap, std::string_view stream, std::size_t piece) {
  int firsts = 0;
  for (std::size_t at = 0; at < stream.size(); at += piece) {
    firsts += tap.feed(stream.substr(at, piece)) ? 1 : 0;
  }
  return firsts;
}

TEST(BenchStreamTap, OpenAiChatChunksUsageAndDone) {
  const std::string stream =
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hé\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"llo\"}}]}\r\n\r\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":5}}\n\n"
      "data: [DONE]\n\n";
  for (const std::size_t piece : {std::size_t{1}, std::size_t{7}, stream.size()}) {
    SCOPED_TRACE(piece);
    StreamTap tap(Dialect::kOpenAi);
    EXPECT_EQ(feed_in_pieces(tap, stream, piece), 1);
    EXPECT_EQ(tap.text(), "Héllo");
    EXPECT_EQ(tap.output_tokens(), 5);
    EXPECT_TRUE(tap.done());
    EXPECT_FALSE(tap.error());
  }
}

TEST(BenchStreamTap, AnthropicDeltasUsageAndStop) {
  const std::string stream =
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
      "\"text\":\"Hi\"}}\n\n"
      "event: message_delta\n"
      "data: {\"type\":\"message_delta\",\"delta\":{},\"usage\":{\"output_tokens\":2}}\n\n";
  StreamTap tap(Dialect::kAnthropic);
  EXPECT_EQ(feed_in_pieces(tap, stream, 5), 1);
  EXPECT_FALSE(tap.done());
  tap.feed("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
  EXPECT_TRUE(tap.done());
  EXPECT_EQ(tap.text(), "Hi");
  EXPECT_EQ(tap.output_tokens(), 2);
}

// The events vLLM's /v1/responses streams, as Codex reads them.
std::string responses_stream(std::string_view last_type, std::string_view response_tail) {
  std::string s =
      "event: response.created\n"
      "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\","
      "\"status\":\"in_progress\",\"error\":null,\"usage\":null}}\n\n"
      "event: response.output_text.delta\n"
      "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":3,\"item_id\":\"msg_1\","
      "\"output_index\":0,\"content_index\":0,\"delta\":\"Done\",\"logprobs\":[]}\n\n"
      "event: response.output_text.delta\n"
      "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,\"item_id\":\"msg_1\","
      "\"output_index\":0,\"content_index\":0,\"delta\":\" now.\",\"logprobs\":[]}\n\n"
      "event: response.output_text.done\n"
      "data: {\"type\":\"response.output_text.done\",\"sequence_number\":5,\"text\":\"Done "
      "now.\"}\n\n";
  s += "event: ";
  s += last_type;
  s += "\ndata: {\"type\":\"";
  s += last_type;
  s += "\",\"sequence_number\":8,\"response\":{\"id\":\"resp_1\",";
  s += response_tail;
  s += "}}\n\n";
  return s;
}

TEST(BenchStreamTap, ResponsesDeltasAndTheCompletedUsage) {
  const std::string stream = responses_stream(
      "response.completed",
      "\"status\":\"completed\",\"usage\":{\"input_tokens\":40,\"input_tokens_details\":"
      "{\"cached_tokens\":32},\"output_tokens\":3,\"total_tokens\":43}");
  for (const std::size_t piece : {std::size_t{1}, std::size_t{11}, stream.size()}) {
    SCOPED_TRACE(piece);
    StreamTap tap(Dialect::kResponses);
    EXPECT_EQ(feed_in_pieces(tap, stream, piece), 1);
    EXPECT_EQ(tap.text(), "Done now.");  // the closing .done text is not added again
    EXPECT_EQ(tap.output_tokens(), 3);
    EXPECT_TRUE(tap.done());
    EXPECT_FALSE(tap.error());
  }
}

TEST(BenchStreamTap, ResponsesCutAtTheLimitEndsWithoutAnError) {
  StreamTap tap(Dialect::kResponses);
  tap.feed(responses_stream("response.incomplete",
                            "\"status\":\"incomplete\",\"usage\":{\"output_tokens\":2}"));
  EXPECT_TRUE(tap.done());
  EXPECT_FALSE(tap.error());
  EXPECT_EQ(tap.output_tokens(), 2);
}

TEST(BenchStreamTap, ResponsesFailuresAreErrors) {
  {
    StreamTap tap(Dialect::kResponses);
    tap.feed(responses_stream("response.failed",
                              "\"status\":\"failed\",\"error\":{\"code\":\"server_error\","
                              "\"message\":\"engine died\"}"));
    EXPECT_TRUE(tap.done());
    ASSERT_TRUE(tap.error());
    EXPECT_EQ(*tap.error(), "engine died");
  }
  {
    StreamTap tap(Dialect::kResponses);
    tap.feed(
        "event: error\ndata: {\"type\":\"error\",\"code\":\"invalid_request_error\","
        "\"message\":\"too long\",\"sequence_number\":1}\n\n");
    EXPECT_TRUE(tap.done());
    ASSERT_TRUE(tap.error());
    EXPECT_EQ(*tap.error(), "too long");
  }
}

// Without a usage count, each non-empty content piece counts as a token.
TEST(BenchStreamTap, WithoutUsageTheContentPiecesAreCounted) {
  StreamTap tap(Dialect::kResponses);
  tap.feed(responses_stream("response.completed", "\"status\":\"completed\",\"usage\":null"));
  EXPECT_TRUE(tap.done());
  EXPECT_EQ(tap.output_tokens(), 2);
}

}  // namespace
}  // namespace lmwarden::bench
