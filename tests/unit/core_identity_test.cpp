// Conversation identity on the real client captures in shared/fixtures/clients.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/hash.h"
#include "core/identity.h"

namespace lmwarden::core {
namespace {

using config::SessionSource;
using Json = nlohmann::ordered_json;  // keeps the client's key order when re-serialised

// A captured request: owned header strings, a view list over them, the body bytes.
struct Request {
  std::vector<std::pair<std::string, std::string>> header_storage;
  std::vector<HeaderField> header_views;
  Json body_json;
  std::string body;

  HeaderList headers() {
    header_views.clear();
    for (const auto& [name, value] : header_storage) header_views.emplace_back(name, value);
    return header_views;
  }
  void remove_header(std::string_view name) {
    std::erase_if(header_storage, [&](const auto& h) {
      return h.first.size() == name.size() &&
             std::equal(name.begin(), name.end(), h.first.begin(),
                        [](char a, char b) { return std::tolower(a) == std::tolower(b); });
    });
  }
  void set_header(std::string name, std::string value) {
    remove_header(name);
    header_storage.emplace_back(std::move(name), std::move(value));
  }
  void edit_body(auto&& edit) {
    edit(body_json);
    body = body_json.dump();
  }
};

Request load_fixture(const std::string& name) {
  const std::string path = std::string(LMWARDEN_FIXTURES) + "/clients/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  const Json capture = Json::parse(in);
  Request request;
  for (const auto& pair : capture.at("headers"))
    request.header_storage.emplace_back(pair.at(0).get<std::string>(),
                                        pair.at(1).get<std::string>());
  request.body_json = capture.at("body");
  request.body = request.body_json.dump();
  return request;
}

ExtractResult extract(Request& request, const IdentityOptions& options = {}) {
  return extract_request_facts(request.headers(), request.body, request.body.size(), options);
}

ExtractResult extract_body(std::string_view body, const IdentityOptions& options = {}) {
  return extract_request_facts({}, body, body.size(), options);
}

constexpr const char* kClaudeTurn = "claude-code-2.1.332_messages_turn2.json";
constexpr const char* kClaudeTitle = "claude-code-2.1.332_messages_title-sidecall.json";
constexpr const char* kClaudeLegacy = "claude-code-1.0.128_messages_legacy-user_id.json";
constexpr const char* kCodexCurrent = "codex-0.171.0_responses_tool-followup.json";
constexpr const char* kCodexLegacy = "codex-0.63.0_responses_legacy-headers.json";
constexpr const char* kCodexChat = "codex-0.63.0_chat-completions.json";

constexpr const char* kClaudeTurnSession = "5506220c-1ac0-498d-ad24-592ac04efcdd";
constexpr const char* kClaudeTitleSession = "aac6fb29-f611-41aa-beb8-49c2b85e53c9";
constexpr const char* kClaudeLegacySession = "1b13bc5e-7ef3-4032-abdb-0b542a53ac77";
constexpr const char* kCodexThread = "01a22a54-fd9d-7df1-9e18-855eab7ea70c";
constexpr const char* kCodexLegacyThread = "01a22a5a-279b-7831-bf0e-1ec256e16b1f";

// `source`: the label of the source expected to match, among options' sources.
void expect_session(const ExtractResult& result, std::string_view id, std::string_view source,
                    const IdentityOptions& options = {}) {
  EXPECT_EQ(result.error, BodyError::kNone) << result.error_detail;
  EXPECT_EQ(result.facts.identity.kind, IdentityKind::kSession);
  EXPECT_EQ(result.facts.session_id, id);
  EXPECT_EQ(result.facts.identity.session_hash, stable_hash(id));
  const int index = result.facts.identity.source;
  ASSERT_GE(index, 0);
  ASSERT_LT(static_cast<std::size_t>(index), options.sources.size());
  EXPECT_EQ(options.sources[static_cast<std::size_t>(index)].label(), source);
}

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

// ------------------------------------------------------------ body fields

TEST(IdentityBody, ModelStreamAndIncludeUsage) {
  const ExtractResult result = extract_body(
      R"({"messages":[{"role":"user","content":"hi {\"model\":\"x\"}"}],"model":"qwen3-4b",)"
      R"("stream":true,"stream_options":{"include_usage":true,"x":[1,{"a":null}]}})");
  EXPECT_EQ(result.error, BodyError::kNone) << result.error_detail;
  EXPECT_EQ(result.facts.model, "qwen3-4b");
  EXPECT_TRUE(result.facts.stream);
  EXPECT_TRUE(result.facts.stream_include_usage);
  EXPECT_EQ(result.facts.identity.kind, IdentityKind::kAnonymous);
}

