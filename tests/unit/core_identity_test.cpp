// Conversation identity on the real client captures in shared/fixtures/clients:
// each client's sources, pinned ranks, the order of sources and the headers.
// The body scan itself is core_body_scan_test.cpp.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "identity_test_support.h"

namespace lmwarden::core {
namespace {

using config::SessionSource;
using namespace identity_test;

// ------------------------------------------------------------ Claude Code

TEST(IdentityClaudeCode, SessionHeaderIdentifiesTheTurn) {
  Request request = load_fixture(kClaudeTurn);
  const ExtractResult result = extract(request);
  expect_session(result, kClaudeTurnSession, "header:x-claude-code-session-id");
  EXPECT_EQ(result.facts.model, "claude-sonnet-4-5");
  EXPECT_TRUE(result.facts.stream);
  EXPECT_FALSE(result.facts.stream_include_usage);
}

TEST(IdentityClaudeCode, HeaderWinsOverMetadataUserId) {
  Request request = load_fixture(kClaudeTurn);
  request.set_header("X-Claude-Code-Session-Id", "from-the-header");
  expect_session(extract(request), "from-the-header", "header:x-claude-code-session-id");
}

TEST(IdentityClaudeCode, JsonStringUserIdWithoutHeader) {
  Request request = load_fixture(kClaudeTurn);
  request.remove_header("x-claude-code-session-id");
  expect_session(extract(request), kClaudeTurnSession, "claude-user-id");
}

TEST(IdentityClaudeCode, LegacyUserIdOfVersion1) {
  Request request = load_fixture(kClaudeLegacy);
  const ExtractResult result = extract(request);
  expect_session(result, kClaudeLegacySession, "claude-user-id");
  EXPECT_EQ(result.facts.model, "claude-sonnet-4-5");
  EXPECT_TRUE(result.facts.stream);
}

TEST(IdentityClaudeCode, UnusableUserIdFallsThroughToLaterSources) {
  Request request = load_fixture(kClaudeLegacy);
  request.edit_body([](Json& body) {
    body["metadata"]["user_id"] = "some-opaque-end-user";
    body["prompt_cache_key"] = "pck-1";
  });
  expect_session(extract(request), "pck-1", "body:prompt_cache_key");
}

// The title side request and the main turn carry the same model, the same
// stream flag and the same shape of headers; only the session id tells two
// Claude Code sessions apart, and header and metadata agree on it in each.
TEST(IdentityClaudeCode, TitleSideCallAndTurnDifferOnlyBySessionId) {
  Request turn = load_fixture(kClaudeTurn);
  Request title = load_fixture(kClaudeTitle);
  const ExtractResult turn_result = extract(turn);
  const ExtractResult title_result = extract(title);
  expect_session(turn_result, kClaudeTurnSession, "header:x-claude-code-session-id");
  expect_session(title_result, kClaudeTitleSession, "header:x-claude-code-session-id");
  EXPECT_EQ(turn_result.facts.model, title_result.facts.model);
  EXPECT_EQ(turn_result.facts.stream, title_result.facts.stream);
  EXPECT_NE(turn_result.facts.identity.session_hash, title_result.facts.identity.session_hash);

  turn.remove_header("x-claude-code-session-id");
  title.remove_header("x-claude-code-session-id");
  EXPECT_EQ(extract(turn).facts.session_id, kClaudeTurnSession);
  EXPECT_EQ(extract(title).facts.session_id, kClaudeTitleSession);
}

// ------------------------------------------------------------------ Codex

TEST(IdentityCodex, CurrentSessionIdHeader) {
  Request request = load_fixture(kCodexCurrent);
  const ExtractResult result = extract(request);
  expect_session(result, kCodexThread, "header:session-id");
  EXPECT_EQ(result.facts.model, "gpt-5-codex");
  EXPECT_TRUE(result.facts.stream);
}

TEST(IdentityCodex, ThreadIdHeaderWhenSessionIdMissing) {
  Request request = load_fixture(kCodexCurrent);
  request.remove_header("session-id");
  expect_session(extract(request), kCodexThread, "header:thread-id");
}

TEST(IdentityCodex, LegacyUnderscoreHeaders) {
  Request request = load_fixture(kCodexLegacy);
  expect_session(extract(request), kCodexLegacyThread, "header:session_id");
  request.remove_header("session_id");
  expect_session(extract(request), kCodexLegacyThread, "header:conversation_id");
}

TEST(IdentityCodex, PromptCacheKeyWhenHeadersRemoved) {
  Request current = load_fixture(kCodexCurrent);
  for (const char* name : {"session-id", "thread-id"}) current.remove_header(name);
  expect_session(extract(current), kCodexThread, "body:prompt_cache_key");

  Request legacy = load_fixture(kCodexLegacy);
  for (const char* name : {"session_id", "conversation_id"}) legacy.remove_header(name);
  expect_session(extract(legacy), kCodexLegacyThread, "body:prompt_cache_key");
}

TEST(IdentityCodex, ClientMetadataSessionIdLast) {
  Request request = load_fixture(kCodexCurrent);
  for (const char* name : {"session-id", "thread-id"}) request.remove_header(name);
  request.edit_body([](Json& body) { body.erase("prompt_cache_key"); });
  expect_session(extract(request), kCodexThread, "body:client_metadata.session_id");
}

TEST(IdentityCodex, ClientRequestIdIsNotASource) {
  // x-client-request-id equals the thread id but is not per conversation by
  // contract (DESIGN §4); with every real source gone the request is anonymous.
  Request request = load_fixture(kCodexCurrent);
  for (const char* name : {"session-id", "thread-id"}) request.remove_header(name);
  request.edit_body([](Json& body) {
    body.erase("prompt_cache_key");
    body.erase("client_metadata");
  });
  const ExtractResult result = extract(request);
  EXPECT_EQ(result.error, BodyError::kNone);
  EXPECT_EQ(result.facts.identity.kind, IdentityKind::kAnonymous);
}

TEST(IdentityCodex, ChatCompletionsIsAnonymous) {
  Request request = load_fixture(kCodexChat);
  const ExtractResult result = extract(request);
  EXPECT_EQ(result.error, BodyError::kNone);
  EXPECT_EQ(result.facts.identity, Identity{});
  EXPECT_EQ(result.facts.model, "gpt-5-codex");
  EXPECT_TRUE(result.facts.stream);
}

// ---------------------------------------------------------- pinned ranks

TEST(IdentityPinned, ClientRankPinsBeforeAnySession) {
  Request request = load_fixture(kClaudeTurn);
  request.set_header("X-Data-Parallel-Rank", "2");
  const ExtractResult result = extract(request);
  EXPECT_EQ(result.facts.identity.kind, IdentityKind::kPinned);
  EXPECT_EQ(result.facts.identity.pinned_rank, 2);
  EXPECT_TRUE(result.facts.session_id.empty());
}

TEST(IdentityPinned, IgnoredWhenNotHonoured) {
  Request request = load_fixture(kClaudeTurn);
  request.set_header("x-data-parallel-rank", "2");
  expect_session(extract(request, {.honor_client_rank = false}), kClaudeTurnSession,
                 "header:x-claude-code-session-id");
}

TEST(IdentityPinned, NonIntegerRankFallsThroughLikeVllm) {
  for (const char* value : {"", "  ", "two", "1.5", "0x1", "1_", "_1", "1__0", "+", "1 2"}) {
    Request request = load_fixture(kCodexCurrent);
    request.set_header("x-data-parallel-rank", value);
    SCOPED_TRACE(value);
    expect_session(extract(request), kCodexThread, "header:session-id");
  }
}

TEST(IdentityPinned, OutOfRangeRanksStayPinnedForTheRouterToReject) {
  // vLLM parses these and answers 400 for a rank it does not have; the warden
  // must pin them too (not silently route by session) so it can answer the same.
  Request request = load_fixture(kCodexCurrent);
  request.set_header("x-data-parallel-rank", "-1");
  EXPECT_EQ(extract(request).facts.identity.kind, IdentityKind::kPinned);
  EXPECT_EQ(extract(request).facts.identity.pinned_rank, -1);
  request.set_header("x-data-parallel-rank", "123456789012345678901234567890");
  EXPECT_EQ(extract(request).facts.identity.pinned_rank, INT_MAX);
}

TEST(IdentityPinned, ParseClientRankFollowsPythonInt) {
  EXPECT_EQ(parse_client_rank("0"), 0);
  EXPECT_EQ(parse_client_rank(" 3\t"), 3);
  EXPECT_EQ(parse_client_rank("+1"), 1);
  EXPECT_EQ(parse_client_rank("-4"), -4);
  EXPECT_EQ(parse_client_rank("007"), 7);
  EXPECT_EQ(parse_client_rank("1_0"), 10);
  EXPECT_EQ(parse_client_rank("2147483647"), INT_MAX);
  EXPECT_EQ(parse_client_rank("2147483648"), INT_MAX);
  EXPECT_EQ(parse_client_rank("-99999999999"), INT_MIN);
  EXPECT_EQ(parse_client_rank("1e3"), std::nullopt);
  EXPECT_EQ(parse_client_rank("-"), std::nullopt);
}

// ------------------------------------------------------- order and headers

TEST(IdentityOrder, FirstSourceByOrderWinsHeaderOrBody) {
  Request request = load_fixture(kCodexCurrent);
  request.set_header("session-id", "header-value");
  const IdentityOptions body_first{.sources = {{SessionSource::Kind::kBody, "prompt_cache_key"},
                                               {SessionSource::Kind::kHeader, "session-id"}}};
  expect_session(extract(request, body_first), kCodexThread, "body:prompt_cache_key", body_first);
  const IdentityOptions header_first{.sources = {{SessionSource::Kind::kHeader, "session-id"},
                                                 {SessionSource::Kind::kBody, "prompt_cache_key"}}};
  expect_session(extract(request, header_first), "header-value", "header:session-id", header_first);
}

TEST(IdentityOrder, MetadataBeforeHeaderWhenConfiguredSo) {
  Request request = load_fixture(kClaudeTurn);
  request.set_header("X-Claude-Code-Session-Id", "header-value");
  const IdentityOptions options{
      .sources = {{SessionSource::Kind::kClaudeUserId, "metadata.user_id"},
                  {SessionSource::Kind::kHeader, "x-claude-code-session-id"}}};
  expect_session(extract(request, options), kClaudeTurnSession, "claude-user-id", options);
}

TEST(IdentityOrder, EmptySourceListMeansAnonymous) {
  Request request = load_fixture(kClaudeTurn);
  EXPECT_EQ(extract(request, {.sources = {}}).facts.identity.kind, IdentityKind::kAnonymous);
}

TEST(IdentityHeaders, NamesMatchCaseInsensitively) {
  const std::vector<HeaderField> headers = {
      {"Content-Type", "application/json"}, {"SESSION-ID", "abc"}, {"session-id", "second"}};
  EXPECT_EQ(find_header(headers, "session-id"), "abc");  // the first one
  EXPECT_EQ(find_header(headers, "Content-type"), "application/json");
  EXPECT_EQ(find_header(headers, "session"), std::nullopt);
  EXPECT_EQ(find_header({}, "session-id"), std::nullopt);

  const IdentityOptions upper{.sources = {{SessionSource::Kind::kHeader, "Session-ID"}}};
  const ExtractResult result = extract_request_facts(headers, "", 0, upper);
  expect_session(result, "abc", "header:Session-ID", upper);
}

TEST(IdentityHeaders, EmptyOrBlankValuesFallThroughAndValuesAreTrimmed) {
  const std::vector<HeaderField> headers = {
      {"x-claude-code-session-id", ""}, {"session-id", " \t "}, {"thread-id", "  t-1 "}};
  expect_session(extract_request_facts(headers, "", 0, {}), "t-1", "header:thread-id");
}

TEST(IdentityHeaders, EveryDefaultHeaderSourceIsRead) {
  for (const char* name :
       {"x-claude-code-session-id", "session-id", "thread-id", "session_id", "conversation_id",
        "x-session-id", "x-session-affinity", "x-opencode-session"}) {
    SCOPED_TRACE(name);
    const std::vector<HeaderField> headers = {{name, "conv-7"}};
    expect_session(extract_request_facts(headers, R"({"model":"m"})", 13, {}), "conv-7",
                   std::string("header:") + name);
  }
}

// ------------------------------------------------- decode_claude_user_id

TEST(ClaudeUserId, Shapes) {
  EXPECT_EQ(decode_claude_user_id(R"({"device_id":"d","account_uuid":"","session_id":"s-1"})"),
            "s-1");
  EXPECT_EQ(decode_claude_user_id(R"( {"session_id":"s-2"} )"), "s-2");
  EXPECT_EQ(decode_claude_user_id(R"({"device_id":"d","session_id":""})"), std::nullopt);
  EXPECT_EQ(decode_claude_user_id(R"({"device_id":"d"})"), std::nullopt);
  EXPECT_EQ(decode_claude_user_id(R"({"session_id":7})"), std::nullopt);
  EXPECT_EQ(decode_claude_user_id(R"({"session_id":"s")"), std::nullopt);
  EXPECT_EQ(decode_claude_user_id(R"({"session_id":"s"} x)"), std::nullopt);

  EXPECT_EQ(
      decode_claude_user_id("user_0245ab_account__session_1b13bc5e-7ef3-4032-abdb-0b542a53ac77"),
      "1b13bc5e-7ef3-4032-abdb-0b542a53ac77");
  EXPECT_EQ(decode_claude_user_id("user_0245ab_account_5d1e-77_session_ABCDEF01-0000"),
            "ABCDEF01-0000");
  EXPECT_EQ(decode_claude_user_id("user_0245ab_account__session_"), std::nullopt);
  EXPECT_EQ(decode_claude_user_id("user_0245ab_account__session_not a uuid"), std::nullopt);
  EXPECT_EQ(decode_claude_user_id("user__account__session_abc"), std::nullopt);
  EXPECT_EQ(decode_claude_user_id("user_0245ab_session_abc"), std::nullopt);
  EXPECT_EQ(decode_claude_user_id("end-user-42"), std::nullopt);
  EXPECT_EQ(decode_claude_user_id(""), std::nullopt);
}

// --------------------------------------------------------------- benchmark

// Measures, does not judge: run with --gtest_also_run_disabled_tests.
TEST(IdentityBenchmark, DISABLED_ClaudeTurnBody) {
  Request request = load_fixture(kClaudeTurn);
  std::string padded = request.body;
  padded.reserve(padded.size() + simdjson::SIMDJSON_PADDING);
  const auto headers = request.headers();
  const IdentityOptions options;
  const BodyFields fields(options.sources);
  constexpr int kRounds = 2000;
  for (const bool in_place : {true, false}) {
    const auto start = std::chrono::steady_clock::now();
    std::size_t sink = 0;
    for (int i = 0; i < kRounds; ++i) {
      const BodyScan scan = scan_body(padded, in_place ? padded.capacity() : 0, fields);
      sink += resolve_identity(headers, scan, fields, options).session_hash & 1;
    }
    const auto elapsed =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start);
    std::printf("%zu-byte body, %s: %.2f us per request (%zu)\n", padded.size(),
                in_place ? "in place" : "copied", elapsed.count() / kRounds, sink);
  }
}

}  // namespace
}  // namespace lmwarden::core
