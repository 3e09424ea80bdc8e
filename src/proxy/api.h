// The warden's JSON API (DESIGN §7.2) and the OpenAI model list: pure
// functions from the warden's state to response bodies.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "config/config.h"
#include "net/http_server.h"
#include "proxy/config_reloads.h"
#include "proxy/refusals.h"
#include "proxy/shared_homes.h"

namespace lmwarden::proxy {

struct ModelSet;
struct ModelState;

net::Response json_response(net::http::status status, std::string body);

// GET /v1/models: the configured models (and aliases) in OpenAI's list shape.
std::string models_list_json(const ModelSet& models, std::chrono::system_clock::time_point created);
// GET /v1/models/{id}: one entry of that list, by name or alias; none for an
// id that names no model.
std::optional<std::string> model_json(const ModelSet& models, std::string_view id,
                                      std::chrono::system_clock::time_point created);
// GET /api/models; `shared` when homes are shared; `reloads`, what became of
// the configuration file's reloads (its `configuration` object).
std::string api_models_json(const ModelSet& models,
                            const std::optional<SharedHomesView>& shared = std::nullopt,
                            const ConfigReloads* reloads = nullptr);
// GET /api/models/{name}: the routing card, its counters since the model's
// routing state began (the warden's start, or the reload that replaced it),
// and the model's requests `refusals` counted since the process started.
std::string model_card_json(const ModelState& model, const Refusals& refusals);
// PATCH /api/models/{name} with {"affinity": bool, "spill_threshold": int|"auto"},
// guarded by `Authorization: Bearer <admin token>` (401 without, 403 wrong).
// What it changed is logged with `client`, the caller's address; the answer
// is the card.
net::Response patch_model(ModelState& model, const Refusals& refusals, const net::Request& request,
                          const std::optional<std::string>& admin_token, std::string_view client);

// Whether run-time control is on under `config`, and where its token comes
// from or why there is none, for the log.
std::string run_time_control(const config::Config& config);

// The admin token in force: admin_token, written in the file, else
// admin_token_env's variable; none (run-time control off) when neither gives
// one.
std::optional<std::string> admin_token(const config::Config& config);

// Constant-time comparison, so a token cannot be guessed byte by byte from timing.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

// The credentials of an `Authorization: Bearer K` field, the scheme in any
// case (RFC 9110 §11.1); nullopt for another scheme or none.
std::optional<std::string_view> bearer_credentials(std::string_view authorization) noexcept;

}  // namespace lmwarden::proxy
