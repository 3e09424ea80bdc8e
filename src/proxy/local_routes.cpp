// The warden's own routes: the dashboard's files, /health, /metrics,
// /v1/models and the JSON API under /api, and the errors of paths and
// methods that are no route.
#include <spdlog/spdlog.h>

#include <charconv>
#include <limits>
#include <optional>

#include "common/percent.h"
#include "proxy/api.h"
#include "proxy/metrics_export.h"
#include "proxy/warden.h"
#include "ui/ui_assets.h"

namespace lmwarden::proxy {

namespace http = net::http;

namespace {

std::optional<std::string> query_param(std::string_view target, std::string_view name) {
  const auto q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == name && eq != std::string_view::npos)
      return percent_decoded(pair.substr(eq + 1), true);
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return std::nullopt;
}

// The methods a local route answers, for a 405's Allow; "" for no such route.
// The warden's own GET routes answer HEAD too.
std::string_view allowed_methods(std::string_view path) {
  if (path == "/health" || path == "/metrics" || path == "/v1/models" || path == "/api/models" ||
      path == "/api/stats")
    return "GET, HEAD";
  if (path.starts_with("/api/models/")) return "GET, HEAD, PATCH";
  if (path.starts_with("/v1/models/")) return "GET, HEAD";
  if (ui::asset_for_request_path(path)) return "GET, HEAD";  // the dashboard's pages and files
  if (!stored_response_of(path, http::verb::get).empty()) return "GET";
  if (!stored_response_of(path, http::verb::post).empty()) return "POST";
  return {};
}

// 405 naming the methods that would do (RFC 9110 wants them in Allow), or
// 404 for a path that is no route at all.
net::Response no_such_route(Dialect dialect, std::string_view path, std::string_view allow) {
  if (allow.empty())
    return error_response(dialect, http::status::not_found, "no route " + std::string(path));
  auto res = error_response(dialect, http::status::method_not_allowed,
                            fmt::format("use {} for {}", allow, path));
  res.set(http::field::allow, allow);
  return res;
}

// A dashboard file, revalidated by ETag on every load.
net::Response ui_response(const ui::Asset& asset, std::string_view if_none_match) {
  const bool fresh = ui::etag_matches(if_none_match, asset.etag);
  net::Response res{fresh ? http::status::not_modified : http::status::ok, 11};
  res.set(http::field::etag, asset.etag);
  res.set(http::field::cache_control, ui::kCacheControl);
  res.set("Content-Security-Policy", ui::kContentSecurityPolicy);
  res.set("X-Content-Type-Options", "nosniff");
  if (!fresh) {
    res.set(http::field::content_type, asset.content_type);
    res.body() = std::string(asset.body);
  }
  return res;
}

// A browser (its Accept names HTML) asking for an address that is no page of
// the dashboard nor any other route: the dashboard, answered 404, says so in
// words and links to its pages. Other clients get the JSON error.
std::optional<net::Response> page_not_found(const net::Request& request, std::string_view path) {
  if (request.method() != http::verb::get || path.starts_with("/v1/") ||
      path.starts_with("/api/") || path.starts_with("/ui/"))
    return std::nullopt;
  if (std::string_view(request[http::field::accept]).find("text/html") == std::string_view::npos)
    return std::nullopt;
  const auto index = ui::asset_for_request_path("/");
  if (!index) return std::nullopt;
  auto res = ui_response(*index, {});
  res.result(http::status::not_found);
  res.erase(http::field::etag);  // a miss is not to be revalidated as the page
  return res;
}

}  // namespace

net::Awaitable<void> Warden::serve_local(net::Exchange& exchange) {
  auto& request = exchange.request();
  const std::string_view target = request.target();
  const std::string_view path = path_of(target);
  const auto method = request.method();

  if (is_forwarded_route(path)) {  // not a POST
    co_await respond_logged(exchange, no_such_route(dialect_of(target), path, "POST"));
    co_return;
  }
  if (method == http::verb::get) {
    if (auto asset = ui::asset_for_request_path(path)) {
      co_await exchange.respond(ui_response(*asset, request[http::field::if_none_match]));
      co_return;
    }
  }
  if (path == "/health" && method == http::verb::get) {
    co_await exchange.respond(json_response(http::status::ok, R"({"status":"ok"})"));
    co_return;
  }
  if (path == "/metrics" && method == http::verb::get) {
    net::Response res{http::status::ok, 11};
    res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    const auto shared = shared_homes_stats();
    res.body() =
        warden_metrics_text(*models(), reloads_, shared ? &*shared : nullptr, &saved_homes_writes_,
                            connections_refused_.load(std::memory_order_relaxed));
    co_await exchange.respond(std::move(res));
    co_return;
  }
  if (path == "/v1/models" && method == http::verb::get) {
    co_await exchange.respond(
        json_response(http::status::ok, models_list_json(*models(), started_)));
    co_return;
  }
  constexpr std::string_view kModelPrefix = "/v1/models/";
  if (path.starts_with(kModelPrefix) && method == http::verb::get) {
    // The rest of the path is the id, slashes and all ("Qwen/Qwen3-4B").
    const std::string id = percent_decoded(path.substr(kModelPrefix.size()), false);
    if (auto body = model_json(*models(), id, started_)) {
      co_await exchange.respond(json_response(http::status::ok, std::move(*body)));
    } else {
      co_await respond_logged(exchange,
                              error_response(Dialect::kOpenAi, http::status::not_found,
                                             "no model " + id + " (see GET /v1/models)"),
                              "unknown_model");
    }
    co_return;
  }
  if (path.starts_with("/api/")) {
    co_await handle_api(exchange, path);
    co_return;
  }
  const std::string_view allow = allowed_methods(path);
  if (allow.empty()) {
    if (auto page = page_not_found(request, path)) {
      co_await exchange.respond(std::move(*page));
      co_return;
    }
  }
  auto refusal = no_such_route(dialect_of(target), path, allow);
  // A client of the inference API that asked for a route there is none of
  // is in the access log, as the requests it did route are.
  if (path.starts_with("/v1/")) {
    co_await respond_logged(exchange, std::move(refusal));
  } else {
    co_await exchange.respond(std::move(refusal));
  }
}

