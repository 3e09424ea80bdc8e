#include "proxy/api.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/ascii.h"
#include "common/json_dump.h"
#include "proxy/dialect.h"
#include "proxy/warden.h"

namespace lmwarden::proxy {
namespace {

namespace http = net::http;
using nlohmann::json;

std::string iso8601(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json number_or_null(double v) { return std::isnan(v) ? json(nullptr) : json(v); }
json count_or_null(int v) { return v < 0 ? json(nullptr) : json(v); }
json hit_rate_or_null(double v) { return v < 0 ? json(nullptr) : json(v); }

}  // namespace

net::Response json_response(http::status status, std::string body) {
  net::Response res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::cache_control, "no-store");
  res.body() = std::move(body);
  return res;
}

namespace {

// One model of /v1/models, OpenAI's shape; an alias names its model as `root`.
json model_object(std::string_view id, const ModelState& model,
                  std::chrono::system_clock::time_point started) {
  json j = {{"id", id},
            {"object", "model"},
            {"created",
             std::chrono::duration_cast<std::chrono::seconds>(started.time_since_epoch()).count()},
            {"owned_by", "lmwarden"}};
  if (id != model.config.name) j["root"] = model.config.name;
  return j;
}

}  // namespace

std::string models_list_json(const ModelSet& models, std::chrono::system_clock::time_point started) {
  json data = json::array();
  for (const auto& m : models.models) {
    data.push_back(model_object(m->config.name, *m, started));
    for (const auto& alias : m->config.aliases) data.push_back(model_object(alias, *m, started));
  }
  return json_dump(json{{"object", "list"}, {"data", data}});
}

std::optional<std::string> model_json(const ModelSet& models, std::string_view id,
                                      std::chrono::system_clock::time_point started) {
  const ModelState* model = models.find(id);
  if (!model) return std::nullopt;
  return json_dump(model_object(id, *model, started));
}

std::string api_models_json(const ModelSet& models_in_force,
                            const std::optional<SharedHomesView>& shared,
                            const ConfigReloads* reloads) {
  json models = json::array();
  for (const auto& m : models_in_force.models) {
    const core::RouterView v = m->view();
    int healthy = 0;
    for (const auto& r : v.replicas) healthy += r.healthy ? 1 : 0;
    models.push_back({{"name", m->config.name},
                      {"aliases", m->config.aliases},
                      {"affinity", v.affinity},
                      {"spill_threshold", v.spill_threshold},
                      {"spill_threshold_auto", v.spill_threshold_auto},
                      {"replicas", v.replicas.size()},
                      {"healthy_replicas", healthy},
                      {"in_flight", v.in_flight}});
  }
  json out{{"models", models}};
  if (reloads) {
    const auto refusal = reloads->last_refusal();
    out["configuration"] = {
        {"loaded_at", iso8601(std::chrono::system_clock::time_point{
                          std::chrono::seconds{reloads->last_applied_unix_s()}})},
        {"reload_refused", refusal
                               ? json{{"at", iso8601(refusal->at)}, {"problems", refusal->problems}}
                               : json(nullptr)}};
  }
  if (shared) {
    const SharedHomesStats& s = shared->stats;
    out["shared_homes"] = {
        {"redis", shared->redis},
        {"connected", s.connected},
        {"lookups",
         {{"found", s.lookups_found},
          {"absent", s.lookups_absent},
          {"failed", s.lookups_failed},
          {"unusable", s.lookups_unusable}}},
        {"writes",
         {{"sent", s.writes_sent}, {"failed", s.writes_failed}, {"dropped", s.writes_dropped}}},
        {"claims",
         {{"taken", s.claims_taken},
          {"yielded", s.claims_yielded},
          {"kept", s.claims_kept},
          {"unusable", s.claims_unusable},
          {"unchecked", s.claims_unchecked},
          {"failed", s.claims_failed}}}};
  }
  return json_dump(out);
}

// Requests routed, by route, as the card names the routes.
json routed_counts(const core::ReplicaCounters& c) {
  using core::RouteKind;
  return {
      {"sticky", c.count(RouteKind::kSticky)},        {"spilled_in", c.count(RouteKind::kSpilled)},
      {"client_pinned", c.count(RouteKind::kPinned)}, {"new", c.count(RouteKind::kNew)},
      {"rehomed", c.count(RouteKind::kRehomed)},      {"anonymous", c.count(RouteKind::kAnonymous)},
      {"balanced", c.count(RouteKind::kBalanced)},    {"retried", c.count(RouteKind::kRetried)}};
}

// Why a replica takes no new work, and since when: null while it does (or
// when nothing said why).
json out_of_service(const core::ReplicaView& r, const ModelTelemetry& telemetry) {
  if (r.healthy) return nullptr;
  const OutageRecord::Outage o =
      r.probed ? telemetry.replica(r.index).ejection.get() : telemetry.unhealthy(r.backend).get();
  if (o.reason.empty()) return nullptr;
  return {{"cause", r.probed ? "ejected" : "unhealthy"},
          {"reason", o.reason},
          {"since", iso8601(o.since)}};
}

// Failed upstream exchanges, by kind (lmwarden_upstream_errors_total's
// series): an empty object before any.
json upstream_errors(const ReplicaTelemetry& t) {
  json out = json::object();
  for (const auto& [kind, n] : t.error_counts()) out[kind] = n;
  return out;
}

std::string model_card_json(const ModelState& model, const Refusals& refusals) {
  const core::RouterView v = model.view();
  json replicas = json::array();
  for (const auto& r : v.replicas) {
    const auto& backend = model.config.backends[static_cast<std::size_t>(r.backend)];
    json replica = {{"index", r.index},
                    {"url", backend.url},
                    {"rank", r.rank},
                    {"healthy", r.healthy},
                    {"ejected", r.ejected},
                    {"in_flight", r.in_flight},
                    {"live_conversations", r.live_conversations},
                    {"load_score", r.score},
                    {"running", count_or_null(r.engine.running)},
                    {"waiting", count_or_null(r.engine.waiting)},
                    {"kv_used", number_or_null(r.engine.kv_used)},
                    {"prefix_hit_rate",
                     hit_rate_or_null(model.telemetry.replica(r.index).prefix_hit_rate.load())}};
    replica["out_of_service"] = out_of_service(r, model.telemetry);
    replica["upstream_errors"] = upstream_errors(model.telemetry.replica(r.index));
    replica.update(routed_counts(r.counters));
    replicas.push_back(std::move(replica));
  }
  // Requests sent without a rank, whose server's own balancer picked it
  // (affinity off, or a route the server does not pin by rank, on a
  // multi-rank server): no replica of the card has them.
  json unassigned = routed_counts(v.unassigned);
  unassigned["in_flight"] = v.unassigned_in_flight_total();
  unassigned["upstream_errors"] = upstream_errors(model.telemetry.replica(-1));
  json sources = json::array();
  for (const auto& source : model.config.session_sources) sources.push_back(source.label());
  json refused = json::object();
  for (const auto& [reason, n] : refusals.of_model(model.config.name)) refused[reason] = n;
  json backends = json::array();
  for (const auto& b : model.config.backends)
    backends.push_back({{"url", b.url}, {"data_parallel_size", b.data_parallel_size}});
  return json_dump(json{{"name", model.config.name},
                        {"affinity", v.affinity},
                        {"unranked_routes", model.config.unranked_routes},
                        {"session_sources", std::move(sources)},
                        {"spill_threshold", v.spill_threshold},
                        {"spill_threshold_auto", v.spill_threshold_auto},
                        {"sticky_ratio", v.sticky_ratio ? json(*v.sticky_ratio) : json(nullptr)},
                        {"in_flight", v.in_flight},
                        {"conversations", v.conversations},
                        {"stored_responses", v.stored_responses},
                        {"since", iso8601(model.routing->since)},
                        {"backends", backends},
                        {"replicas", replicas},
                        {"unassigned", unassigned},
                        {"refused", refused}});
}

namespace {

// Why the admin token's variable gives no token; "" when it gives one.
std::string unusable_admin_token_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return "the environment variable " + name + " is not set";
  if (const auto why = config::unsendable_token(v); !why.empty())
    return "the environment variable " + name + " " + std::string(why);
  return "";
}

}  // namespace

