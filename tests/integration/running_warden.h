// The warden in-process on 127.0.0.1 port 0, with its scraper, for
// integration tests; configured from YAML like the real binary.
#pragma once

#include <spdlog/spdlog.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "http_test_client.h"
#include "proxy/runtime.h"
#include "telemetry/prometheus.h"

namespace lmwarden::testing {

class RunningWarden {
 public:
  explicit RunningWarden(config::Config cfg, bool scrape = false) : runtime_(std::move(cfg)) {
    // spdlog's registry is made here, before the warden's threads can log,
    // as `lmwarden serve` makes it on its main thread: two threads logging
    // first race to construct it, behind a static-init guard inside
    // libspdlog that ThreadSanitizer cannot see.
    spdlog::default_logger_raw();
    port_ = runtime_.start(scrape).port();
  }
  std::uint16_t port() const { return port_; }
  std::vector<std::string> reload(config::Config cfg) { return runtime_.reload(std::move(cfg)); }
  nlohmann::json card(const std::string& model = "m") {
    auto r = http_request(port_, http::verb::get, "/api/models/" + model);
    return nlohmann::json::parse(r.body);
  }
  // lmwarden_requests_total by route, summed over the replicas of all models.
  std::map<std::string, double> routed() {
    std::map<std::string, double> by_route;
    const auto text = http_request(port_, http::verb::get, "/metrics").body;
    for (const auto& s : telemetry::parse_exposition(text).samples)
      if (s.name == "lmwarden_requests_total") by_route[*s.label("route")] += s.value;
    return by_route;
  }

 private:
  proxy::WardenRuntime runtime_;
  std::uint16_t port_ = 0;
};

// A configuration from YAML written by a test; throws with the messages when
// it does not load.
inline config::Config load_test_config(const std::string& yaml) {
  auto cfg = config::load_config_string(yaml, "test.yaml");
  if (!cfg) throw std::runtime_error(cfg.error().message());
  return std::move(cfg).value();
}

// `top` and `model_extra` are YAML lines added at the top level and to the
// model; `timeouts` the lines under `timeouts:` besides `connect: 2s`.
inline config::Config make_config(const std::vector<std::pair<std::uint16_t, int>>& backends,
                                  std::optional<int> spill = std::nullopt, const std::string& top = "",
                                  const std::string& model_extra = "",
                                  const std::string& timeouts = "  first_byte: 20s\n  idle: 20s\n") {
  std::string yaml = "listen: 127.0.0.1:0\nlimits:\n  max_body_bytes: 1MiB\ntimeouts:\n  connect: 2s\n" + timeouts + top +
                     "models:\n  - name: m\n    aliases: [m-alias]\n" + model_extra;
  if (spill) yaml += "    spill_threshold: " + std::to_string(*spill) + "\n";
  yaml += "    backends:\n";
  for (auto [port, ranks] : backends)
    yaml += "      - url: http://127.0.0.1:" + std::to_string(port) +
            "\n        data_parallel_size: " + std::to_string(ranks) + "\n";
  return load_test_config(yaml);
}

}  // namespace lmwarden::testing