net::Awaitable<void> Warden::respond_logged(net::Exchange& exchange, net::Response res,
                                            std::string_view reason) {
  const auto set = models();
  const auto received = std::chrono::steady_clock::now();
  const unsigned status = res.result_int();
  if (reason.empty()) reason = status == 405 ? "method_not_allowed" : "no_route";
  set->refusals->count("", reason);
  // Drawn before the reply goes, as a refused inference request's (forward).
  const std::uint64_t id =
      set->access_log ? next_request_id_.fetch_add(1, std::memory_order_relaxed) : 0;
  co_await exchange.respond(std::move(res));
  if (!set->access_log) co_return;
  AccessRecord record{
      .received = received, .status = status, .body_bytes = exchange.request().body().size()};
  write_access_log(*set, id, exchange, record);
}

void Warden::log_server_error(const net::Request& request, std::string_view client, unsigned status,
                              std::size_t sent_bytes, std::chrono::steady_clock::time_point began) {
  const auto set = models();
  set->refusals->count("", status == 413   ? "body_too_large"
                           : status == 431 ? "header_too_large"
                           : status == 408 ? "timeout"
                                           : "bad_request");
  if (!set->access_log) return;
  // A body refused for its size was not read: the length it declared.
  std::size_t body_bytes = request.body().size();
  if (const std::string_view declared = request[http::field::content_length];
      status == 413 && !declared.empty())
    std::from_chars(declared.data(), declared.data() + declared.size(), body_bytes);
  const AccessRecord record{
      .received = began, .status = status, .body_bytes = body_bytes, .sent_bytes = sent_bytes};
  set->access_log->write(next_request_id_.fetch_add(1, std::memory_order_relaxed), client,
                         request.method_string(), request.target(),
                         request[http::field::user_agent], record);
}

net::Awaitable<void> Warden::handle_api(net::Exchange& exchange, std::string_view path) {
  auto& request = exchange.request();
  const auto set = models();
  if (path == "/api/models" && request.method() == http::verb::get) {
    co_await exchange.respond(
        json_response(http::status::ok, api_models_json(*set, shared_homes_view(), &reloads_)));
    co_return;
  }
  if (path == "/api/stats" && request.method() == http::verb::get) {
    const std::string target(request.target());
    std::string model = query_param(target, "model").value_or("");
    if (!model.empty()) {
      const ModelState* named = set->find(model);
      if (!named) {
        co_await exchange.respond(
            error_response(Dialect::kOpenAi, http::status::not_found, "unknown model " + model));
        co_return;
      }
      model = named->config.name;  // an alias names its model's series
    }
    long seconds = 3600;
    if (const auto window = query_param(target, "window")) {
      const char* const last = window->data() + window->size();
      const auto [end, ec] = std::from_chars(window->data(), last, seconds);
      // More digits than a long holds: longer than any window kept.
      if (ec == std::errc::result_out_of_range && end == last && !window->starts_with('-')) {
        seconds = std::numeric_limits<long>::max();
      } else if (ec != std::errc{} || end != last || seconds <= 0) {
        co_await exchange.respond(
            error_response(Dialect::kOpenAi, http::status::bad_request,
                           "window must be a whole number of seconds from 1"));
        co_return;
      }
    }
    co_await exchange.respond(json_response(
        http::status::ok, stats_json(*set, model, std::chrono::seconds(seconds), started_)));
    co_return;
  }
  constexpr std::string_view kModelPrefix = "/api/models/";
  if (path.starts_with(kModelPrefix)) {
    // The dashboard escapes the name as one path segment ("qwen3%3A4b").
    const std::string name = percent_decoded(path.substr(kModelPrefix.size()), false);
    ModelState* model = set->find(name);
    if (!model) {
      co_await exchange.respond(
          error_response(Dialect::kOpenAi, http::status::not_found, "unknown model " + name));
      co_return;
    }
    if (request.method() == http::verb::get) {
      co_await exchange.respond(
          json_response(http::status::ok, model_card_json(*model, *set->refusals)));
      co_return;
    }
    if (request.method() == http::verb::patch) {
      co_await exchange.respond(patch_model(*model, *set->refusals, request,
                                            admin_token(set->config), exchange.remote_address()));
      co_return;
    }
  }
  co_await exchange.respond(no_such_route(Dialect::kOpenAi, path, allowed_methods(path)));
}

}  // namespace lmwarden::proxy
