#include "net/http_server.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <span>
#include <charconv>
#include <spdlog/spdlog.h>
#include <system_error>

namespace lmwarden::net {
namespace {

constexpr auto kAsTuple = asio::as_tuple(asio::use_awaitable);
using namespace asio::experimental::awaitable_operators;

// Upper bound on the lingering close after a refusal, whatever the read timeout.
constexpr std::chrono::milliseconds kMaxLinger{5'000};

// Timeout of a write the client does not take at once.
constexpr auto kWriteTimeout = std::chrono::seconds(60);

// Writes `buffers` to the client. What the socket takes at once is sent
// without suspending and without arming the stream's timer (one sendmsg: the
// usual case for replies and SSE events); the rest, for a client that reads
// slowly, is written asynchronously under kWriteTimeout.
asio::awaitable<beast::error_code> send_all(beast::tcp_stream& stream,
                                            std::span<const asio::const_buffer> buffers) {
  auto& socket = stream.socket();
  beast::error_code ec;
  if (!socket.non_blocking()) socket.non_blocking(true, ec);
  std::size_t sent = 0;
  if (!ec) sent = socket.write_some(buffers, ec);
  if (!ec && sent == asio::buffer_size(buffers)) co_return ec;
  if (ec && ec != asio::error::would_block && ec != asio::error::try_again) co_return ec;
  beast::buffers_suffix<std::span<const asio::const_buffer>> rest(buffers);
  rest.consume(sent);
  stream.expires_after(kWriteTimeout);
  auto [wec, n] = co_await asio::async_write(stream, rest, kAsTuple);
  stream.expires_never();
  co_return wec;
}

// Largest single read of a request body (see serve_connection).
constexpr std::size_t kBodyReadBytes = 64 * 1024;

Response plain_error(std::string_view, http::status status, std::string_view message) {
  Response res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = std::string("{\"error\":{\"message\":\"") + std::string(message) + "\"}}";
  return res;
}

// A request whose framing could be read two ways (both Content-Length and
// Transfer-Encoding) is the classic smuggling vector: refuse it outright.
bool ambiguous_framing(const http::request_parser<http::string_body>& parser) {
  const auto& h = parser.get();
  return h.count(http::field::content_length) > 0 && h.count(http::field::transfer_encoding) > 0;
}

}  // namespace

// ---------------------------------------------------------------- Exchange

asio::awaitable<beast::error_code> Exchange::respond(Response response) {
  response.keep_alive(keep_alive_);
  keep_alive_ = response.keep_alive();
  response.prepare_payload();
  state_ = State::kDone;
  stream_.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await http::async_write(stream_, response, kAsTuple);
  stream_.expires_never();
  if (ec) keep_alive_ = false;
  co_return ec;
}

asio::awaitable<beast::error_code> Exchange::begin_stream(ResponseHeader header, bool chunked,
                                                         std::string_view first_body) {
  header.keep_alive(keep_alive_);
  keep_alive_ = header.keep_alive();
  chunked_ = chunked;
  if (chunked) {
    header.chunked(true);
  }
  state_ = State::kStreaming;
  // Header buffers from the serializer, then the first piece (chunk-framed
  // when chunked), gathered into one write. Beast yields a buffer per field
  // line: room for a few dozen fields.
  http::response_serializer<http::empty_body> serializer{header};
  std::array<asio::const_buffer, 64> pieces;
  std::size_t count = 0;
  bool fits = true;
  beast::error_code ec;
  serializer.split(true);
  serializer.next(ec, [&](beast::error_code&, const auto& buffers) {
    for (asio::const_buffer b : beast::buffers_range_ref(buffers)) {
      if (count + 3 < pieces.size())
        pieces[count++] = b;
      else
        fits = false;
    }
  });
  if (ec || !fits) {
    // A header of more fields than that: the serializer writes it.
    http::response_serializer<http::empty_body> again{header};
    stream_.expires_after(kWriteTimeout);
    auto [e, n] = co_await http::async_write_header(stream_, again, kAsTuple);
    stream_.expires_never();
    if (e) keep_alive_ = false;
    if (e || first_body.empty()) co_return e;
    co_return co_await write_body(first_body);
  }
  char size_line[20];
  if (!first_body.empty()) {
    if (chunked) {
      const int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", first_body.size());
      pieces[count++] = asio::const_buffer(size_line, static_cast<std::size_t>(len));
    }
    pieces[count++] = asio::const_buffer(first_body.data(), first_body.size());
    if (chunked) pieces[count++] = asio::const_buffer("\r\n", 2);
  }
  ec = co_await send_all(stream_, std::span<const asio::const_buffer>(pieces.data(), count));
  if (ec) keep_alive_ = false;
  co_return ec;
}

asio::awaitable<beast::error_code> Exchange::write_body(std::string_view bytes) {
  if (bytes.empty()) co_return beast::error_code{};
  std::array<asio::const_buffer, 3> pieces;
  std::size_t count = 0;
  char size_line[20];
  if (chunked_) {
    const int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", bytes.size());
    pieces[count++] = asio::const_buffer(size_line, static_cast<std::size_t>(len));
  }
  pieces[count++] = asio::const_buffer(bytes.data(), bytes.size());
  if (chunked_) pieces[count++] = asio::const_buffer("\r\n", 2);
  const beast::error_code ec =
      co_await send_all(stream_, std::span<const asio::const_buffer>(pieces.data(), count));
  if (ec) keep_alive_ = false;
  co_return ec;
}

asio::awaitable<beast::error_code> Exchange::end_stream() {
  state_ = State::kDone;
  if (!chunked_) co_return beast::error_code{};
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";
  const asio::const_buffer last(kLastChunk.data(), kLastChunk.size());
  const beast::error_code ec = co_await send_all(stream_, std::span<const asio::const_buffer>(&last, 1));
  if (ec) keep_alive_ = false;
  co_return ec;
}

asio::awaitable<bool> Exchange::client_closed() {
  auto& socket = stream_.socket();
  auto [ec] = co_await socket.async_wait(tcp::socket::wait_read, kAsTuple);
  if (ec == asio::error::operation_aborted) co_return false;  // cancelled: the race is over
  if (!ec) {
    char probe;
    const auto n = ::recv(socket.native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
      // Pipelined bytes: the client is still there. Wait until cancelled.
      asio::steady_timer forever{socket.get_executor(), asio::steady_timer::time_point::max()};
      co_await forever.async_wait(kAsTuple);
      co_return false;
    }
  }
  keep_alive_ = false;  // EOF or a socket error: the client is gone
  co_return true;
}

// ---------------------------------------------------------------- IoThreads

IoThreads::IoThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < threads; ++i) {
    contexts_.push_back(std::make_unique<asio::io_context>(1));
    guards_.push_back(std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
        contexts_.back()->get_executor()));
  }
}

