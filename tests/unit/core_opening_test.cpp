// The `opening` session source: requests that carry no session id are taken
// for turns of one conversation when they open the same way — system prompt
// and the client's messages before the model's first reply — on the real
// client captures, each grown by a turn as the client would send its next
// request.
#include <gtest/gtest.h>

#include <string>

#include "identity_test_support.h"

namespace lmwarden::core {
namespace {

using config::SessionSource;
using namespace identity_test;

IdentityOptions opening_only() {
  IdentityOptions options;
  options.sources = {SessionSource{SessionSource::Kind::kOpening, ""}};
  return options;
}

// The defaults, then `opening` last: as the configuration guide suggests.
IdentityOptions defaults_then_opening() {
  IdentityOptions options;
  options.sources.push_back(SessionSource{SessionSource::Kind::kOpening, ""});
  return options;
}

// The identity `opening` gives, checked to be one.
std::uint64_t opening_key(Request& request, const IdentityOptions& options = opening_only()) {
  const ExtractResult result = extract(request, options);
  EXPECT_EQ(result.error, BodyError::kNone) << result.error_detail;
  EXPECT_EQ(result.facts.identity.kind, IdentityKind::kSession);
  const int source = result.facts.identity.source;
  EXPECT_GE(source, 0);
  if (source >= 0) {
    EXPECT_EQ(options.sources[static_cast<std::size_t>(source)].label(), "opening");
  }
  EXPECT_EQ(result.facts.session_id, "");
  return result.facts.identity.session_hash;
}

void add_turn(Json& messages, const std::string& reply, const std::string& next) {
  messages.push_back(Json{{"role", "assistant"}, {"content", reply}});
  messages.push_back(Json{{"role", "user"}, {"content", next}});
}

// Codex 0.63 on its chat wire API sends no session id at all.
TEST(IdentityOpening, CodexChatTurnsWithoutAnIdShareTheirOpening) {
  Request first = load_fixture(kCodexChat);
  const ExtractResult plain = extract(first);
  EXPECT_EQ(plain.facts.identity.kind, IdentityKind::kAnonymous) << "no id, and not opted in";

  const std::uint64_t key = opening_key(first, defaults_then_opening());
  Request next = load_fixture(kCodexChat);
  next.edit_body([](Json& body) { add_turn(body["messages"], "Done.", "Now run the tests."); });
  EXPECT_EQ(opening_key(next, defaults_then_opening()), key);
  next.edit_body([](Json& body) { add_turn(body["messages"], "They pass.", "Commit."); });
  EXPECT_EQ(opening_key(next, defaults_then_opening()), key);

  // Another context (its first user message), another task (its second: the
  // first request holds both) or another system prompt: another conversation.
  Request other_context = load_fixture(kCodexChat);
  other_context.edit_body([](Json& body) { body["messages"][1]["content"] = "Another project."; });
  EXPECT_NE(opening_key(other_context), key);
  Request other_task = load_fixture(kCodexChat);
  other_task.edit_body([](Json& body) { body["messages"][2]["content"] = "A different task."; });
  EXPECT_NE(opening_key(other_task), key);
  Request other_system = load_fixture(kCodexChat);
  other_system.edit_body([](Json& body) { body["messages"][0]["content"] = "You are terse."; });
  EXPECT_NE(opening_key(other_system), key);
}

// Claude Code's shape (its ids removed): the cache_control marks move to the
// newest message each turn, and do not change the opening.
TEST(IdentityOpening, AnthropicMessagesKeepTheirOpeningAsCacheMarksMove) {
  Request later = load_fixture(kClaudeTurn);
  later.remove_header("x-claude-code-session-id");
  later.edit_body([](Json& body) { body.erase("metadata"); });
  const std::uint64_t key = opening_key(later, defaults_then_opening());

  Request first = later;
  first.edit_body([](Json& body) {
    Json& messages = body["messages"];
    messages.erase(messages.begin() + 1, messages.end());
    messages[0]["content"].back()["cache_control"] = Json{{"type", "ephemeral"}};
  });
  EXPECT_EQ(opening_key(first), key);

  Request other_system = later;
  other_system.edit_body([](Json& body) { body["system"].back()["text"] = "Another agent."; });
  EXPECT_NE(opening_key(other_system), key);
}

// Codex 0.171's Responses items: developer messages, then the user's; the
// function call that follows, and everything after it, are not part of the
// opening.
TEST(IdentityOpening, ResponsesMessageItemsBeforeTheFirstCall) {
  Request request = load_fixture(kCodexCurrent);
  for (const char* id_header : {"session-id", "thread-id"}) request.remove_header(id_header);
  request.edit_body([](Json& body) {
    body.erase("prompt_cache_key");
    body.erase("client_metadata");
  });
  const std::uint64_t key = opening_key(request, defaults_then_opening());

  Request first = request;
  first.edit_body([](Json& body) {
    Json& input = body["input"];
    std::size_t end = 0;
    while (end < input.size() && input[end].value("type", "") == "message") ++end;
    ASSERT_LT(end, input.size());
    EXPECT_EQ(input[end]["type"], "function_call");
    input.erase(input.begin() + static_cast<std::ptrdiff_t>(end), input.end());
    for (Json& item : input) item.erase("id");  // ids are not part of the opening
  });
  EXPECT_EQ(opening_key(first), key);

  // `input` as a plain string is one user message.
  Request as_string = first;
  as_string.edit_body([](Json& body) { body["input"] = "List the files."; });
  Request same_string = as_string;
  same_string.edit_body([](Json& body) { body["model"] = "another-model"; });
  EXPECT_EQ(opening_key(as_string), opening_key(same_string));
  EXPECT_NE(opening_key(as_string), key);
}

// The scan stops reading the messages at the model's first reply; what comes
// after them in the body is still read.
TEST(IdentityOpening, KeysAfterTheMessagesAreStillRead) {
  const std::string body =
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},)"
      R"({"role":"assistant","content":[{"type":"text","text":"a"}]},{"role":"user","content":"v"}],)"
      R"("model":"m","stream":true,"stream_options":{"include_usage":true},"session_x":"no"})";
  const ExtractResult result = extract_body(body, opening_only());
  EXPECT_EQ(result.error, BodyError::kNone) << result.error_detail;
  EXPECT_EQ(result.facts.model, "m");
  EXPECT_TRUE(result.facts.stream);
  EXPECT_TRUE(result.facts.stream_include_usage);
  EXPECT_EQ(result.facts.identity.kind, IdentityKind::kSession);