std::optional<std::string> admin_token(const config::Config& config) {
  if (config.admin_token) return config.admin_token;
  if (!config.admin_token_env.empty() && unusable_admin_token_env(config.admin_token_env).empty())
    return std::string(std::getenv(config.admin_token_env.c_str()));
  return std::nullopt;
}

std::string run_time_control(const config::Config& config) {
  constexpr std::string_view kWhat =
      "run-time control (PATCH /api/models/NAME, the dashboard's controls)";
  if (config.admin_token) {
    // admin_token_env keeps its default with a literal token (both set in
    // the file is refused): its variable, set too, is not the token.
    const char* also = std::getenv(config.admin_token_env.c_str());
    return fmt::format(
        "{} is on: the admin token is admin_token in {}{}", kWhat,
        config.source_file.empty() ? "the file" : config.source_file,
        also && *also ? fmt::format(" ({} is set too, and not used)", config.admin_token_env) : "");
  }
  if (admin_token(config))
    return fmt::format("{} is on: the admin token is the environment variable {}", kWhat,
                       config.admin_token_env);
  return fmt::format("{} is off: {}", kWhat,
                     config.admin_token_env.empty()
                         ? std::string("no admin token is configured")
                         : unusable_admin_token_env(config.admin_token_env));
}

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  // Length is not secret enough to hide at the cost of complexity; the bytes are.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::optional<std::string_view> bearer_credentials(std::string_view authorization) noexcept {
  constexpr std::string_view kBearer = "Bearer ";
  if (!ascii_istarts_with(authorization, kBearer)) return std::nullopt;
  // One space or more after the scheme (RFC 9110 §11.4).
  const std::size_t credentials = authorization.find_first_not_of(' ', kBearer.size());
  return credentials == std::string_view::npos ? std::string_view{}
                                               : authorization.substr(credentials);
}

