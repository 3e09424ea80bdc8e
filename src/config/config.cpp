#include "config/config.h"

#include <algorithm>
#include <numeric>

#include "common/ascii.h"

namespace lmwarden::config {

std::string SessionSource::label() const {
  switch (kind) {
    case Kind::kHeader:
      return "header:" + name;
    case Kind::kBody:
      return "body:" + name;
    case Kind::kClaudeUserId:
      return "claude-user-id";
    case Kind::kOpening:
      return "opening";
  }
  return name;
}

std::vector<std::string> default_unranked_routes() {
  return {"/v1/responses"};
}

std::vector<SessionSource> default_session_sources() {
  using K = SessionSource::Kind;
  return {
      {K::kHeader, "x-claude-code-session-id"},
      {K::kClaudeUserId, "metadata.user_id"},
      {K::kHeader, "session-id"},
      {K::kHeader, "thread-id"},
      {K::kHeader, "session_id"},
      {K::kHeader, "conversation_id"},
      {K::kHeader, "x-session-id"},
      {K::kHeader, "x-session-affinity"},
      {K::kHeader, "x-opencode-session"},
      {K::kBody, "prompt_cache_key"},
      {K::kBody, "client_metadata.session_id"},
  };
}

int ModelConfig::replica_count() const {
  return std::accumulate(backends.begin(), backends.end(), 0,
                         [](int n, const BackendConfig& b) { return n + b.data_parallel_size; });
}

std::string ModelConfig::names() const {
  std::string out = name;
  for (std::size_t i = 0; i < aliases.size(); ++i) out += (i == 0 ? " (also " : ", ") + aliases[i];
  return aliases.empty() ? out : out + ")";
}

std::string_view unsendable_token(std::string_view token) noexcept {
  const auto blank = [](char c) { return c == ' ' || ascii_control(c); };
  if (token.empty()) return "is empty";
  if (blank(token.front()) || blank(token.back()))
    return "begins or ends with white space, which no Authorization header can carry";
  const auto control = [](char c) { return c != '\t' && ascii_control(c); };
  if (std::ranges::any_of(token, control))
    return "holds a control character, which no Authorization header can carry";
  return {};
}

std::string spill_threshold_text(std::optional<int> threshold) {
  return threshold ? std::to_string(*threshold) : std::string("auto");
}

const ModelConfig* Config::find_model(std::string_view name_or_alias) const {
  for (const auto& m : models) {
    if (m.name == name_or_alias) return &m;
    for (const auto& a : m.aliases)
      if (a == name_or_alias) return &m;
  }
  return nullptr;
}

}  // namespace lmwarden::config