TEST(IdentityBody, WrongTypesReadAsAbsent) {
  const ExtractResult result =
      extract_body(R"({"model":7,"stream":"yes","stream_options":true,"prompt_cache_key":5,)"
                   R"("client_metadata":{"session_id":["a"]}})");
  EXPECT_EQ(result.error, BodyError::kNone) << result.error_detail;
  EXPECT_EQ(result.facts.model, "");
  EXPECT_FALSE(result.facts.stream);
  EXPECT_FALSE(result.facts.stream_include_usage);
  EXPECT_EQ(result.facts.identity.kind, IdentityKind::kAnonymous);
}

TEST(IdentityBody, EmptyStringFallsThrough) {
  expect_session(extract_body(R"({"prompt_cache_key":"","client_metadata":{"session_id":"cm"}})"),
                 "cm", "body:client_metadata.session_id");
}

TEST(IdentityBody, EscapedKeysAndValuesAreDecoded) {
  expect_session(extract_body(R"({"mod\u0065l":"a\/b","prompt_cache_key":"k\u00e9y"})"),
                 "k\xc3\xa9y", "body:prompt_cache_key");
  EXPECT_EQ(extract_body(R"({"mod\u0065l":"a\/b"})").facts.model, "a/b");
}

// Python's json keeps a surrogate escape that has no partner as that code
// unit, and vLLM accepts the request; the warden reads it as WTF-8 (what
// Python's "surrogatepass" encoding gives) rather than refusing the body.
TEST(IdentityBody, ALoneSurrogateEscapeIsKeptAsPythonKeepsIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(a\ud800b)", "a\xed\xa0\x80" "b"},        // a lone high surrogate
      {R"(\udc00)", "\xed\xb0\x80"},               // a lone low one
      {R"(\ud800\u0041)", "\xed\xa0\x80" "A"},     // high, then no low
      {R"(\ud83d\ude00!)", "\xf0\x9f\x98\x80!"},  // a pair is one character
      {R"(\ud83d\ud83d\ude00)", "\xed\xa0\xbd\xf0\x9f\x98\x80"},  // lone, then a pair
      {R"(x\ud800)", "x\xed\xa0\x80"},               // at the end
  };
  for (const auto& [escaped, bytes] : cases) {
    SCOPED_TRACE(escaped);
    const ExtractResult result =
        extract_body(R"({"model":"m","prompt_cache_key":")" + escaped + R"("})");
    EXPECT_EQ(result.error, BodyError::kNone) << result.error_detail;
    expect_session(result, bytes, "body:prompt_cache_key");
  }
  // The same id on the next turn is the same conversation.
  const std::string body = R"({"model":"m","prompt_cache_key":"k\ud800"})";
  EXPECT_EQ(extract_body(body).facts.identity.session_hash,
            extract_body(body).facts.identity.session_hash);
  const std::string other = R"({"model":"m","prompt_cache_key":"k\udc00"})";
  EXPECT_NE(extract_body(body).facts.identity.session_hash,
            extract_body(other).facts.identity.session_hash);
  // A key with one names no field of ours and is skipped with its value.
  expect_session(extract_body(R"({"x\ud800":{"a":[1]},"prompt_cache_key":"k"})"), "k",
                 "body:prompt_cache_key");
}

TEST(IdentityBody, AModelNameWithALoneSurrogateIsRefused) {
  // It goes into replies and logs, which carry UTF-8 only, and names no
  // model served here.
  const ExtractResult result = extract_body(R"({"model":"m\ud800"})");
  EXPECT_EQ(result.error, BodyError::kMalformedJson);
  EXPECT_EQ(result.error_detail, "invalid escape in a string");
}

TEST(IdentityBody, RepeatedKeyLastWinsAsInPython) {
  const ExtractResult result = extract_body(R"({"model":"a","prompt_cache_key":"k1","model":"b",)"
                                            R"("prompt_cache_key":"k2"})");
  EXPECT_EQ(result.facts.model, "b");
  EXPECT_EQ(result.facts.session_id, "k2");
}