IoThreads::~IoThreads() {
  stop();
  join();
}

asio::io_context& IoThreads::next() noexcept {
  return *contexts_[cursor_.fetch_add(1, std::memory_order_relaxed) % contexts_.size()];
}

void IoThreads::start() {
  for (auto& ctx : contexts_) threads_.emplace_back([c = ctx.get()] { c->run(); });
}

void IoThreads::stop() {
  guards_.clear();
  for (auto& ctx : contexts_) ctx->stop();
}

void IoThreads::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

// ---------------------------------------------------------------- HttpServer

HttpServer::HttpServer(IoThreads& io, ServerOptions options, Handler handler)
    : io_(io), options_(std::move(options)), handler_(std::move(handler)) {
  if (!options_.error_response) options_.error_response = plain_error;
}

HttpServer::~HttpServer() = default;

tcp::endpoint HttpServer::listen(const std::string& host, std::uint16_t port) {
  auto& ctx = io_.at(0);
  boost::system::error_code ec;
  tcp::resolver resolver{ctx};
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty())
    throw std::system_error(ec, "cannot resolve listen address " + host);
  const tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor_ = std::make_unique<tcp::acceptor>(ctx);
  acceptor_->open(endpoint.protocol(), ec);
  if (!ec) acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_->bind(endpoint, ec);
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::system_error(ec, "cannot listen on " + host + ":" + std::to_string(port));
  asio::co_spawn(ctx, accept_loop(), asio::detached);
  return acceptor_->local_endpoint();
}

