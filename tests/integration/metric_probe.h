// Reads one figure from a warden's GET /metrics, as a scraper would.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "http_test_client.h"
#include "telemetry/prometheus.h"

namespace lmwarden::testing {

// The sum of the samples of metric `name` whose labels include all of `labels`.
inline double metric(std::uint16_t port, const std::string& name,
                     const std::map<std::string, std::string>& labels = {}) {
  const auto text = http_request(port, http::verb::get, "/metrics").body;
  const auto parsed = telemetry::parse_exposition(text);
  double sum = 0;
  for (const auto& s : parsed.samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      const std::string* value = s.label(k);
      match &= value != nullptr && *value == v;
    }
    if (match) sum += s.value;
  }
  return sum;
}

}  // namespace lmwarden::testing
