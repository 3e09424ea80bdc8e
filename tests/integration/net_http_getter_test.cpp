// HttpGetter against a real HttpServer on 127.0.0.1: successive GETs share
// one connection; a connection the server closes (Connection: close, its
// keep-alive timeout) or one that times out is replaced by a fresh one on the
// next call, and a kept connection found closed costs the call nothing.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>

#include "http_test_client.h"
#include "net/http_client.h"
#include "net/http_server.h"

namespace lmwarden::net {
namespace {

using std::chrono::milliseconds;

// A server that answers "/ok" with "ok", "/close" with "closing" and
// Connection: close, and leaves "/hang" unanswered until the client leaves.
// It records the client port of every request: one port, one connection.
class Server {
 public:
  explicit Server(ServerOptions options = {}, const std::string& host = "127.0.0.1")
      : server_(io_, std::move(options), [this](Exchange& ex) { return handle(ex); }) {
    port_ = server_.listen(host, 0).port();
    io_.start();
  }
  ~Server() {
    io_.stop();
    io_.join();
  }
  std::uint16_t port() const { return port_; }
  std::size_t open_connections() const { return server_.open_connections(); }
  std::multiset<std::uint16_t> client_ports() {
    std::lock_guard lock{mutex_};
    return ports_;
  }
  std::string last_host() {
    std::lock_guard lock{mutex_};
    return host_;
  }

 private:
  Awaitable<void> handle(Exchange& ex) {
    {
      std::lock_guard lock{mutex_};
      ports_.insert(ex.remote().port());
      host_ = std::string(ex.request()[http::field::host]);
    }
    if (ex.request().target() == "/hang") {
      co_await ex.client_closed();
      co_return;
    }
    Response res{http::status::ok, 11};
    res.body() = ex.request().target() == "/close" ? "closing" : "ok";
    if (ex.request().target() == "/close") ex.close_after();
    co_await ex.respond(std::move(res));
  }

  IoThreads io_{1};
  HttpServer server_;
  std::uint16_t port_ = 0;
  std::mutex mutex_;
  std::multiset<std::uint16_t> ports_;
  std::string host_;
};

// A getter on a context of its own, each get() run to its end (5 s at most).
struct Client {
  asio::io_context io;
  HttpGetter getter;
  explicit Client(std::uint16_t port, std::string host = "127.0.0.1")
      : getter(io.get_executor(), std::move(host), port) {}
  GetResult get(std::string target, milliseconds timeout = milliseconds(2000)) {
    std::optional<GetResult> result;
    asio::co_spawn(
        io, [&]() -> Awaitable<void> { result = co_await getter.get(target, timeout); },
        asio::detached);
    io.restart();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!result && std::chrono::steady_clock::now() < give_up) io.run_one_until(give_up);
    EXPECT_TRUE(result) << target << ": no result within 5 s";
    return result.value_or(GetResult{asio::error::timed_out});
  }
  std::uint64_t connections_opened() const { return getter.connections_opened(); }
};

// A call answered "ok" with no error.
void expect_ok(const GetResult& r) {
  EXPECT_FALSE(r.error) << r.error.message();
  EXPECT_EQ(r.status, 200U);
  EXPECT_EQ(r.body, "ok");
}

std::size_t distinct(const std::multiset<std::uint16_t>& ports) {
  return std::set<std::uint16_t>(ports.begin(), ports.end()).size();
}

TEST(HttpGetter, SuccessiveGetsShareOneConnection) {
  Server server;
  Client client{server.port()};
  for (int i = 0; i < 5; ++i) expect_ok(client.get("/ok"));
  EXPECT_EQ(server.client_ports().size(), 5U);
  EXPECT_EQ(distinct(server.client_ports()), 1U);
  EXPECT_EQ(client.connections_opened(), 1U);
}

TEST(HttpGetter, AReplyThatAsksToCloseIsTheConnectionsLast) {
  Server server;
  Client client{server.port()};
  EXPECT_EQ(client.get("/close").body, "closing");
  expect_ok(client.get("/ok"));
  EXPECT_EQ(distinct(server.client_ports()), 2U);
  EXPECT_EQ(client.connections_opened(), 2U);
}

// The server drops the idle connection (its keep-alive timeout) between two
// calls: the second call finds it closed, and succeeds on a fresh one.
TEST(HttpGetter, AConnectionTheServerClosedWhileIdleCostsTheCallNothing) {
  ServerOptions options;
  options.keep_alive_timeout = milliseconds(50);
  Server server{options};
  Client client{server.port()};
  expect_ok(client.get("/ok"));
  // Until the server has closed its end (counted once the socket is closed).
  ASSERT_TRUE(testing::eventually([&] { return server.open_connections() == 0; }))
      << "the server kept the idle connection";
  expect_ok(client.get("/ok"));
  EXPECT_EQ(distinct(server.client_ports()), 2U);
  EXPECT_EQ(client.connections_opened(), 2U);
}

TEST(HttpGetter, ATimedOutCallLeavesTheNextAFreshConnection) {
  Server server;
  Client client{server.port()};
  expect_ok(client.get("/ok"));
  const auto start = std::chrono::steady_clock::now();
  const auto hung = client.get("/hang", milliseconds(100));
  EXPECT_EQ(hung.error, beast::error::timeout) << hung.error.message();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(90));
  EXPECT_EQ(hung.status, 0U);
  expect_ok(client.get("/ok"));
  EXPECT_EQ(client.connections_opened(), 2U);
}

TEST(HttpGetter, TheHostFieldNamesTheServer) {
  Server server;
  Client client{server.port()};
  expect_ok(client.get("/ok"));
  EXPECT_EQ(server.last_host(), "127.0.0.1:" + std::to_string(server.port()));
}

// An IPv6 literal is bracketed in the Host field (RFC 9110 §7.2).
TEST(HttpGetter, AnIpv6HostIsBracketedInTheHostField) {
  std::optional<Server> server;
  try {
    server.emplace(ServerOptions{}, "::1");
  } catch (const std::system_error& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  Client client{server->port(), "::1"};
  expect_ok(client.get("/ok"));
  EXPECT_EQ(server->last_host(), "[::1]:" + std::to_string(server->port()));
}

// Nothing listens: the error is the connect's, and each call tries afresh.
TEST(HttpGetter, ARefusedConnectIsReportedEachCall) {
  std::uint16_t port = 0;
  {
    Server gone;
    port = gone.port();
  }
  Client client{port};
  for (int i = 0; i < 2; ++i) {
    const auto r = client.get("/ok");
    EXPECT_EQ(r.error, asio::error::connection_refused) << r.error.message();
  }
  EXPECT_EQ(client.connections_opened(), 2U);
}

}  // namespace
}  // namespace lmwarden::net
