#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "telemetry/whole_events.h"
#include "sse_reference.h"
#include "telemetry_stream_samples.h"

namespace lmwarden::telemetry {
namespace {

constexpr auto npos = std::string_view::npos;

using lmwarden::test_support::sse_event_ends;

// Feeds `pieces` from a reused, scribbled-over buffer (as the relay does) and
// checks after each call that what went out ends where an event does (or is
// nothing, or the input so far while an event too long to hold passes).
// Returns what went out in all.
std::string relay(std::string_view stream, const std::vector<std::string_view>& pieces) {
  const std::set<std::size_t> ends = sse_event_ends(stream);
  WholeEventGate gate;
  std::string out;
  std::string buffer;
  std::size_t fed = 0;
  for (std::string_view piece : pieces) {
    buffer.assign(piece);
    for (std::string_view v : gate.feed(buffer)) out.append(v);
    std::fill(buffer.begin(), buffer.end(), '#');
    fed += piece.size();
    EXPECT_EQ(out, stream.substr(0, out.size())) << "after " << fed << " bytes";
    EXPECT_EQ(out.size() + gate.held_bytes(), fed);
    if (!out.empty() && gate.held_bytes() > 0) {
      EXPECT_TRUE(ends.contains(out.size())) << "went out up to " << out.size() << " of " << fed;
    }
  }
  for (std::string_view v : gate.finish()) out.append(v);
  EXPECT_EQ(gate.held_bytes(), 0u);
  return out;
}

void expect_every_split(std::string_view stream) {
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    ASSERT_EQ(relay(stream, {stream.substr(0, cut), stream.substr(cut)}), stream);
  }
  std::mt19937 rng(11);
  for (int round = 0; round < 50; ++round) {
    SCOPED_TRACE("random round " + std::to_string(round));
    ASSERT_EQ(relay(stream, samples::random_pieces(stream, rng)), stream);
  }
}

TEST(WholeEventGate, WholeEventsGoOutUncopied) {
  WholeEventGate gate;
  const std::string stream = samples::openai_stream();
  const auto out = gate.feed(stream);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data(), stream.data());
  EXPECT_EQ(out[0].size(), stream.size());
  EXPECT_TRUE(gate.finish().empty());
}

TEST(WholeEventGate, HoldsTheOpenEventUntilItsBlankLine) {
  WholeEventGate gate;
  auto out = gate.feed("data: {\"a\":1}\n\ndata: {\"del");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], "data: {\"a\":1}\n\n");
  EXPECT_EQ(gate.held_bytes(), 11u);
  EXPECT_TRUE(gate.feed("ta\":2}").empty());
  out = gate.feed("\n\ndata: [DONE]\n\n");
  std::string joined;
  for (std::string_view v : out) joined.append(v);
  EXPECT_EQ(joined, "data: {\"delta\":2}\n\ndata: [DONE]\n\n");
  EXPECT_EQ(gate.held_bytes(), 0u);
}

// The upstream failed mid-event: what is held never goes out, so the client
// has whole events only.
TEST(WholeEventGate, ATornEventNeverReachesTheClient) {
  WholeEventGate gate;
  std::string sent;
  for (std::string_view v : gate.feed("data: one\n\nda")) sent.append(v);
  for (std::string_view v : gate.feed("ta: tw")) sent.append(v);
  EXPECT_EQ(sent, "data: one\n\n");
}

TEST(WholeEventGate, EveryLineEndAndEverySplitKeepsTheStreamByteForByte) {
  expect_every_split(samples::openai_stream());
  expect_every_split(samples::kAnthropicStream);
  expect_every_split(samples::with_crlf(samples::kAnthropicStream));
  expect_every_split("data: a\r\rdata: b\r\r: comment\r\r");        // CR only
  expect_every_split("data: a\n\r\ndata: b\r\n\ndata: c\r\r\n\n");  // mixed
  expect_every_split("\n\n\ndata: x\n\n\n");                        // blank lines outside events
  expect_every_split("data: never ended");
}

TEST(WholeEventGate, RandomStreamsInRandomPieces) {
  std::mt19937 rng(5);
  for (int round = 0; round < 200; ++round) {
    std::string stream;
    for (const auto& e : samples::random_events(rng)) stream += e.text;
    if (round % 2 == 1) stream = samples::with_crlf(stream);
    SCOPED_TRACE("round " + std::to_string(round));
    ASSERT_EQ(relay(stream, samples::random_pieces(stream, rng)), stream);
  }
}

// An event longer than the hold goes out as it arrives; the next one is
// held again.
TEST(WholeEventGate, AnEventTooLongToHoldPassesAsItComes) {
  const std::string big =
      "data: " + std::string(WholeEventGate::kMaxHeldEventBytes + 100, 'x') + "\n\n";
  const std::string stream = "data: a\n\n" + big + "data: b\n\n";
  std::vector<std::string_view> pieces;
  for (std::size_t pos = 0; pos < stream.size(); pos += 16 * 1024)
    pieces.push_back(std::string_view(stream).substr(pos, 16 * 1024));
  EXPECT_EQ(relay(stream, pieces), stream);

  WholeEventGate gate;
  std::size_t out = 0;
  for (std::string_view piece : pieces) {
    for (std::string_view v : gate.feed(piece)) out += v.size();
  }
  EXPECT_EQ(out, stream.size());  // the last piece ends the stream with a blank line
  // Held again after it: a partial event after the big one waits.
  const auto after = gate.feed("data: c");
  EXPECT_TRUE(after.empty());
  EXPECT_EQ(gate.held_bytes(), 7u);
}

TEST(LastEventEnd, FindsTheLastBlankLineAcrossTheChunkBoundary) {
  EXPECT_EQ(last_event_end("", "data: a\n\ndata: b\n\n"), 18u);
  EXPECT_EQ(last_event_end("", "data: a\n\ndata: b\n"), 9u);
  EXPECT_EQ(last_event_end("", "data: a\n"), npos);
  EXPECT_EQ(last_event_end("", ""), npos);
  EXPECT_EQ(last_event_end("a\n", "\ndata"), 1u);   // LF | LF
  EXPECT_EQ(last_event_end("a\r\n", "\r\nx"), 2u);  // CR LF | CR LF
  EXPECT_EQ(last_event_end("\r\n\r", "\nx"), 1u);   // the blank line's LF came late
  EXPECT_EQ(last_event_end("", "a\r\n"), npos);     // one CR LF is one line end
  EXPECT_EQ(last_event_end("", "\r\n"), npos);      // nothing known before it
  EXPECT_EQ(last_event_end("a", "\r\r"), 2u);       // CR only
  EXPECT_EQ(last_event_end("", "a\n\r"), 3u);       // LF then a CR (its LF may follow)
  EXPECT_EQ(last_event_end("", "a\n\r\n"), 4u);     // ... and here it did
  EXPECT_EQ(last_event_end("", "a\r\r\nb"), 4u);
}

}  // namespace
}  // namespace lmwarden::telemetry
