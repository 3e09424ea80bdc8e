#include "bench/warden_calls.h"

#include <algorithm>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "bench/stream_tap.h"
#include "config/config_loader.h"
#include "net/http_client.h"

namespace lmwarden::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;
using tcp = asio::ip::tcp;

std::string refusal(int status, std::string_view body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error"))
    if (auto message = error_message(j["error"]))
      return fmt::format("HTTP {}: {}", status, *message);
  std::string start(body.substr(0, 200));
  std::replace_if(
      start.begin(), start.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return start.empty() ? fmt::format("HTTP {}", status) : fmt::format("HTTP {}: {}", status, start);
}

Result<Endpoint, std::string> endpoint_of(const std::string& url) {
  auto b = config::parse_backend_url(url);
  if (!b) return unexpected(url + ": " + b.error());
  return Endpoint{b->host, b->port, b->base_path, url};
}

net::Awaitable<Result<Reply, std::string>> fetch(const Endpoint& ep, http::verb verb,
                                                 std::string target, std::string body,
                                                 std::optional<std::string> bearer) {
  net::Stream stream(co_await asio::this_coro::executor);
  const auto cec = co_await net::connect_to(stream, ep.host, ep.port,
                                            std::chrono::steady_clock::now() + kControlTimeout);
  if (cec) co_return unexpected(fmt::format("{}: {}", ep.url, cec.message()));
  http::request<http::string_body> req{verb, ep.base_path + target, 11};
  req.set(http::field::host, ep.host);
  req.set(http::field::user_agent, "lmwarden-bench");
  if (bearer) req.set(http::field::authorization, "Bearer " + *bearer);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  stream.expires_after(kControlTimeout);
  auto [wec, wn] = co_await http::async_write(stream, req, net::kAsTuple);
  if (wec) co_return unexpected(fmt::format("{}{}: {}", ep.url, target, wec.message()));
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  auto [ec, rn] = co_await http::async_read(stream, buffer, parser, net::kAsTuple);
  if (ec) co_return unexpected(fmt::format("{}{}: {}", ep.url, target, ec.message()));
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  co_return Reply{parser.get().result_int(), std::move(parser.get().body())};
}

double percent_or(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

}  // namespace lmwarden::bench