TEST(IdentityBody, RepeatedKeyWhoseLastValueIsNotAStringReadsAsAbsent) {
  // Python keeps the last value whatever its type; an earlier string must not survive it.
  for (const char* body : {R"({"model":"a","model":5})", R"({"model":"a","model":null})",
                           R"({"model":"a","model":{"name":"b"}})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(extract_body(body).facts.model, "");
  }
  for (const char* body :
       {R"({"prompt_cache_key":"x","prompt_cache_key":null})",
        R"({"prompt_cache_key":"x","prompt_cache_key":["x"]})",
        R"({"client_metadata":{"session_id":"c"},"client_metadata":{}})",
        R"({"client_metadata":{"session_id":"c"},"client_metadata":null})",
        R"({"client_metadata":{"session_id":"c","session_id":7}})",
        R"({"metadata":{"user_id":"user_ab_account__session_1234abcd"},"metadata":[]})"}) {
    SCOPED_TRACE(body);
    const ExtractResult result = extract_body(body);
    EXPECT_EQ(result.error, BodyError::kNone) << result.error_detail;
    EXPECT_EQ(result.facts.identity.kind, IdentityKind::kAnonymous);
    EXPECT_EQ(result.facts.session_id, "");
  }
  for (const char* body : {R"({"stream":true,"stream":null})", R"({"stream":true,"stream":"true"})",
                           R"({"stream":true,"stream":1})", R"({"stream":true,"stream":false})"}) {
    SCOPED_TRACE(body);
    EXPECT_FALSE(extract_body(body).facts.stream);
  }
  for (const char* body : {R"({"stream_options":{"include_usage":true,"include_usage":null}})",
                           R"({"stream_options":{"include_usage":true},"stream_options":{}})",
                           R"({"stream_options":{"include_usage":true},"stream_options":null})"}) {
    SCOPED_TRACE(body);
    EXPECT_FALSE(extract_body(body).facts.stream_include_usage);
  }
  // And a string after something else still counts.
  const ExtractResult later =
      extract_body(R"({"model":null,"model":"b","stream":null,"stream":true,"prompt_cache_key":1,)"
                   R"("prompt_cache_key":"k"})");
  EXPECT_EQ(later.facts.model, "b");
  EXPECT_TRUE(later.facts.stream);
  expect_session(later, "k", "body:prompt_cache_key");
}

TEST(IdentityBody, StreamOptionsPresenceWhateverItsValue) {
  // The proxy adds stream_options only to a body that has none at the top level.
  const BodyFields fields;
  auto has = [&](std::string_view body) {
    const BodyScan scan = scan_body(body, body.size(), fields);
    EXPECT_EQ(scan.error, BodyError::kNone) << scan.error_detail;
    return scan.has_stream_options;
  };
  for (const char* body :
       {R"({"stream_options":{"include_usage":true}})", R"({"stream_options":{}})",
        R"({"stream_options":{"include_usage":false}})", R"({"stream_options":null})",
        R"({"stream_options":5})", R"({"stream":true,"stream_\u006fptions":[]})",
        R"({"stream_options":{"include_usage":true},"stream_options":null})"}) {
    SCOPED_TRACE(body);
    EXPECT_TRUE(has(body));
  }
  for (const char* body :
       {"{}", R"({"stream":true,"model":"m"})", R"({"metadata":{"stream_options":{}}})",
        R"({"messages":[{"stream_options":{}}]})", R"({"prompt":"\"stream_options\":{}"})"}) {
    SCOPED_TRACE(body);
    EXPECT_FALSE(has(body));
  }
  EXPECT_FALSE(scan_body("", 0, fields).has_stream_options);
}

TEST(IdentityBody, CustomDottedPathsShareTheirPrefix) {
  const IdentityOptions options{
      .sources = {{SessionSource::Kind::kBody, "metadata.conversation"},
                  {SessionSource::Kind::kBody, "metadata.deep.id"},
                  {SessionSource::Kind::kClaudeUserId, "metadata.user_id"}}};
  const std::string body = R"({"metadata":{"user_id":"user_ab_account__session_1234abcd",)"
                           R"("deep":{"id":"deep-1"},"conversation":""}})";
  expect_session(extract_body(body, options), "deep-1", "body:metadata.deep.id", options);

  const BodyFields fields(options.sources);
  const BodyScan scan = scan_body(body, body.size(), fields);
  ASSERT_EQ(fields.slot_count(), 3u);
  EXPECT_EQ(scan.values[*fields.slot_of("metadata.user_id")], "user_ab_account__session_1234abcd");
  EXPECT_EQ(scan.values[*fields.slot_of("metadata.deep.id")], "deep-1");
  EXPECT_EQ(fields.slot_of("prompt_cache_key"), std::nullopt);
}

