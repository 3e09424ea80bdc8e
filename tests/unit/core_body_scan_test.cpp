// The body scan (scan_body, through extract_request_facts): the fields it
// reads, the strings as Python's json reads them, and malformed bodies.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>
#include <utility>
#include <vector>

#include "identity_test_support.h"

namespace lmwarden::core {
namespace {

using config::SessionSource;
using namespace identity_test;

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
  // Two lone surrogates are two conversations (not both a replacement
  // character); expect_session above checked each hash is its bytes'.
  const std::string body = R"({"model":"m","prompt_cache_key":"k\ud800"})";
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

// Responses' chaining: the id of the stored response a request continues
// (hashed, as the router keeps it) and whether it asks for its own to be
// stored. Read whatever the session sources, and beside any session id.
TEST(IdentityBody, PreviousResponseIdAndStore) {
  const ExtractResult chained =
      extract_body(R"({"model":"m","previous_response_id":"resp_a","input":"yes","store":true})");
  EXPECT_EQ(chained.error, BodyError::kNone) << chained.error_detail;
  EXPECT_EQ(chained.facts.identity.previous_response, stable_hash("resp_a"));
  EXPECT_EQ(chained.facts.identity.kind, IdentityKind::kAnonymous);
  EXPECT_TRUE(chained.facts.store);

  const ExtractResult with_key =
      extract_body(R"({"prompt_cache_key":"k","previous_response_id":"resp_b","store":false})");
  expect_session(with_key, "k", "body:prompt_cache_key");
  EXPECT_EQ(with_key.facts.identity.previous_response, stable_hash("resp_b"));
  EXPECT_FALSE(with_key.facts.store);

  for (const char* body : {R"({"previous_response_id":""})", R"({"previous_response_id":null})",
                           R"({"previous_response_id":7})", R"({"input":"x"})",
                           R"({"metadata":{"previous_response_id":"resp_a"}})",
                           R"({"previous_response_id":"resp_a","previous_response_id":null})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(extract_body(body).facts.identity.previous_response, 0u);
  }
  // On unless the last `store` turns it off; vLLM takes null for off.
  for (const char* body : {"{}", R"({"store":true})", R"({"store":false,"store":true})",
                           R"({"metadata":{"store":false}})"}) {
    SCOPED_TRACE(body);
    EXPECT_TRUE(extract_body(body).facts.store);
  }
  for (const char* body : {R"({"store":false})", R"({"store":null})", R"({"store":"no"})",
                           R"({"store":true,"store":false})"}) {
    SCOPED_TRACE(body);
    EXPECT_FALSE(extract_body(body).facts.store);
  }
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

}  // namespace
}  // namespace lmwarden::core