  // The same opening with other later turns, and the keys in another order.
  const std::string reordered =
      R"({"model":"m","messages":[{"content":"s","role":"system"},{"role":"user","content":"u"}]})";
  EXPECT_EQ(extract_body(reordered, opening_only()).facts.identity.session_hash,
            result.facts.identity.session_hash);
  // A malformed message after the opening is vLLM's to refuse; the body is
  // still refused when the scan meets it, as before.
  EXPECT_EQ(
      extract_body(R"({"messages":[{"role":"user","content":"u"},{"role":)", opening_only()).error,
      BodyError::kMalformedJson);
}

// Bodies with nothing of a conversation stay anonymous; a last occurrence of a
// key counts, as for every field the warden reads.
TEST(IdentityOpening, NoConversationNoOpening) {
  for (const char* body :
       {R"({"model":"m"})", R"({"model":"m","messages":[]})",
        R"({"model":"m","messages":5,"system":null})", R"({"model":"m","input":["a","b"]})",
        R"({"model":"m","messages":[{"role":"user","content":"u"}],"messages":[]})",
        R"({"messages":[{"role":"assistant","content":"a"},{"role":"user","content":"u"}]})"}) {
    SCOPED_TRACE(body);
    const ExtractResult result = extract_body(body, opening_only());
    EXPECT_EQ(result.error, BodyError::kNone) << result.error_detail;
    EXPECT_EQ(result.facts.identity.kind, IdentityKind::kAnonymous);
  }
  // A system prompt alone is an opening.
  EXPECT_EQ(extract_body(R"({"system":"s","messages":[]})", opening_only()).facts.identity.kind,
            IdentityKind::kSession);
}

// One text in its several spellings opens alike: a string, a text block, a
// Responses string `input` and its one-item list; a chat body's stray
// `input` does not replace its messages.
TEST(IdentityOpening, OneTextInItsSeveralSpellingsOpensAlike) {
  auto key = [](const std::string& body) {
    const ExtractResult result = extract_body(body, opening_only());
    EXPECT_EQ(result.facts.identity.kind, IdentityKind::kSession) << body;
    return result.facts.identity.session_hash;
  };
  const auto plain = key(R"({"messages":[{"role":"user","content":"Explain heapsort"}]})");
  EXPECT_EQ(
      key(R"({"messages":[{"role":"user","content":[{"type":"text","text":"Explain heapsort"}]}]})"),
      plain);
  EXPECT_EQ(key(R"({"input":"Explain heapsort"})"), plain);
  EXPECT_EQ(key(R"({"input":[{"type":"message","role":"user","content":[)"
                R"({"type":"input_text","text":"Explain heapsort"}]}]})"),
            plain);
  EXPECT_EQ(key(R"({"messages":[{"role":"user","content":"Explain heapsort"}],"input":"zzz"})"),
            plain);
  EXPECT_EQ(
      key(R"({"system":"S","messages":[{"role":"user","content":"u"}]})"),
      key(R"({"system":[{"type":"text","text":"S"}],"messages":[{"role":"user","content":"u"}]})"));
  // An image counts by its type alone: two images with one text open alike.
  EXPECT_EQ(
      key(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"a"}},)"
          R"({"type":"text","text":"t"}]}]})"),
      key(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"b"}},)"
          R"({"type":"text","text":"t"}]}]})"));
}

// A Responses request chained with previous_response_id carries only its new
// turn: it has no opening, whatever that turn says.
TEST(IdentityOpening, AChainedResponsesRequestHasNone) {
  EXPECT_EQ(extract_body(R"({"previous_response_id":"resp_a","input":"yes"})", opening_only())
                .facts.identity.kind,
            IdentityKind::kAnonymous);
  EXPECT_EQ(extract_body(R"({"previous_response_id":null,"input":"yes"})", opening_only())
                .facts.identity.kind,
            IdentityKind::kSession);
}

// A session id, where there is one, comes first in the default order.
TEST(IdentityOpening, AnIdBeforeItInTheListWins) {
  Request request = load_fixture(kClaudeTurn);
  expect_session(extract(request, defaults_then_opening()), kClaudeTurnSession,
                 "header:x-claude-code-session-id", defaults_then_opening());
}

}  // namespace
}  // namespace lmwarden::core