TEST(IdentityBody, OneScanServesSeveralModelsOptions) {
  // The proxy scans once with the union of every model's sources, then resolves
  // with the options of the model the body named.
  const IdentityOptions a{.sources = {{SessionSource::Kind::kBody, "prompt_cache_key"}}};
  const IdentityOptions b{.sources = {{SessionSource::Kind::kBody, "client_metadata.session_id"}}};
  BodyFields fields(a.sources);
  fields.add(b.sources);
  const std::string body =
      R"({"model":"b","prompt_cache_key":"p","client_metadata":{"session_id":"c"}})";
  const BodyScan scan = scan_body(body, body.size(), fields);
  EXPECT_EQ(scan.model, "b");
  std::string id;
  EXPECT_EQ(resolve_identity({}, scan, fields, a, &id).session_hash, stable_hash("p"));
  EXPECT_EQ(id, "p");
  EXPECT_EQ(resolve_identity({}, scan, fields, b, &id).session_hash, stable_hash("c"));
  EXPECT_EQ(id, "c");
  // A source whose path the scan did not collect reads as absent.
  EXPECT_EQ(resolve_identity({}, scan, BodyFields{}, b).kind, IdentityKind::kAnonymous);
}

TEST(IdentityBody, EmptyBodyIsNoErrorAndHeadersStillCount) {
  const ExtractResult anonymous = extract_body("");
  EXPECT_EQ(anonymous.error, BodyError::kNone);
  EXPECT_EQ(anonymous.facts.identity.kind, IdentityKind::kAnonymous);
  const std::vector<HeaderField> headers = {{"x-session-id", "s"}};
  expect_session(extract_request_facts(headers, "", 0, {}), "s", "header:x-session-id");
}

TEST(IdentityBody, LeadingByteOrderMarkIsSkippedAsInPython) {
  // vLLM reads the body with json.loads(bytes), which accepts one UTF-8 BOM first.
  const std::string bom = "\xEF\xBB\xBF";
  const std::string body = bom + R"({"model":"m","prompt_cache_key":"k"})";
  const ExtractResult copied = extract_body(body);
  EXPECT_EQ(copied.facts.model, "m");
  expect_session(copied, "k", "body:prompt_cache_key");

  std::string padded = bom + " \n" + R"({"model":"m","prompt_cache_key":"k"})";
  padded.reserve(padded.size() + simdjson::SIMDJSON_PADDING);
  const ExtractResult in_place = extract_request_facts({}, padded, padded.capacity(), {});
  EXPECT_EQ(in_place.facts.model, "m");
  expect_session(in_place, "k", "body:prompt_cache_key");

  // What Python refuses stays refused: the mark alone, twice, or not first.
  for (const std::string& bad : {bom, bom + bom + "{}", " " + bom + "{}", bom + "[1]"}) {
    SCOPED_TRACE(bad);
    EXPECT_NE(extract_body(bad).error, BodyError::kNone);
  }
  EXPECT_EQ(extract_body(bom).error_detail, "no JSON value");
}

TEST(IdentityBody, InPlaceAndCopiedParsesAgree) {
  Request request = load_fixture(kCodexCurrent);
  std::string padded = request.body;
  padded.reserve(padded.size() + simdjson::SIMDJSON_PADDING);
  const ExtractResult in_place =
      extract_request_facts(request.headers(), padded, padded.capacity(), {});
  const ExtractResult copied = extract_request_facts(request.headers(), request.body, 0, {});
  EXPECT_EQ(in_place.facts.identity, copied.facts.identity);
  EXPECT_EQ(in_place.facts.session_id, copied.facts.session_id);
  EXPECT_EQ(in_place.facts.model, copied.facts.model);
  expect_session(in_place, kCodexThread, "header:session-id");
}

TEST(IdentityBody, HugeBodyUsesItsOwnParser) {
  std::string body = R"({"messages":[")";
  body.append(3u << 20, 'x');  // beyond what a thread keeps between requests
  body += R"("],"model":"big","prompt_cache_key":"k"})";
  const ExtractResult result = extract_body(body);
  EXPECT_EQ(result.facts.model, "big");
  expect_session(result, "k", "body:prompt_cache_key");
  // And the thread's own parser still works afterwards.
  expect_session(extract_body(R"({"prompt_cache_key":"after"})"), "after", "body:prompt_cache_key");
}

// -------------------------------------------------------- malformed bodies

