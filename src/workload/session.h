// Synthetic coding-agent sessions (DESIGN §9).
//
// A session is what an agent such as Claude Code or Codex sends over one task:
// a system prompt shared by every session (the agent's instructions and tool
// descriptions), a first user message unique to the session (the task plus the
// files and tool output it pulled in), then a few more turns of new text each.
// Every turn resends the whole history, the model's earlier replies included,
// which is what makes the prefix cache matter.
//
// Sessions are addressed by index and drawn from (seed, salt, index) alone, so
// the n-th session of a run is the same whichever policy serves it and in
// whatever order sessions start. The salt keeps two runs on one warm backend
// (the off and on arms of a step) from sharing cached prefixes beyond the
// system prompt, without changing any size.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/chat_template.h"

namespace lmwarden::workload {

struct WorkloadConfig {
  std::uint64_t seed = 1;
  std::int32_t system_prompt_tokens = 3500;
  std::int32_t first_user_tokens = 6000;
  std::int32_t followup_turns = 5;  // turns after the first
  std::int32_t followup_tokens = 400;
  std::int32_t max_output_tokens = 256;
  // Skew: the share of sessions that are heavy, whose first user message is
  // heavy_factor times longer (a large file or log pulled in). 0 = uniform.
  double heavy_share = 0.0;
  double heavy_factor = 3.0;
  // Mean seconds between a reply and the next turn: the agent running the
  // tool the model asked for (edit, test, grep). Each pause is drawn uniformly
  // in [0.5, 1.5] × mean; 0 = the next turn leaves as the reply ends.
  double tool_seconds = 1.0;

  // An error message when a value is out of range, nullopt when valid.
  std::optional<std::string> validate() const;
  // Tokens of history a session reaches in its last turn, roughly: what one
  // session holds in a replica's KV cache (the rule of thumb in the docs).
  std::int64_t typical_context_tokens() const noexcept;
};

// One session's script: who it is and what the user says each turn.
struct Session {
  std::uint64_t index = 0;
  std::string id;  // UUID-shaped; the session id the client sends
  bool heavy = false;
  std::shared_ptr<const std::string> system_prompt;  // shared by all sessions
  std::vector<std::string> user_turns;               // 1 + followup_turns
  std::int32_t max_output_tokens = 256;
  // Seconds between the reply to turn t and turn t + 1 (turns() − 1 entries).
  std::vector<double> pauses;

  std::int32_t turns() const noexcept { return static_cast<std::int32_t>(user_turns.size()); }
};

class Workload {
 public:
  // `config` must be valid (see validate()).
  explicit Workload(WorkloadConfig config);

  const WorkloadConfig& config() const noexcept { return config_; }
  const std::string& system_prompt() const noexcept { return *system_prompt_; }
  // The session with this index; `salt` names the run it belongs to.
  Session session(std::uint64_t index, std::string_view salt = {}) const;

 private:
  WorkloadConfig config_;
  std::shared_ptr<const std::string> system_prompt_;
};

// A session in progress: its script plus the replies received so far.
class Conversation {
 public:
  explicit Conversation(Session session) : session_(std::move(session)) {}

  const Session& session() const noexcept { return session_; }
  // The turn to send next (0-based); turns() when done.
  std::int32_t next_turn() const noexcept { return static_cast<std::int32_t>(replies_.size()); }
  bool done() const noexcept { return next_turn() >= session_.turns(); }
  // Records the reply to the turn just sent.
  void add_reply(std::string reply) { replies_.push_back(std::move(reply)); }
  const std::vector<std::string>& replies() const noexcept { return replies_; }

  // The messages of the next turn: system, then user/assistant pairs of the
  // history, then the new user message. Precondition: !done().
  std::vector<engine::ChatMessage> messages() const;

 private:
  Session session_;
  std::vector<std::string> replies_;
};

// A session id as Claude Code and Codex send one: a lower-case UUID v4.
std::string uuid_from(std::uint64_t hi, std::uint64_t lo);

}  // namespace lmwarden::workload
