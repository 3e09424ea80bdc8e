#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/identity.h"
#include "engine/chat_template.h"
#include "engine/tokenizer.h"
#include "workload/closed_loop.h"
#include "workload/session.h"
#include "workload/text.h"
#include "workload/wire.h"

namespace lmwarden::workload {
namespace {

std::size_t tokens(const std::string& s) {
  return engine::count_tokens(s);
}

TEST(WorkloadText, HitsTheRequestedTokenCountExactly) {
  Rng rng(7, "text");
  for (std::size_t n : {1u, 2u, 3u, 5u, 17u, 63u, 64u, 65u, 66u, 67u, 130u, 400u, 3500u, 6000u}) {
    const std::string text = synthetic_text(rng, n);
    EXPECT_EQ(tokens(text), n) << "target " << n;
  }
  EXPECT_EQ(synthetic_text(rng, 0), "");
}

TEST(WorkloadText, LooksLikeTextToTheTokenizer) {
  Rng rng(3, "text");
  const std::string text = synthetic_text(rng, 5000);
  // A real BPE tokenizer averages 3–5 bytes per token on English and code.
  const double bytes_per_token = static_cast<double>(text.size()) / 5000.0;
  EXPECT_GT(bytes_per_token, 3.0);
  EXPECT_LT(bytes_per_token, 6.0);
}

TEST(WorkloadSession, ShapeMatchesTheConfigWithinTolerance) {
  const Workload w(WorkloadConfig{.seed = 11});
  const Session s = w.session(0);
  ASSERT_EQ(s.turns(), 6);
  EXPECT_NEAR(static_cast<double>(tokens(*s.system_prompt)), 3500.0, 3500 * 0.02);
  EXPECT_NEAR(static_cast<double>(tokens(s.user_turns[0])), 6000.0, 6000 * 0.02);
  for (int t = 1; t < s.turns(); ++t) {
    EXPECT_NEAR(static_cast<double>(tokens(s.user_turns[static_cast<std::size_t>(t)])), 400.0,
                400 * 0.05);
  }
  EXPECT_EQ(s.max_output_tokens, 256);
}

TEST(WorkloadSession, SizesAreConfigurable) {
  const Workload w(WorkloadConfig{.seed = 2,
                                  .system_prompt_tokens = 1000,
                                  .first_user_tokens = 2000,
                                  .followup_turns = 2,
                                  .followup_tokens = 100,
                                  .max_output_tokens = 32});
  const Session s = w.session(5);
  ASSERT_EQ(s.turns(), 3);
  EXPECT_NEAR(static_cast<double>(tokens(*s.system_prompt)), 1000.0, 20.0);
  EXPECT_NEAR(static_cast<double>(tokens(s.user_turns[0])), 2000.0, 40.0);
  EXPECT_NEAR(static_cast<double>(tokens(s.user_turns[1])), 100.0, 5.0);
  EXPECT_EQ(s.max_output_tokens, 32);
}

TEST(WorkloadSession, SameSeedSamePromptsOtherSeedOthers) {
  const Workload a(WorkloadConfig{.seed = 42});
  const Workload b(WorkloadConfig{.seed = 42});
  const Workload c(WorkloadConfig{.seed = 43});
  EXPECT_EQ(a.system_prompt(), b.system_prompt());
  EXPECT_NE(a.system_prompt(), c.system_prompt());
  for (std::uint64_t i : {0u, 1u, 9u}) {
    EXPECT_EQ(a.session(i).id, b.session(i).id);
    EXPECT_EQ(a.session(i).user_turns, b.session(i).user_turns);
    EXPECT_NE(a.session(i).user_turns[0], c.session(i).user_turns[0]);
  }
  // Sessions differ from each other, ids included.
  std::set<std::string> ids;
  for (std::uint64_t i = 0; i < 50; ++i) ids.insert(a.session(i).id);
  EXPECT_EQ(ids.size(), 50u);
}

TEST(WorkloadSession, SaltChangesOnlyTheSessionNameNotTheSizes) {
  const Workload w(WorkloadConfig{.seed = 5});
  const Session off = w.session(3, "off");
  const Session on = w.session(3, "on");
  EXPECT_NE(off.id, on.id);
  EXPECT_NE(off.user_turns[0], on.user_turns[0]);
  EXPECT_EQ(tokens(off.user_turns[0]), tokens(on.user_turns[0]));
  for (int t = 1; t < off.turns(); ++t)
    EXPECT_EQ(off.user_turns[static_cast<std::size_t>(t)],
              on.user_turns[static_cast<std::size_t>(t)]);
}

TEST(WorkloadSession, SkewMakesSomeSessionsHeavy) {
  const Workload w(WorkloadConfig{.seed = 9, .heavy_share = 0.5, .heavy_factor = 3.0});
  int heavy = 0;
  for (std::uint64_t i = 0; i < 40; ++i) {
    const Session s = w.session(i);
    const double expect = s.heavy ? 18000.0 : 6000.0;
    EXPECT_NEAR(static_cast<double>(tokens(s.user_turns[0])), expect, expect * 0.02);
    heavy += s.heavy ? 1 : 0;
  }
  EXPECT_GT(heavy, 10);
  EXPECT_LT(heavy, 30);
  const Workload uniform(WorkloadConfig{.seed = 9});
  for (std::uint64_t i = 0; i < 40; ++i) EXPECT_FALSE(uniform.session(i).heavy);
}

TEST(WorkloadConversation, EachTurnResendsTheHistoryWithReplies) {
  const Workload w(WorkloadConfig{.seed = 1});
  Conversation c(w.session(0));
  std::string previous_prompt;
  for (int turn = 0; turn < 6; ++turn) {
    const auto messages = c.messages();
    ASSERT_EQ(messages.size(), static_cast<std::size_t>(2 + 2 * turn));
    EXPECT_EQ(messages.front().role, "system");
    EXPECT_EQ(messages.back().role, "user");
    EXPECT_EQ(messages.back().content, c.session().user_turns[static_cast<std::size_t>(turn)]);
    for (int t = 0; t < turn; ++t) {
      EXPECT_EQ(messages[static_cast<std::size_t>(2 + 2 * t)].role, "assistant");
      EXPECT_EQ(messages[static_cast<std::size_t>(2 + 2 * t)].content,
                "reply " + std::to_string(t));
    }
    // The rendered prompt extends the previous one (minus its open assistant
    // turn): the history is resent verbatim, which is what the cache reuses.
    engine::ChatPrompt prompt{.messages = messages, .add_generation_prompt = false};
    const std::string rendered = engine::render_chat(prompt);
    EXPECT_TRUE(rendered.starts_with(previous_prompt));
    previous_prompt = rendered;
    EXPECT_FALSE(c.done());
    c.add_reply("reply " + std::to_string(turn));
  }
  EXPECT_TRUE(c.done());
}

TEST(WorkloadClosedLoop, ReplacesFinishedSessionsAndKeepsConcurrency) {
  const Workload w(WorkloadConfig{.seed = 1, .followup_turns = 1});
  ClosedLoop loop(w, 3, "run");
  EXPECT_EQ(loop.concurrency(), 3);
  EXPECT_EQ(loop.sessions_started(), 3u);
  const std::string first_id = loop.conversation(1).session().id;
  EXPECT_FALSE(loop.complete_turn(1, "a"));
  EXPECT_TRUE(loop.complete_turn(1, "b"));
  EXPECT_EQ(loop.sessions_completed(), 1u);
  EXPECT_EQ(loop.sessions_started(), 4u);
  EXPECT_EQ(loop.concurrency(), 3);
  EXPECT_NE(loop.conversation(1).session().id, first_id);
  EXPECT_EQ(loop.conversation(1).session().index, 3u);
  EXPECT_EQ(loop.conversation(1).next_turn(), 0);
}

// The warden finds the session id in every dialect, and the bodies are JSON.
TEST(WorkloadWire, EveryDialectCarriesTheSessionIdTheWardenReads) {
  const Workload w(
      WorkloadConfig{.seed = 1, .system_prompt_tokens = 200, .first_user_tokens = 300});
  Conversation c(w.session(0));
  c.add_reply("Sure, \"quoted\" and\nnew line.");
  for (Dialect d : {Dialect::kOpenAi, Dialect::kAnthropic, Dialect::kResponses}) {
    SCOPED_TRACE(to_string(d));
    EXPECT_EQ(parse_dialect(to_string(d)), d);
    const WireRequest req = build_request(d, c, "qwen3");
    const auto body = nlohmann::json::parse(req.body);
    EXPECT_EQ(body["model"], "qwen3");
    EXPECT_EQ(body["stream"], true);
    EXPECT_EQ(body[d == Dialect::kResponses ? "max_output_tokens" : "max_tokens"], 256);
    std::vector<core::HeaderField> headers;
    for (const auto& [k, v] : req.headers) headers.emplace_back(k, v);
    const auto facts = core::extract_request_facts(headers, req.body, req.body.size(), {});
    ASSERT_EQ(facts.error, core::BodyError::kNone);
    EXPECT_EQ(facts.facts.identity.kind, core::IdentityKind::kSession);
    EXPECT_EQ(facts.facts.session_id, c.session().id);
    if (d == Dialect::kOpenAi) {
      EXPECT_EQ(req.target, "/v1/chat/completions");
      EXPECT_EQ(body["prompt_cache_key"], c.session().id);
      EXPECT_EQ(body["stream_options"]["include_usage"], true);
      ASSERT_EQ(body["messages"].size(), 4u);
      EXPECT_EQ(body["messages"][2]["content"], "Sure, \"quoted\" and\nnew line.");
    } else if (d == Dialect::kResponses) {
      // As Codex 0.171 sends it: the system prompt a developer message.
      EXPECT_EQ(req.target, "/v1/responses");
      EXPECT_EQ(body["prompt_cache_key"], c.session().id);
      EXPECT_EQ(body["store"], false);
      ASSERT_EQ(body["input"].size(), 4u);
      EXPECT_EQ(body["input"][0]["role"], "developer");
      EXPECT_EQ(body["input"][0]["content"][0]["text"], c.session().system_prompt->c_str());
      EXPECT_EQ(body["input"][1]["content"][0]["type"], "input_text");
      EXPECT_EQ(body["input"][2]["role"], "assistant");
      EXPECT_EQ(body["input"][2]["content"][0]["type"], "output_text");
      EXPECT_EQ(body["input"][2]["content"][0]["text"], "Sure, \"quoted\" and\nnew line.");
    } else {
      EXPECT_EQ(req.target, "/v1/messages?beta=true");
      EXPECT_EQ(body["system"][0]["text"], c.session().system_prompt->c_str());
      ASSERT_TRUE(body["metadata"]["user_id"].is_string());
      const auto user = nlohmann::json::parse(body["metadata"]["user_id"].get<std::string>());
      EXPECT_EQ(user["session_id"], c.session().id);
      ASSERT_EQ(body["messages"].size(), 3u);
      EXPECT_EQ(body["messages"][1]["role"], "assistant");
      // Without the header the body alone still names the session.
      const auto by_body = core::extract_request_facts({}, req.body, req.body.size(), {});
      EXPECT_EQ(by_body.facts.session_id, c.session().id);
    }
  }
}

// Without session ids a request carries none of them, in any dialect; the
// warden's `opening` source still finds one conversation in its turns.
TEST(WorkloadWire, WithoutSessionIdsOnlyTheOpeningIdentifiesTheTurns) {
  const Workload w(
      WorkloadConfig{.seed = 2, .system_prompt_tokens = 200, .first_user_tokens = 300});
  core::IdentityOptions opening;
  opening.sources = {config::SessionSource{config::SessionSource::Kind::kOpening, ""}};
  auto facts = [](const WireRequest& req, const core::IdentityOptions& options) {
    std::vector<core::HeaderField> headers;
    for (const auto& [k, v] : req.headers) headers.emplace_back(k, v);
    return core::extract_request_facts(headers, req.body, req.body.size(), options).facts;
  };
  for (Dialect d : {Dialect::kOpenAi, Dialect::kAnthropic, Dialect::kResponses}) {
    SCOPED_TRACE(to_string(d));
    Conversation c(w.session(0));
    const WireRequest first = build_request(d, c, "qwen3", /*session_ids=*/false);
    const std::string& id = c.session().id;
    EXPECT_EQ(first.body.find(id), first.body.find("Task " + id) + 5)
        << "the id only in the task's text";
    EXPECT_EQ(first.body.rfind(id), first.body.find(id));
    for (const auto& [name, value] : first.headers) EXPECT_NE(value, id) << name;
    EXPECT_EQ(facts(first, {}).identity.kind, core::IdentityKind::kAnonymous);
    const auto key = facts(first, opening).identity;
    EXPECT_EQ(key.kind, core::IdentityKind::kSession);
    c.add_reply("Done.");
    EXPECT_EQ(facts(build_request(d, c, "qwen3", false), opening).identity, key);
    const Conversation other(w.session(1));
    EXPECT_NE(facts(build_request(d, other, "qwen3", false), opening).identity, key);
  }
}

TEST(WorkloadConfig, ValidateNamesTheBadValue) {
  EXPECT_FALSE(WorkloadConfig{}.validate());
  EXPECT_TRUE(WorkloadConfig{.followup_turns = -1}.validate());
  EXPECT_TRUE(WorkloadConfig{.heavy_share = 1.5}.validate());
  EXPECT_EQ(WorkloadConfig{}.typical_context_tokens(), 3500 + 6000 + 5 * 400 + 6 * 256);
}

}  // namespace
}  // namespace lmwarden::workload

namespace lmwarden::workload {
namespace {

TEST(WorkloadSession, ToolPausesAreDrawnAroundTheMean) {
  const Workload w(WorkloadConfig{.seed = 4, .tool_seconds = 2.0});
  double sum = 0;
  int n = 0;
  for (std::uint64_t i = 0; i < 20; ++i) {
    const Session s = w.session(i);
    ASSERT_EQ(s.pauses.size(), 5u);
    for (double p : s.pauses) {
      EXPECT_GE(p, 1.0);
      EXPECT_LT(p, 3.0);
      sum += p;
      ++n;
    }
  }
  EXPECT_NEAR(sum / n, 2.0, 0.2);
  ClosedLoop loop(w, 1, "");
  EXPECT_EQ(loop.pause_before_next(0), 0.0);  // a fresh session starts at once
  loop.complete_turn(0, "r");
  EXPECT_EQ(loop.pause_before_next(0), loop.conversation(0).session().pauses[0]);
  const Workload none(WorkloadConfig{.seed = 4, .tool_seconds = 0});
  for (double p : none.session(0).pauses) EXPECT_EQ(p, 0.0);
}

}  // namespace
}  // namespace lmwarden::workload
