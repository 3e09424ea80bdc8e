#include "workload/session.h"

#include <fmt/format.h>

#include <cmath>
#include <string_view>

#include "engine/tokenizer.h"
#include "workload/random.h"
#include "workload/text.h"

namespace lmwarden::workload {

std::optional<std::string> WorkloadConfig::validate() const {
  if (system_prompt_tokens < 0) return "system prompt tokens must be >= 0";
  if (first_user_tokens < 64) return "first user message must be at least 64 tokens";
  if (followup_turns < 0) return "follow-up turns must be >= 0";
  if (followup_tokens < 1) return "follow-up tokens must be >= 1";
  if (max_output_tokens < 1) return "max output tokens must be >= 1";
  if (!(heavy_share >= 0.0 && heavy_share <= 1.0)) return "heavy share must be in [0, 1]";
  if (!(tool_seconds >= 0.0 && tool_seconds <= 3600.0)) return "tool seconds must be in [0, 3600]";
  if (!(heavy_factor >= 1.0 && heavy_factor <= 100.0)) return "heavy factor must be in [1, 100]";
  return std::nullopt;
}

std::int64_t WorkloadConfig::typical_context_tokens() const noexcept {
  return std::int64_t{system_prompt_tokens} + first_user_tokens +
         std::int64_t{followup_turns} * followup_tokens +
         std::int64_t{followup_turns + 1} * max_output_tokens;
}

std::string uuid_from(std::uint64_t hi, std::uint64_t lo) {
  // Version 4, variant 10xx, as uuid.uuid4() and crypto.randomUUID() write it.
  hi = (hi & ~0xf000ull) | 0x4000ull;
  lo = (lo & ~(0xc000ull << 48)) | (0x8000ull << 48);
  return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32, (hi >> 16) & 0xffff,
                     hi & 0xffff, lo >> 48, lo & 0xffffffffffffull);
}

Workload::Workload(WorkloadConfig config) : config_(config) {
  Rng rng(config_.seed, "system-prompt");
  std::string text = "You are a coding agent working in the user's repository.\n";
  const auto intro = static_cast<std::int32_t>(engine::count_tokens(text));
  text += synthetic_text(
      rng, static_cast<std::size_t>(std::max(0, config_.system_prompt_tokens - intro)));
  system_prompt_ = std::make_shared<const std::string>(std::move(text));
}

Session Workload::session(std::uint64_t index, std::string_view salt) const {
  Session s;
  s.index = index;
  Rng id_rng(config_.seed ^ stable_hash(salt), "session-id", index);
  const std::uint64_t hi = id_rng.next();
  s.id = uuid_from(hi, id_rng.next());
  s.heavy =
      config_.heavy_share > 0.0 && Rng(config_.seed, "heavy", index).chance(config_.heavy_share);
  s.system_prompt = system_prompt_;
  s.max_output_tokens = config_.max_output_tokens;

  // The opening line names the session, as agents put the working directory
  // and date there; it is the only text that depends on the salt, and its
  // tokens are taken from the message's budget so sizes never depend on it.
  std::string first = fmt::format("Task {} in workspace {}:\n", s.id, index);
  const auto header = static_cast<std::int32_t>(engine::count_tokens(first));
  const double scale = s.heavy ? config_.heavy_factor : 1.0;
  const auto budget = static_cast<std::int32_t>(std::lround(config_.first_user_tokens * scale));
  Rng rng(config_.seed, "session", index);
  first += synthetic_text(rng, static_cast<std::size_t>(std::max(1, budget - header)));
  s.user_turns.push_back(std::move(first));
  for (std::int32_t t = 0; t < config_.followup_turns; ++t) {
    s.user_turns.push_back(synthetic_text(rng, static_cast<std::size_t>(config_.followup_tokens)));
  }
  Rng pause_rng(config_.seed, "pause", index);
  for (std::int32_t t = 0; t < config_.followup_turns; ++t) {
    s.pauses.push_back(config_.tool_seconds * (0.5 + pause_rng.unit()));
  }
  return s;
}

std::vector<engine::ChatMessage> Conversation::messages() const {
  std::vector<engine::ChatMessage> out;
  out.reserve(2 + 2 * replies_.size());
  if (!session_.system_prompt->empty()) {
    out.push_back({.role = "system", .content = *session_.system_prompt});
  }
  for (std::size_t t = 0; t <= replies_.size(); ++t) {
    out.push_back({.role = "user", .content = session_.user_turns[t]});
    if (t < replies_.size()) out.push_back({.role = "assistant", .content = replies_[t]});
  }
  return out;
}

}  // namespace lmwarden::workload
