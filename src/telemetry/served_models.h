// The model names a server answers to, from its GET /v1/models (OpenAI's
// list: {"object": "list", "data": [{"id": NAME, …}, …]}), as vLLM lists
// each of its --served-model-name there (and each LoRA adapter it loaded).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lmwarden::telemetry {

// The ids, in the list's order; nullopt when the body is not such a list.
// At most 256 are kept (a server with more adapters than that is listed in
// part).
std::optional<std::vector<std::string>> served_model_ids(std::string_view body);

}  // namespace lmwarden::telemetry
