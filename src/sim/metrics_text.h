// /metrics of the simulated server: Prometheus text with vLLM's metric names,
// label names (`engine`, `model_name`) and layout — one HELP/TYPE header per
// family, then one series per engine, counters with `_created` companions.
#pragma once

#include <string>
#include <string_view>

#include "engine/dp_server.h"

namespace lmwarden::sim {

std::string render_metrics(const engine::DpServer& server, std::string_view model_name,
                           double started_unix);

}  // namespace lmwarden::sim
