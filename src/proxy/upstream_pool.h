// Keep-alive connections to upstream servers, one pool per I/O thread (so no
// locks: a connection never leaves the thread that opened it).
#pragma once

#include <algorithm>
#include <array>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/container/small_vector.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/config.h"
#include "net/http_server.h"
#include "proxy/reply_look.h"

namespace lmwarden::proxy {

// The parser of one upstream reply: Beast's HTTP/1.1 parser, with a header
// of its own. The status line and the fields are kept as views into the bytes
// they were parsed from (Beast hands them over only once the whole header is
// in one buffer: the connection's read buffer), not copied into Beast's field
// container, which allocates and inserts into an ordered index per field.
// The views hold until that buffer is next written to; the relay reads them
// first. A value folded over several lines (obs-fold) is the exception:
// Beast unfolds it (each fold a space, as RFC 9112 §5.2 lets a proxy forward
// it) into a buffer of its own that lives only while it parses, so the
// parser keeps a copy. The body is decoded into the buffer given to
// body_buffer(), as Beast's buffer_body does it.
class ReplyParser final : public net::http::basic_parser<false> {
 public:
  using Field = net::FieldView;

  unsigned status() const noexcept { return status_; }
  // The reason phrase received, or the standard one when it was empty.
  std::string_view reason() const noexcept {
    if (!reason_.empty()) return reason_;
    const auto standard = net::http::obsolete_reason(static_cast<net::http::status>(status_));
    return {standard.data(), standard.size()};
  }
  std::span<const Field> fields() const noexcept { return fields_; }

  // Where the next decoded body bytes go; body_room() is what is left of it.
  void body_buffer(char* data, std::size_t size) noexcept {
    body_ = data;
    room_ = size;
  }
  std::size_t body_room() const noexcept { return room_; }

 private:
  using string_view = net::beast::string_view;
  static std::string_view view(string_view s) noexcept { return {s.data(), s.size()}; }

  void on_request_impl(net::http::verb, string_view, string_view, int,
                       net::beast::error_code&) override {}
  void on_response_impl(int code, string_view reason, int, net::beast::error_code&) override {
    status_ = static_cast<unsigned>(code);
    reason_ = view(reason);
  }
  void on_field_impl(net::http::field name, string_view name_string, string_view value,
                     net::beast::error_code&) override {
    fields_.emplace_back(name, view(name_string),
                         in_place(name_string, value) ? view(value)
                                                      : std::string_view(unfolded_.emplace_back(
                                                            value.data(), value.size())));
  }
  // Whether `value` is in the bytes parsed, right after its name, the colon
  // and any blanks (those bytes are there: the header was parsed whole);
  // otherwise it is Beast's unfolded copy.
  static bool in_place(string_view name, string_view value) noexcept {
    if (value.empty()) return true;
    const char* p = name.data() + name.size() + 1;  // past the colon
    while (p != value.data() && (*p == ' ' || *p == '\t')) ++p;
    return p == value.data();
  }
  void on_header_impl(net::beast::error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, net::beast::error_code&) override {}
  std::size_t on_body_impl(string_view body, net::beast::error_code& ec) override {
    return take(body, ec);
  }
  void on_chunk_header_impl(std::uint64_t, string_view, net::beast::error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body,
                                 net::beast::error_code& ec) override {
    return take(body, ec);
  }
  void on_finish_impl(net::beast::error_code&) override {}

  // Copies what fits; the parser presents the rest again once there is room.
  std::size_t take(string_view body, net::beast::error_code& ec) noexcept {
    const std::size_t n = std::min(room_, body.size());
    if (n > 0) std::memcpy(body_, body.data(), n);
    body_ += n;
    room_ -= n;
    if (n < body.size()) ec = net::http::error::need_buffer;
    return n;
  }

  unsigned status_ = 0;
  std::string_view reason_;
  boost::container::small_vector<Field, 12> fields_;
  // Folded values, unfolded. A list: its strings never move, and an empty
  // one allocates nothing (libstdc++'s deque does, and a parser is made per
  // reply).
  std::list<std::string> unfolded_;
  char* body_ = nullptr;
  std::size_t room_ = 0;
};

// What the relay needs to read one reply: its parser and where the body is
// decoded, piece by piece, on its way to the client.
struct ReplyReader {
  static constexpr std::size_t kChunkBytes = 16 * 1024;  // decoded per pass: one gathered write
  std::optional<ReplyParser> parser;                     // one per reply
  std::array<char, kChunkBytes> chunk;
};

struct UpstreamConnection {
  std::unique_ptr<net::Stream> stream;
  std::string key;      // host:port
  bool reused = false;  // came from the idle pool (may have been closed by the peer)
  bool broken = false;  // its send was reset (the reply read after it): never pooled
  // Reply read buffer, kept with the connection so that a request does not
  // allocate one; empty whenever the connection is idle.
  net::beast::flat_buffer buffer;
  // Made on first use and kept for the same reason; it also keeps the
  // parser out of the relay's coroutine frame.
  std::unique_ptr<ReplyReader> reader;
  // The request head in wire form, then the reply's head for the client.
  std::string head;

  // Closes the socket, connecting or connected, if there is one: whatever
  // waits on it ends with an error.
  void close() {
    net::beast::error_code ignored;
    if (stream) stream->socket().close(ignored);
  }
};

class UpstreamPool {
 public:
  explicit UpstreamPool(net::asio::io_context& io, std::size_t max_idle_per_server = 64)
      : io_(io), max_idle_(max_idle_per_server) {}

  // Moves an idle connection to the backend that is still usable into
  // `into`; false when there is none. Not a coroutine: taking a pooled
  // connection costs no suspension. (Into the caller's connection, not
  // returned: a connection is several members to move, twice per request.)
  bool take_idle(const config::BackendConfig& backend, UpstreamConnection& into);

  // Opens `into` as a new connection to the backend within `connect_timeout`.
  net::Awaitable<net::beast::error_code> connect(const config::BackendConfig& backend,
                                                 std::chrono::milliseconds connect_timeout,
                                                 UpstreamConnection& into);

  // Takes back a connection whose last response was read completely and
  // which both sides keep alive (moved from: `connection` is left empty). One
  // with unread bytes left is closed instead.
  void release(UpstreamConnection& connection);

  std::size_t idle_count() const noexcept;
  // Closes every idle connection (on this pool's thread).
  void close_idle() noexcept { idle_.clear(); }

  // Whether replies on this thread are looked for as soon as the relay's
  // turn comes back (see ReplyLook).
  ReplyLook& reply_look() noexcept { return reply_look_; }

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
  ReplyLook reply_look_;
};

}  // namespace lmwarden::proxy
