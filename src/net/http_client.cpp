#include "net/http_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <tuple>

#include "common/host_port.h"
#include "net/name_lookup.h"

namespace lmwarden::net {

Awaitable<beast::error_code> connect_any(Stream& stream, const Endpoints& endpoints) {
  auto [ec, endpoint] =
      co_await stream.async_connect(endpoints, asio::as_tuple(asio::use_awaitable_t<Executor>{}));
  co_return ec;
}

Awaitable<beast::error_code> connect_to(Stream& stream, const std::string& host, std::uint16_t port,
                                        std::chrono::steady_clock::time_point deadline) {
  stream.expires_at(deadline);
  beast::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (!ec) {
    auto [cec] = co_await stream.async_connect(tcp::endpoint{address, port}, kAsTuple);
    co_return cec;
  }
  auto [rec, endpoints] = co_await look_up(stream.get_executor(), host, port, deadline);
  if (rec) co_return rec;
  co_return co_await connect_any(stream, endpoints);
}

HttpGetter::HttpGetter(Executor executor, std::string host, std::uint16_t port)
    : executor_(std::move(executor)), host_(std::move(host)), port_(port) {
  host_field_ = host_port(host_, port_);
}

Awaitable<GetResult> HttpGetter::get(std::string_view target, std::chrono::milliseconds timeout,
                                     std::size_t body_limit) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  http::request<http::empty_body> request{http::verb::get, target, 11};
  request.set(http::field::host, host_field_);
  request.set(http::field::user_agent, "lmwarden");
  GetResult result;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = stream_.has_value();
    if (!reused) {
      stream_.emplace(executor_);
      buffer_.clear();
      ++opened_;
    }
    stream_->expires_at(deadline);
    if (!reused) {
      if (const auto ec = co_await connect_to(*stream_, host_, port_, deadline)) {
        stream_.reset();
        result.error = ec;
        co_return result;
      }
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(body_limit);
    auto [ec, written] = co_await http::async_write(*stream_, request, kAsTuple);
    if (!ec) std::tie(ec, std::ignore) = co_await http::async_read(*stream_, buffer_, parser, kAsTuple);
    if (ec) {
      stream_.reset();
      // Nothing of a reply came on a kept connection that the server closed
      // while it was idle: no word about the server yet, so once more, fresh.
      const bool closed = ec == asio::error::eof || ec == http::error::end_of_stream ||
                          ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
      if (reused && closed && !parser.got_some()) continue;
      result.error = ec;
      co_return result;
    }
    result.status = parser.get().result_int();
    result.body = std::move(parser.get().body());
    // Bytes past the reply would be read as the next one's start.
    if (!parser.keep_alive() || buffer_.size() > 0) stream_.reset();
    co_return result;
  }
  co_return result;
}

}  // namespace lmwarden::net