void HttpServer::stop_accepting() {
  if (!acceptor_) return;
  asio::post(acceptor_->get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
  });
}

asio::awaitable<void> HttpServer::accept_loop() {
  asio::steady_timer backoff{acceptor_->get_executor()};
  while (acceptor_->is_open()) {
    auto [ec, socket] = co_await acceptor_->async_accept(io_.next(), kAsTuple);
    if (ec == asio::error::operation_aborted || !acceptor_->is_open()) break;
    if (ec) {
      // Out of descriptors (or another transient failure): back off instead of
      // spinning, and let existing connections finish.
      spdlog::warn("accept failed: {}; pausing accepts for 100 ms", ec.message());
      backoff.expires_after(std::chrono::milliseconds(100));
      co_await backoff.async_wait(kAsTuple);
      continue;
    }
    if (connections_.load() >= options_.max_connections) {
      boost::system::error_code ignored;
      socket.close(ignored);
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    connections_.fetch_add(1);
    auto ex = socket.get_executor();
    asio::co_spawn(ex, serve_connection(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> HttpServer::serve_connection(tcp::socket socket) {
  struct Release {
    std::atomic<std::size_t>& n;
    ~Release() { n.fetch_sub(1); }
  } release{connections_};

  boost::system::error_code ec;
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  beast::tcp_stream stream{std::move(socket)};
  beast::flat_buffer buffer;
  bool first = true;

  auto send_error = [&](std::string_view target, http::status status,
                        std::string_view message) -> asio::awaitable<void> {
    Response res = options_.error_response(target, status, message);
    res.version(11);
    res.keep_alive(false);
    res.set(http::field::server, options_.server_name);
    res.prepare_payload();
    stream.expires_after(std::chrono::seconds(5));
    auto [wec, wn] = co_await http::async_write(stream, res, kAsTuple);
    if (wec) co_return;
    // Lingering close: the client may still be sending the body we refused.
    // Closing now would reset the connection and lose our reply, so stop
    // sending, drain what arrives for a bounded time and volume, then close.
    // The time bound is total, so a client dribbling bytes cannot hold it.
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    std::array<char, 16 * 1024> sink;
    std::size_t drained = 0;
    const auto linger_until = std::chrono::steady_clock::now() + std::min(options_.read_timeout, kMaxLinger);
    while (drained < 64 * 1024 * 1024 && std::chrono::steady_clock::now() < linger_until) {
      stream.expires_at(linger_until);
      auto [rec, rn] = co_await stream.async_read_some(asio::buffer(sink), kAsTuple);
      if (rec) break;
      drained += rn;
    }
  };

  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
    parser.body_limit(options_.max_body_bytes);

    // Deadlines are timers raced against the reads, not the stream's own
    // timeout: that one closes the socket, and the 408 could not be sent.
    asio::steady_timer deadline{stream.get_executor()};
    if (!first && buffer.size() == 0) {
      // Idle between requests for up to keep_alive_timeout; from the next
      // request's first byte on, read_timeout holds as for the first request,
      // so a kept-alive connection is no slower road for a dribbling client.
      deadline.expires_after(options_.keep_alive_timeout);
      auto idle = co_await (stream.socket().async_wait(tcp::socket::wait_read, kAsTuple) ||
                            deadline.async_wait(kAsTuple));
      if (idle.index() == 1 || std::get<0>(std::get<0>(idle))) break;
    }
    deadline.expires_after(options_.read_timeout);  // the whole request: header and body
    auto header = co_await (http::async_read_header(stream, buffer, parser, kAsTuple) ||
                            deadline.async_wait(kAsTuple));
    const beast::error_code hec = header.index() == 1 ? beast::error_code{beast::error::timeout}
                                                      : std::get<0>(std::get<0>(header));
    if (hec) {
      if (hec == http::error::header_limit) {
        co_await send_error("", http::status::request_header_fields_too_large,
                            "request header too large");
      } else if (hec == http::error::body_limit) {
        co_await send_error(std::string(parser.get().target()), http::status::payload_too_large,
                            "request body too large");
      } else if (hec == beast::error::timeout && buffer.size() > 0) {
        co_await send_error("", http::status::request_timeout, "request header timed out");
      } else if (hec != http::error::end_of_stream && hec != beast::error::timeout &&
                 hec != asio::error::connection_reset && hec != asio::error::eof) {
        co_await send_error("", http::status::bad_request, "malformed request: " + hec.message());
      }
      break;
    }
    first = false;
    const std::string target(parser.get().target());
    if (ambiguous_framing(parser)) {
      co_await send_error(target, http::status::bad_request,
                          "request has both Content-Length and Transfer-Encoding");
      break;
    }
    if (auto len = parser.content_length()) {
      parser.get().body().reserve(*len + kBodyPadding);
      // Beast sizes each read by the buffer's free capacity (512 bytes at
      // least), which after a header is about that: a 100 KB prompt would
      // take some 200 reads, each re-arming the timeout. Room for 64 KB
      // makes it two or three.
      const std::size_t room = std::min<std::size_t>(*len, kBodyReadBytes);
      if (buffer.capacity() - buffer.size() < room) buffer.reserve(buffer.size() + room);
    }
    if (parser.get()[http::field::expect] == "100-continue" && !parser.is_done()) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      stream.expires_after(options_.read_timeout);
      co_await asio::async_write(stream, asio::buffer(kContinue), kAsTuple);
      stream.expires_never();
    }
    if (!parser.is_done()) {
      auto body = co_await (http::async_read(stream, buffer, parser, kAsTuple) || deadline.async_wait(kAsTuple));
      const beast::error_code bec = body.index() == 1 ? beast::error_code{beast::error::timeout}
                                                      : std::get<0>(std::get<0>(body));
      if (bec) {
        if (bec == http::error::body_limit) {
          co_await send_error(target, http::status::payload_too_large, "request body too large");
        } else if (bec == beast::error::timeout) {
          co_await send_error(target, http::status::request_timeout, "request body timed out");
        } else if (bec != http::error::end_of_stream && bec != asio::error::connection_reset) {
          co_await send_error(target, http::status::bad_request,
                              "malformed request body: " + bec.message());
        }
        break;
      }
    }
    stream.expires_never();

    Request request = parser.release();
    if (request.body().capacity() < request.body().size() + kBodyPadding)
      request.body().reserve(request.body().size() + kBodyPadding);
    Exchange exchange{stream, buffer, request, remote};
    co_await handler_(exchange);
    if (!exchange.responded()) {
      Response res = options_.error_response(target, http::status::internal_server_error,
                                             "no response produced");
      co_await exchange.respond(std::move(res));
    }
    if (!exchange.keep_alive()) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.socket().close(ec);
}

bool split_host_port(std::string_view text, std::string& host, std::uint16_t& port) {
  std::string_view h, p;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return false;
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return false;
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
  }
  if (h.empty() || p.empty()) return false;
  unsigned value = 0;
  auto [end, err] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (err != std::errc{} || end != p.data() + p.size() || value > 65535) return false;
  host = std::string(h);
  port = static_cast<std::uint16_t>(value);
  return true;
}

}  // namespace lmwarden::net
