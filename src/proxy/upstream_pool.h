// Keep-alive connections to upstream servers, one pool per I/O thread (so no
// locks: a connection never leaves the thread that opened it).
#pragma once

#include <array>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/config.h"
#include "net/http_server.h"

namespace lmwarden::proxy {

// What the relay needs to read one reply: its parser and where the body is
// decoded, piece by piece, on its way to the client.
struct ReplyReader {
  static constexpr std::size_t kChunkBytes = 16 * 1024;  // decoded per pass: one gathered write
  std::optional<net::http::response_parser<net::http::buffer_body>> parser;  // one per reply
  std::array<char, kChunkBytes> chunk;
};

struct UpstreamConnection {
  std::unique_ptr<net::beast::tcp_stream> stream;
  std::string key;      // host:port
  bool reused = false;  // came from the idle pool (may have been closed by the peer)
  // Reply read buffer, kept with the connection so that a request does not
  // allocate one; empty whenever the connection is idle.
  net::beast::flat_buffer buffer;
  // Made on first use and kept for the same reason; it also keeps the
  // parser out of the relay's coroutine frame.
  std::unique_ptr<ReplyReader> reader;
  // The request head in wire form, then the reply's head for the client.
  std::string head;
};

class UpstreamPool {
 public:
  explicit UpstreamPool(net::asio::io_context& io, std::size_t max_idle_per_server = 64)
      : io_(io), max_idle_(max_idle_per_server) {}

  // An idle connection to the backend that is still usable, if there is one.
  // Not a coroutine: taking a pooled connection costs no suspension.
  std::optional<UpstreamConnection> take_idle(const config::BackendConfig& backend);

  // Opens `into` as a new connection to the backend within `connect_timeout`.
  net::asio::awaitable<net::beast::error_code> connect(const config::BackendConfig& backend,
                                                       std::chrono::milliseconds connect_timeout,
                                                       UpstreamConnection& into);

  // Returns a connection whose last response was read completely and which
  // both sides keep alive. One with unread bytes left is closed instead.
  void release(UpstreamConnection connection);

  std::size_t idle_count() const noexcept;

 private:
  struct Idle {
    UpstreamConnection connection;
    std::chrono::steady_clock::time_point since;  // when it was released
  };
  // Keyed by host:port, found by a view (no key built per request).
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view key) const noexcept { return std::hash<std::string_view>{}(key); }
  };

  net::asio::io_context& io_;
  std::size_t max_idle_;
  std::unordered_map<std::string, std::vector<Idle>, KeyHash, std::equal_to<>> idle_;
};

}  // namespace lmwarden::proxy
