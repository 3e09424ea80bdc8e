#include "net/http_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace lmwarden::net {

Awaitable<beast::error_code> connect_any(Stream& stream, const Resolver::results_type& endpoints) {
  auto [ec, endpoint] =
      co_await stream.async_connect(endpoints, asio::as_tuple(asio::use_awaitable_t<Executor>{}));
  co_return ec;
}

Awaitable<beast::error_code> connect_to(Stream& stream, const std::string& host,
                                        std::uint16_t port) {
  beast::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (!ec) {
    auto [cec] = co_await stream.async_connect(tcp::endpoint{address, port}, kAsTuple);
    co_return cec;
  }
  Resolver resolver{stream.get_executor()};
  auto [rec, endpoints] = co_await resolver.async_resolve(host, std::to_string(port), kAsTuple);
  if (rec) co_return rec;
  co_return co_await connect_any(stream, endpoints);
}

Awaitable<GetResult> http_get(std::string host, std::uint16_t port, std::string target,
                              std::chrono::milliseconds timeout, std::size_t body_limit) {
  auto executor = co_await asio::this_coro::executor;
  Stream stream{executor};
  GetResult result;
  stream.expires_after(timeout);

  if (const auto ec = co_await connect_to(stream, host, port)) {
    result.error = ec;
    co_return result;
  }
  http::request<http::empty_body> request{http::verb::get, target, 11};
  request.set(http::field::host, host + ":" + std::to_string(port));
  request.set(http::field::user_agent, "lmwarden");
  request.keep_alive(false);
  auto [wec, wn] = co_await http::async_write(stream, request, kAsTuple);
  if (wec) {
    result.error = wec;
    co_return result;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(body_limit);
  auto [rec, rn] = co_await http::async_read(stream, buffer, parser, kAsTuple);
  if (rec) {
    result.error = rec;
    co_return result;
  }
  result.status = parser.get().result_int();
  result.body = std::move(parser.get().body());
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  co_return result;
}

}  // namespace lmwarden::net