namespace {

// At most `n` bytes of a client's text, for a message that quotes it.
std::string clipped(std::string_view text, std::size_t n = 64) {
  return text.size() <= n ? std::string(text) : std::string(text.substr(0, n)) + "…";
}

// A PATCH refused for its token, in the log: one line a second at most (a
// client trying tokens in a loop does not flood it), with how many more
// were refused since the last.
void log_refused_patch(ModelState& model, std::string_view client, std::string_view why) {
  if (const std::uint64_t refused = model.refused_patch_log.note())
    spdlog::warn("model={} PATCH from {} refused: {}{}", model.config.name, client, why,
                 refused == 1
                     ? ""
                     : fmt::format(" ({} more refused since the last such line)", refused - 1));
}

}  // namespace

net::Response patch_model(ModelState& model, const Refusals& refusals, const net::Request& request,
                          const std::optional<std::string>& admin_token, std::string_view client) {
  const auto error = [](http::status s, std::string_view m) { return error_response(Dialect::kOpenAi, s, m); };
  const auto refuse = [&](http::status s, std::string_view m) {
    log_refused_patch(model, client, m);
    return error(s, m);
  };
  if (!admin_token)
    return refuse(
        http::status::forbidden,
        "run-time control is disabled: set the admin token (admin_token_env) to enable it");
  const auto offered = bearer_credentials(request[http::field::authorization]);
  if (!offered)
    return refuse(http::status::unauthorized, "missing Authorization: Bearer <admin token>");
  if (!constant_time_equal(*offered, *admin_token))
    return refuse(http::status::forbidden, "wrong admin token");

  const json body = json::parse(request.body().view(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return error(http::status::bad_request, "body is not valid JSON");
  if (!body.is_object()) return error(http::status::bad_request, "body must be a JSON object");
  std::optional<bool> affinity;
  std::optional<std::optional<int>> threshold;  // outer: given; inner nullopt: auto
  for (const auto& [key, value] : body.items()) {
    if (key == "affinity") {
      if (!value.is_boolean()) return error(http::status::bad_request, "affinity must be true or false");
      affinity = value.get<bool>();
    } else if (key == "spill_threshold") {
      if (value.is_string() && value.get<std::string>() == "auto") {
        threshold = std::optional<int>{};
      } else if (value.is_number_integer() && value.get<std::int64_t>() >= 1 &&
                 value.get<std::int64_t>() <= config::kMaxSpillThreshold) {
        threshold = static_cast<int>(value.get<std::int64_t>());
      } else {
        return error(http::status::bad_request,
                     fmt::format("spill_threshold must be an integer from 1 to {} or \"auto\"",
                                 config::kMaxSpillThreshold));
      }
    } else {
      return error(http::status::bad_request,
                   "unknown field '" + clipped(key) + "' (allowed: affinity, spill_threshold)");
    }
  }
  std::string changed;  // for the log: what was, and what is
  {
    std::lock_guard lock{model.mutex};
    core::Router& router = model.router;
    if (affinity && *affinity != router.affinity()) {
      changed = fmt::format("affinity {} -> {}", router.affinity() ? "on" : "off",
                            *affinity ? "on" : "off");
      router.set_affinity(*affinity);
    }
    if (threshold && *threshold != router.spill_threshold_setting()) {
      changed += fmt::format("{}spill threshold {} -> {}", changed.empty() ? "" : ", ",
                             config::spill_threshold_text(router.spill_threshold_setting()),
                             config::spill_threshold_text(*threshold));
      router.set_spill_threshold(*threshold);
    }
  }
  if (!changed.empty())
    spdlog::info("model={} {} (PATCH from {}; the file's values return at the next reload)",
                 model.config.name, changed, client);
  return json_response(http::status::ok, model_card_json(model, refusals));
}

}  // namespace lmwarden::proxy
