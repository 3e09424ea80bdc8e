// Exchange's streamed replies on the wire, over a real HttpServer on
// 127.0.0.1: pieces given together leave as one chunk.
#include <gtest/gtest.h>

#include <array>
#include <boost/asio/read.hpp>
#include <string>
#include <string_view>

#include "http_test_client.h"
#include "net/http_server.h"

namespace lmwarden::net {
namespace {

using testing::HttpConnection;
using namespace std::string_view_literals;

// Streams a chunked reply: the pieces "data: a", "" and "\n\n" given
// together, then "x" alone.
Awaitable<void> stream_pieces(Exchange& ex) {
  ResponseHeader header{http::status::ok, 11};
  if (co_await ex.begin_stream(header, true)) co_return;
  const std::array pieces{"data: a"sv, ""sv, "\n\n"sv};
  beast::error_code ec;
  if (!ex.write_body_now(pieces, ec)) ec = co_await ex.write_rest();
  if (ec) co_return;
  if (co_await ex.write_body("x")) co_return;
  (void)co_await ex.end_stream();
}

TEST(Exchange, PiecesGivenTogetherLeaveAsOneChunk) {
  IoThreads io(1);
  HttpServer server(io, ServerOptions{}, stream_pieces);
  const std::uint16_t port = server.listen("127.0.0.1", 0).port();
  io.start();
  {
    HttpConnection c{port};
    c.send_raw("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    std::string wire;
    beast::error_code ec;
    asio::read(c.socket(), asio::dynamic_buffer(wire), ec);  // to the close
    EXPECT_EQ(ec, asio::error::eof);
    const std::size_t body = wire.find("\r\n\r\n");
    ASSERT_NE(body, std::string::npos) << wire;
    EXPECT_EQ(wire.substr(body + 4), "9\r\ndata: a\n\n\r\n1\r\nx\r\n0\r\n\r\n");
  }
  io.stop();
  io.join();
}

}  // namespace
}  // namespace lmwarden::net
