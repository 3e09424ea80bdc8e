// Keep-alive connections to upstream servers, one pool per I/O thread (so no
// locks: a connection never leaves the thread that opened it).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/config.h"
#include "net/http_server.h"

namespace lmwarden::proxy {

struct UpstreamConnection {
  std::unique_ptr<net::beast::tcp_stream> stream;
  std::string key;      // host:port
  bool reused = false;  // came from the idle pool (may have been closed by the peer)
  // Reply read buffer, kept with the connection so that a request does not
  // allocate one; empty whenever the connection is idle.
  net::beast::flat_buffer buffer;
  // Where the relay decodes reply body pieces (kRelayChunkBytes, made on
  // first use), kept for the same reason.
  std::unique_ptr<char[]> relay_chunk;
};

class UpstreamPool {
 public:
  explicit UpstreamPool(net::asio::io_context& io, std::size_t max_idle_per_server = 64)
      : io_(io), max_idle_(max_idle_per_server) {}

  // An idle connection to the backend, or a new one within `connect_timeout`.
  net::asio::awaitable<std::pair<net::beast::error_code, UpstreamConnection>> acquire(
      const config::BackendConfig& backend, std::chrono::milliseconds connect_timeout,
      bool allow_reuse = true);

  // Returns a connection whose last response was read completely and which
  // both sides keep alive. One with unread bytes left is closed instead.
  void release(UpstreamConnection connection);

  std::size_t idle_count() const noexcept;

 private:
  struct Idle {
    std::unique_ptr<net::beast::tcp_stream> stream;
    net::beast::flat_buffer buffer;
    std::unique_ptr<char[]> relay_chunk;
    std::chrono::steady_clock::time_point since;  // when it was released
  };

  net::asio::io_context& io_;
  std::size_t max_idle_;
  std::unordered_map<std::string, std::vector<Idle>> idle_;
};

}  // namespace lmwarden::proxy
