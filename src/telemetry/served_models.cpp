#include "telemetry/served_models.h"

#include <simdjson.h>

namespace lmwarden::telemetry {

std::optional<std::vector<std::string>> served_model_ids(std::string_view body) {
  constexpr std::size_t kMostIds = 256;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS) return std::nullopt;
  simdjson::dom::array data;
  if (root["data"].get_array().get(data) != simdjson::SUCCESS) return std::nullopt;
  std::vector<std::string> ids;
  for (const simdjson::dom::element model : data) {
    std::string_view id;
    if (model["id"].get_string().get(id) != simdjson::SUCCESS) continue;
    ids.emplace_back(id);
    if (ids.size() == kMostIds) break;
  }
  return ids;
}

}  // namespace lmwarden::telemetry