TEST(IdentityMalformed, ErrorsAreReportedWithADetail) {
  const std::vector<std::string> malformed = {
      "   ",
      "{",
      R"({"model":)",
      R"({"model":"x")",
      R"({"model":"x"} trailing)",
      R"({"model":"x"}})",
      R"({"model" "x"})",
      R"({"model":"x" "stream":true})",
      R"({"model":"unterminated})",
      "{\"model\":\"a\x01\"}",
      "{\"model\":\"\xff\xfe\"}",
      R"({"model":"\q"})",
      R"({"prompt_cache_key":"\q"})",
      R"({"prompt_cache_key":"\u12"})",
      R"({"prompt_cache_key":"\ud800\u12"})",
      R"({"mo\qdel":"x"})",
      "{\"prompt_cache_key\":\"a\x01\"}",
      "{\"mo\x01\":\"x\"}",
      R"({"messages":[1,2,{"a":3}})",
      R"({"stream":tru})",
      R"({model:"x"})",
  };
  for (const auto& body : malformed) {
    SCOPED_TRACE(body);
    const ExtractResult result = extract_body(body);
    EXPECT_EQ(result.error, BodyError::kMalformedJson);
    EXPECT_FALSE(result.error_detail.empty());
    EXPECT_EQ(result.facts.identity.kind, IdentityKind::kAnonymous);
  }
}

TEST(IdentityMalformed, BytesAfterTheValueAreNamedAsSuch) {
  for (const char* body :
       {R"({"model":"a"}x)", R"({"model":"a"}])", R"({"model":"x"} trailing)", R"({"model":"x"}})",
        R"({"a":1} {})", R"({"m":"}\"]"}x)", R"({"a":[1,{"b":2}]} 0)"}) {
    SCOPED_TRACE(body);
    const ExtractResult result = extract_body(body);
    EXPECT_EQ(result.error, BodyError::kMalformedJson);
    EXPECT_EQ(result.error_detail, "bytes after the JSON value");
  }
  // A value cut short is still called unclosed, brackets inside strings aside.
  for (const char* body : {R"({"model":"x")", R"({"a":[1,2])", R"({"a":"}")", R"({"a":"\"}")"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(extract_body(body).error_detail, "unclosed object or array");
  }
  EXPECT_EQ(extract_body("{\"model\":\"a\"} \r\n\t").error, BodyError::kNone);
}

TEST(IdentityMalformed, NonObjectTopLevel) {
  for (const char* body : {"[1,2]", R"("text")", "42", "true", "null"}) {
    SCOPED_TRACE(body);
    const ExtractResult result = extract_body(body);
    EXPECT_EQ(result.error, BodyError::kNotAnObject);
    EXPECT_FALSE(result.error_detail.empty());
  }
}

TEST(IdentityMalformed, ErrorOverridesHeaders) {
  // A body the warden cannot read is answered with 400; no routing decision.
  const std::vector<HeaderField> headers = {{"session-id", "s"}};
  const ExtractResult result = extract_request_facts(headers, "{", 1, {});
  EXPECT_EQ(result.error, BodyError::kMalformedJson);
  EXPECT_EQ(result.facts.identity.kind, IdentityKind::kAnonymous);
}

TEST(IdentityMalformed, EveryTruncationAndByteFlipOfARealBodyIsSafe) {
  // Hostile-input sweep under the sanitizers: no crash, no exception, and every
  // truncation of a complete object is an error.
  Request request = load_fixture(kClaudeTitle);
  const std::string& body = request.body;
  for (std::size_t cut = 1; cut < body.size(); cut += 7) {
    const ExtractResult result = extract_body(std::string_view(body).substr(0, cut));
    EXPECT_NE(result.error, BodyError::kNone) << "cut at " << cut;
  }
  std::string mutated = body;
  for (std::size_t i = 0; i < mutated.size(); i += 5) {
    const char saved = mutated[i];
    for (char replacement : {'"', '{', '}', '[', ']', ',', ':', '\\', '\0', '\x80'}) {
      mutated[i] = replacement;
      (void)extract_request_facts(request.headers(), mutated, mutated.size(), {});
    }
    mutated[i] = saved;
  }
}

TEST(IdentityMalformed, DeepNestingIsBounded) {
  const std::string deep_open = R"({"messages":)" + std::string(100'000, '[');
  EXPECT_EQ(extract_body(deep_open).error, BodyError::kMalformedJson);
  const std::string deep_closed =
      R"({"messages":)" + std::string(5'000, '[') + std::string(5'000, ']') + R"(,"model":"m"})";
  const ExtractResult result = extract_body(deep_closed);
  // Skipped content is counted, not recursed into: either outcome is safe.
  if (result.error == BodyError::kNone) {
    EXPECT_EQ(result.facts.model, "m");
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
