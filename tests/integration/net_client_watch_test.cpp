// Exchange::watch_client over a real HttpServer on 127.0.0.1: a handler that
// waits longer than a watch tick learns that its client left; one that is
// done sooner starts no read of the client at all, so a client that has
// already shut its side down is not noticed by it (an immediate read would
// have seen the EOF at once).
#include <gtest/gtest.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "http_test_client.h"
#include "net/http_server.h"

namespace lmwarden::net {
namespace {

using testing::HttpConnection;
using testing::HttpReply;

// Answers "gone" or "here": whether on_client_gone ran while the handler
// waited `wait` after asking for the watch.
class WatchingServer {
 public:
  explicit WatchingServer(std::chrono::milliseconds wait)
      : io_(1), server_(io_, ServerOptions{}, [wait](Exchange& ex) { return handle(ex, wait); }) {
    port_ = server_.listen("127.0.0.1", 0).port();
    io_.start();
  }
  ~WatchingServer() {
    io_.stop();
    io_.join();
  }
  std::uint16_t port() const { return port_; }

 private:
  static Awaitable<void> handle(Exchange& ex, std::chrono::milliseconds wait) {
    bool gone = false;
    ex.on_client_gone([&gone] { gone = true; });
    ex.watch_client();
    Timer timer{ex.stream().get_executor()};
    const auto until = std::chrono::steady_clock::now() + wait;
    // Woken every 10 ms to look, so that a long wait ends once the client is gone.
    while (!gone && std::chrono::steady_clock::now() < until) {
      timer.expires_after(std::min<std::chrono::steady_clock::duration>(
          std::chrono::milliseconds(10), until - std::chrono::steady_clock::now()));
      co_await timer.async_wait(kAsTuple);
    }
    ex.stop_watching_client();
    Response res{http::status::ok, 11};
    res.body() = gone ? "gone" : "here";
    co_await ex.respond(std::move(res));
  }

  IoThreads io_;
  HttpServer server_;
  std::uint16_t port_ = 0;
};

// Sends one request, shuts the sending side down (EOF to the server) and
// reads the reply.
std::string ask_then_hang_up(std::uint16_t port) {
  HttpConnection c{port};
  c.send(http::verb::post, "/", "{}");
  c.socket().shutdown(tcp::socket::shutdown_send);
  return c.read().body;
}

TEST(ClientWatch, AHandlerWaitingLongerThanATickLearnsTheClientLeft) {
  WatchingServer server{10 * Exchange::kClientWatchTick};
  EXPECT_EQ(ask_then_hang_up(server.port()), "gone");
}

// A client that pipelined its next request and then left is noticed too:
// the watch reads past the request already buffered.
TEST(ClientWatch, AClientThatPipelinedItsNextRequestIsNoticedLeaving) {
  WatchingServer server{10 * Exchange::kClientWatchTick};
  HttpConnection c{server.port()};
  const std::string request = "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}";
  asio::write(c.socket(), asio::buffer(request + request));  // one write: buffered together
  c.socket().shutdown(tcp::socket::shutdown_send);
  EXPECT_EQ(c.read().body, "gone");
}

// A client that pipelined the first bytes of its next request, and sends the
// rest (and one more request) after the reply: the watch's read, left pending
// when the handler ended, must not run beside the next request's own reads.
// It did: the next request waited out the read timeout (408), or its bytes
// came out of order (400).
TEST(ClientWatch, ARequestPipelinedInPiecesAroundAWatchIsServedWhole) {
  WatchingServer server{6 * Exchange::kClientWatchTick};
  HttpConnection c{server.port(), std::chrono::seconds(3)};
  const std::string request = "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}";
  asio::write(c.socket(), asio::buffer(request + request.substr(0, 10)));
  const HttpReply first = c.read();
  EXPECT_EQ(first.status, 200u);
  EXPECT_EQ(first.body, "here");
  std::this_thread::sleep_for(2 * Exchange::kClientWatchTick);
  asio::write(c.socket(), asio::buffer(request.substr(10) + request));
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const HttpReply next = c.read();
    EXPECT_EQ(next.status, 200u);
    EXPECT_EQ(next.body, "here");
  }
}

TEST(ClientWatch, AHandlerDoneWithinATickStartsNoReadOfTheClient) {
  // 5 ms: time enough for the client's EOF to arrive, and for a read
  // started at once to see it; a tenth of a tick.
  static_assert(Exchange::kClientWatchTick >= std::chrono::milliseconds(50));
  WatchingServer server{std::chrono::milliseconds(5)};
  // The first request of a new server: its ticker is idle when the handler
  // asks, so the watch would start a whole tick later.
  EXPECT_EQ(ask_then_hang_up(server.port()), "here");
}

}  // namespace
}  // namespace lmwarden::net
