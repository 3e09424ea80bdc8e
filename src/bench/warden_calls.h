// The online benchmark's calls outside its session slots: the warden's
// control API (a model's card, PATCH to switch an arm) and the servers'
// /metrics, one request per connection; and a model's routing settings, as
// its card shows them and an arm sets them (online_runner.cpp).
#pragma once

#include <fmt/format.h>

#include <boost/beast/http/verb.hpp>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "net/executor.h"

namespace lmwarden::bench {

inline constexpr std::chrono::seconds kControlTimeout{10};

// "HTTP 400: <the error's message>" from an OpenAI or Anthropic error body
// (`error.message`), or with the body's start when it is neither.
std::string refusal(int status, std::string_view body);

struct Endpoint {
  std::string host;
  std::uint16_t port = 80;
  std::string base_path;
  std::string url;
};

// A server's or the warden's URL, checked as a backend's is.
Result<Endpoint, std::string> endpoint_of(const std::string& url);

struct Reply {
  unsigned status = 0;
  std::string body;
};

// One request on a fresh connection (control and metrics calls: a handful a
// second on loopback, not worth pooling), within kControlTimeout.
net::Awaitable<Result<Reply, std::string>> fetch(const Endpoint& ep, boost::beast::http::verb verb,
                                                 std::string target, std::string body = {},
                                                 std::optional<std::string> bearer = std::nullopt);

// A card's percentage, 0 when it has none.
double percent_or(const nlohmann::json& j, const char* key);

// A model's routing settings, as its card shows them and an arm sets them.
struct ModelSettings {
  bool affinity = true;
  std::optional<int> spill_threshold;  // none: auto
  // A card's: the threshold in force, auto's number included.
  std::optional<int> in_force;

  static std::optional<ModelSettings> of_card(const nlohmann::json& card) {
    if (!card.is_object() || !card.contains("affinity") || !card["affinity"].is_boolean())
      return std::nullopt;
    ModelSettings s{.affinity = card["affinity"].get<bool>()};
    const bool automatic = card.value("spill_threshold_auto", true);
    if (card.contains("spill_threshold") && card["spill_threshold"].is_number_integer()) {
      s.in_force = card["spill_threshold"].get<int>();
      if (!automatic) s.spill_threshold = s.in_force;
    }
    return s;
  }
  // An online arm's settings: off, on, or warden:N (N from 1 to the
  // warden's own limit, 1000000); none for anything else.
  static std::optional<ModelSettings> parse_arm(std::string_view arm) {
    if (arm == "off") return ModelSettings{.affinity = false};
    if (arm == "on") return ModelSettings{.affinity = true};
    if (!arm.starts_with("warden:")) return std::nullopt;
    int n = 0;
    const char* last = arm.data() + arm.size();
    const auto [end, ec] = std::from_chars(arm.data() + 7, last, n);
    if (ec != std::errc{} || end != last || n < 1 || n > 1'000'000) return std::nullopt;
    return ModelSettings{.affinity = true, .spill_threshold = n};
  }
  // The settings of an arm validate_online_arm accepted.
  static ModelSettings of_arm(const std::string& arm) { return *parse_arm(arm); }
  // Whether a model so set serves the arm: with affinity off, the threshold
  // plays no part; an arm that names a number is served by that number in
  // force, whether the file wrote it or `auto` gave it (warden:8 by auto's 8).
  bool serves(const ModelSettings& arm) const {
    if (affinity != arm.affinity) return false;
    if (!affinity) return true;
    return arm.spill_threshold ? in_force == arm.spill_threshold : !spill_threshold;  // `on`: auto
  }
  // The arm that measures these settings.
  std::string arm() const {
    if (!affinity) return "off";
    return spill_threshold ? "warden:" + std::to_string(*spill_threshold) : "on";
  }
  std::string describe() const {
    return fmt::format("affinity {}, spill threshold {}", affinity ? "on" : "off",
                       spill_threshold ? std::to_string(*spill_threshold) : "auto");
  }
  // PATCH /api/models/{model}'s body.
  nlohmann::json patch() const {
    return {{"affinity", affinity},
            {"spill_threshold",
             spill_threshold ? nlohmann::json(*spill_threshold) : nlohmann::json("auto")}};
  }
};

}  // namespace lmwarden::bench
