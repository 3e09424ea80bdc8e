// The benchmark's three wire dialects against the simulator's parser: one
// conversation, whichever dialect carries it, is the same prompt to the
// engine (so arms and dialects compare like with like), with the same reply
// limit, streamed.
#include <gtest/gtest.h>

#include "sim/api_request.h"
#include "workload/session.h"
#include "workload/wire.h"

namespace lmwarden::sim {
namespace {

using workload::Dialect;

Api api_of(std::string_view target) {
  if (target == "/v1/responses") return Api::kResponses;
  if (target.starts_with("/v1/messages")) return Api::kMessages;
  return Api::kChatCompletions;
}

TEST(SimDialects, EveryDialectIsTheSamePromptToTheEngine) {
  const workload::Workload w(workload::WorkloadConfig{
      .seed = 7, .system_prompt_tokens = 300, .first_user_tokens = 400, .max_output_tokens = 40});
  workload::Conversation c(w.session(2));
  c.add_reply("First reply, with \"quotes\".");
  c.add_reply("Second reply.\nTwo lines.");
  std::optional<std::string> chat_prompt;
  for (const Dialect d : {Dialect::kOpenAi, Dialect::kAnthropic, Dialect::kResponses}) {
    SCOPED_TRACE(workload::to_string(d));
    const workload::WireRequest wire = workload::build_request(d, c, "qwen3");
    const ParseResult parsed = parse_api_request(api_of(wire.target), wire.body);
    ASSERT_TRUE(parsed.request) << parsed.error;
    EXPECT_EQ(parsed.request->api, api_of(wire.target));
    EXPECT_TRUE(parsed.request->stream);
    EXPECT_EQ(parsed.request->max_tokens, 40);
    if (!chat_prompt) {
      chat_prompt = parsed.request->prompt_text;
      EXPECT_NE(chat_prompt->find("Second reply.\nTwo lines."), std::string::npos);
    } else {
      EXPECT_EQ(parsed.request->prompt_text, *chat_prompt);
    }
  }
}

}  // namespace
}  // namespace lmwarden::sim
