#include "proxy/refusals.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace lmwarden::proxy {

void Refusals::log_unknown_model(const config::Config& config, std::string_view name,
                                 std::string_view path, std::string_view user_agent) {
  std::size_t logged = 0;
  {
    std::lock_guard lock{mutex_};
    if (unknown_names_.size() >= kUnknownNamesLogged || !unknown_names_.emplace(name).second)
      return;
    logged = unknown_names_.size();
  }
  std::string served;
  for (const auto& m : config.models) served += (served.empty() ? "" : ", ") + m.names();
  constexpr std::size_t kShown = 128;  // of a name or user agent, which the client chose
  spdlog::warn(
      "a client asked for model {:?}, which is not served here (on {}, user agent {:?}); served: "
      "{}. To serve it, list it under a model's aliases{}",
      name.substr(0, kShown), path, user_agent.substr(0, kShown), served,
      logged == kUnknownNamesLogged
          ? fmt::format(". Each name is logged once, and only the first {}: no more are logged",
                        kUnknownNamesLogged)
          : "");
}

}  // namespace lmwarden::proxy
