#include "net/http_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/intrusive/list.hpp>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <system_error>
#include <utility>

#include "common/ascii.h"
#include "common/coarse_clock.h"
#include "net/drain_state.h"
#include "net/read_available.h"
#include "net/request_reader.h"

namespace lmwarden::net {

namespace {

// Runs one socket operation in non-blocking mode; "would block" is no error
// (the operation then reports 0 bytes).
template <class Operation>
std::size_t without_waiting(Socket& socket, beast::error_code& ec, Operation operation) {
  ec = {};
  if (!socket.non_blocking()) socket.non_blocking(true, ec);
  std::size_t bytes = 0;
  if (!ec) bytes = operation(ec);
  if (ec && (ec == asio::error::would_block || ec == asio::error::try_again)) ec = {};
  return bytes;
}

}  // namespace

std::size_t write_now(Socket& socket, std::span<const asio::const_buffer> buffers,
                      beast::error_code& ec) {
  return without_waiting(socket, ec,
                         [&](beast::error_code& e) { return socket.write_some(buffers, e); });
}

std::size_t read_now(Socket& socket, std::span<const asio::mutable_buffer> buffers,
                     beast::error_code& ec) {
  return without_waiting(socket, ec,
                         [&](beast::error_code& e) { return socket.read_some(buffers, e); });
}

namespace {

// Upper bound on the lingering close after a refusal, whatever the read timeout.
constexpr std::chrono::milliseconds kMaxLinger{5'000};

// Timeout of a write the client does not take at once.
constexpr auto kWriteTimeout = std::chrono::seconds(60);

// Writes to the client are write_now first (what the socket takes at once,
// without arming the stream's timer and without a coroutine: the usual case
// for replies and SSE events), then send_rest for what it left, which a
// client that reads slowly gets asynchronously under kWriteTimeout.
// `counted` gains the bytes the socket took.
Awaitable<beast::error_code> send_rest(Stream& stream, std::span<const asio::const_buffer> buffers,
                                       std::size_t sent, std::uint64_t& counted) {
  beast::buffers_suffix<std::span<const asio::const_buffer>> rest(buffers);
  rest.consume(sent);
  stream.expires_after(kWriteTimeout);
  auto [wec, n] = co_await asio::async_write(stream, rest, kAsTuple);
  stream.expires_never();
  counted += n;
  co_return wec;
}

// What a 400 for a header Beast's parser refused says.
std::string header_error_message(const beast::error_code& ec) {
  if (ec == http::error::bad_transfer_encoding)
    return "malformed request: bad Transfer-Encoding (chunked only, and never with Content-Length)";
  if (ec == http::error::bad_content_length)
    return "malformed request: bad Content-Length (one whole number, and never with "
           "Transfer-Encoding)";
  return "malformed request: " + ec.message();
}

Response plain_error(std::string_view, http::status status, std::string_view message) {
  Response res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = std::string("{\"error\":{\"message\":\"") + std::string(message) + "\"}}";
  return res;
}

}  // namespace

// The connection's one pending read of its client, shared by the client watch
// (during a handler) and the wait for the next request (after it). What it
// reads goes to the connection's buffer. While it is pending no other read of
// the client is started: a request begun in the buffer ends it first.
struct ClientRead {
  explicit ClientRead(Socket& socket) : socket(socket) {}
  // The connection is ending (normally or by an exception): the read is
  // cancelled, and its completion, which runs later, touches nothing of it.
  ~ClientRead() {
    state->owner_gone = true;
    if (state->pending) {
      beast::error_code ignored;
      socket.cancel(ignored);
    }
  }
  ClientRead(const ClientRead&) = delete;
  ClientRead& operator=(const ClientRead&) = delete;

  struct State {
    bool pending = false;
    bool owner_gone = false;
    bool gone = false;  // ended in EOF or an error (not a cancellation)
    // The server waiting on it between requests, resumed from its completion.
    // (In an optional: this Asio's any_completion_handler move-assignment
    // recurses; it is only ever move-constructed here.)
    std::optional<asio::any_completion_handler<void()>> waiter;
  };
  Socket& socket;
  // Shared with the read's completion handler: if the io_context is destroyed
  // with the read pending, destroying that handler also destroys the waiter
  // (and so the waiting coroutine), which would otherwise own itself.
  std::shared_ptr<State> state = std::make_shared<State>();
  std::function<void()> on_gone;  // the current handler's watch, if any
};

namespace {

// A byte count as a limit's configuration would say it: 64 KiB, 32 MiB, or
// bytes where it is no whole number of either.
std::string size_in_words(std::size_t bytes) {
  constexpr std::size_t kKiB = 1024, kMiB = 1024 * kKiB;
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  if (bytes >= kKiB && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + " KiB";
  return std::to_string(bytes) + " bytes";
}

// Exchanges whose handler is running, per I/O thread (a connection never
// leaves its thread).
thread_local std::size_t exchanges_on_this_thread = 0;

void start_client_read(ClientRead& read, Socket& socket, beast::flat_buffer& buffer) {
  class Completion {
   public:
    Completion(std::shared_ptr<ClientRead::State> state, ClientRead& read,
               beast::flat_buffer& buffer)
        : state(std::move(state)), read(&read), buffer(&buffer) {}
    Completion(Completion&&) noexcept = default;
    Completion& operator=(Completion&&) = delete;
    // Destroyed without running (its io_context destroyed): the waiting
    // coroutine goes with it.
    ~Completion() {
      if (state && state->waiter) {
        auto waiter = std::move(*state->waiter);
        state->waiter.reset();
      }
    }

    void operator()(const beast::error_code& ec, std::size_t n) {
      auto s = std::move(state);
      s->pending = false;
      if (s->owner_gone) return;
      buffer->commit(n);
      if (n == 0 && ec != asio::error::operation_aborted) {
        s->gone = true;
        if (read->on_gone) read->on_gone();
      }
      // Last: the waiter may end the connection, and `read` with it.
      if (s->waiter) {
        auto waiter = std::move(*s->waiter);
        s->waiter.reset();
        std::move(waiter)();
      }
    }

   private:
    std::shared_ptr<ClientRead::State> state;
    ClientRead* read;
    beast::flat_buffer* buffer;
  };
  read.state->pending = true;
  async_read_available(socket, buffer.prepare(kHeaderReadBytes),
                       Completion{read.state, read, buffer});
}

// Completes when the pending client read has.
template <class Token>
auto wait_client_read(ClientRead& read, Token&& token) {
  return asio::async_initiate<Token, void()>(
      [&read](auto handler) { read.state->waiter.emplace(std::move(handler)); }, token);
}

}  // namespace

// The watch_client() calls of one io_context that wait for their tick. One
// timer for all of them, armed while some are asked for: the kernel timer
// moves about once a tick, not once a request.
class ClientWatchTicker final : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;

  explicit ClientWatchTicker(asio::io_context& context) : service(context), timer_(context) {}

  void add(Exchange& exchange) {
    if (exchange.watch_due_.is_linked()) return;
    due_.push_back(exchange);
    if (!ticking_) arm();
  }

 private:
  using Due =
      boost::intrusive::list<Exchange,
                             boost::intrusive::member_hook<Exchange, decltype(Exchange::watch_due_),
                                                           &Exchange::watch_due_>,
                             boost::intrusive::constant_time_size<false>>;

  void arm() {
    ticking_ = true;
    timer_.expires_after(Exchange::kClientWatchTick);
    // The service outlives its timer's handler: the context destroys pending
    // handlers, uninvoked, before its services.
    timer_.async_wait([this](const beast::error_code& ec) {
      ticking_ = false;
      if (ec) return;
      if (due_.empty()) return;  // idle: the next add() arms again
      // Handlers still waiting a tick after asking: their watches start now.
      // Starting one runs no handler code, so the list holds still meanwhile.
      while (!due_.empty()) {
        Exchange& exchange = due_.front();
        due_.pop_front();
        exchange.start_client_watch();
      }
      arm();
    });
  }

  void shutdown() override { due_.clear(); }

  Due due_;
  Timer timer_;
  bool ticking_ = false;
};

// ---------------------------------------------------------------- Exchange

Awaitable<beast::error_code> Exchange::respond(Response response) {
  if (draining()) keep_alive_ = false;
  response.keep_alive(keep_alive_);
  keep_alive_ = response.keep_alive();
  // An HTTP/1.1 reply is persistent unless it says otherwise; an HTTP/1.0
  // client keeps the connection only when told so.
  if (keep_alive_ && http10_) response.set(http::field::connection, "keep-alive");
  response.prepare_payload();
  if (head_only_) response.body().clear();  // after the payload's Content-Length is set
  state_ = State::kDone;
  stream_.expires_after(std::chrono::seconds(60));
  auto [ec, n] = co_await http::async_write(stream_, response, kAsTuple);
  stream_.expires_never();
  bytes_sent_ += n;
  if (ec) keep_alive_ = false;
  co_return ec;
}

Awaitable<beast::error_code> Exchange::begin_stream(const ResponseHeader& header, bool chunked,
                                                    std::string_view first_body) {
  // The framing fields are the exchange's to write.
  std::string head;
  write_status_and_fields(head, header, [chunked](const http::fields::value_type& f) {
    return f.name() != http::field::connection && f.name() != http::field::transfer_encoding &&
           !(chunked && f.name() == http::field::content_length);
  });
  co_return co_await begin_stream(head, std::nullopt, chunked, first_body);
}

Awaitable<beast::error_code> Exchange::begin_stream(std::string_view head,
                                                    std::optional<std::uint64_t> content_length,
                                                    bool chunked, std::string_view first_body) {
  if (draining()) keep_alive_ = false;
  // HTTP/1.0 has no chunked framing: a body of unknown length ends with the
  // connection.
  if (!content_length && chunked && http10_) {
    chunked = false;
    keep_alive_ = false;
  }
  chunked_ = !content_length && chunked;
  state_ = State::kStreaming;
  if (head_only_) first_body = {};
  // The framing lines, the blank line, then the first piece (chunk-framed
  // when chunked): one gathered write with the head.
  char framing[96];
  char* end = framing;
  auto put = [&end](std::string_view text) { end = std::copy(text.begin(), text.end(), end); };
  if (!keep_alive_) put("Connection: close\r\n");
  else if (http10_) put("Connection: keep-alive\r\n");
  if (content_length) {
    put("Content-Length: ");
    end = std::to_chars(end, framing + sizeof framing, *content_length).ptr;
    put("\r\n");
  } else if (chunked_) {
    put("Transfer-Encoding: chunked\r\n");
  }
  put("\r\n");
  if (chunked_ && !first_body.empty()) {
    end = std::to_chars(end, framing + sizeof framing, first_body.size(), 16).ptr;
    put("\r\n");
  }
  std::array<asio::const_buffer, 4> pieces{
      asio::buffer(head), asio::const_buffer(framing, static_cast<std::size_t>(end - framing)),
      asio::buffer(first_body), asio::const_buffer("\r\n", chunked_ && !first_body.empty() ? 2 : 0)};
  beast::error_code ec;
  const std::size_t sent = write_now(stream_.socket(), pieces, ec);
  bytes_sent_ += sent;
  if (!ec && sent < asio::buffer_size(pieces))
    ec = co_await send_rest(stream_, pieces, sent, bytes_sent_);
  if (ec) keep_alive_ = false;
  co_return ec;
}

Awaitable<beast::error_code> Exchange::write_body(std::string_view bytes) {
  beast::error_code ec;
  if (write_body_now(bytes, ec)) co_return ec;
  co_return co_await write_rest();
}

bool Exchange::write_body_now(std::span<const std::string_view> pieces, beast::error_code& ec) {
  assert(pieces.size() <= kMaxBodyPieces);
  ec = {};
  std::size_t size = 0;
  for (const std::string_view piece : pieces) size += piece.size();
  if (size == 0 || head_only_) return true;
  // The size line lives in the exchange, so that the parts stay valid for
  // write_rest().
  std::size_t count = 0;
  if (chunked_) {
    char* end =
        std::to_chars(size_line_.data(), size_line_.data() + size_line_.size() - 2, size, 16).ptr;
    *end++ = '\r';
    *end++ = '\n';
    unsent_[count++] =
        asio::const_buffer(size_line_.data(), static_cast<std::size_t>(end - size_line_.data()));
  }
  for (const std::string_view piece : pieces)
    if (!piece.empty()) unsent_[count++] = asio::const_buffer(piece.data(), piece.size());
  if (chunked_) unsent_[count++] = asio::const_buffer("\r\n", 2);
  return send_parts_now(count, ec);
}

bool Exchange::send_parts_now(std::size_t count, beast::error_code& ec) {
  const std::span<const asio::const_buffer> all(unsent_.data(), count);
  const std::size_t sent = write_now(stream_.socket(), all, ec);
  bytes_sent_ += sent;
  if (ec) keep_alive_ = false;
  if (ec || sent == asio::buffer_size(all)) return true;
  unsent_count_ = count;
  unsent_sent_ = sent;
  return false;
}

Awaitable<beast::error_code> Exchange::write_rest() {
  const std::span<const asio::const_buffer> all(unsent_.data(), unsent_count_);
  const beast::error_code ec = co_await send_rest(stream_, all, unsent_sent_, bytes_sent_);
  unsent_count_ = unsent_sent_ = 0;
  if (ec) keep_alive_ = false;
  co_return ec;
}

bool Exchange::end_stream_now(beast::error_code& ec) {
  ec = {};
  state_ = State::kDone;
  if (!chunked_ || head_only_) return true;
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";
  unsent_[0] = asio::const_buffer(kLastChunk.data(), kLastChunk.size());
  return send_parts_now(1, ec);
}

Awaitable<beast::error_code> Exchange::end_stream() {
  beast::error_code ec;
  if (!end_stream_now(ec)) ec = co_await write_rest();
  co_return ec;
}

Exchange::~Exchange() { stop_watching_client(); }

void Exchange::on_client_gone(std::function<void()> callback) {
  client_read_.on_gone = std::move(callback);
}

// No watch while one is pending, or once the client is gone. A client that
// pipelined its next request may still leave: the watch reads past what is
// buffered, each read adding at most kHeaderReadBytes, until the buffer holds
// that much.
bool Exchange::client_watch_needed() const noexcept {
  return !client_read_.state->pending && !client_read_.state->gone &&
         buffer_.size() < kHeaderReadBytes;
}

void Exchange::watch_client() {
  if (!client_watch_needed()) return;
  asio::use_service<ClientWatchTicker>(stream_.get_executor().context()).add(*this);
}

void Exchange::start_client_watch() {
  if (client_watch_needed()) start_client_read(client_read_, stream_.socket(), buffer_);
}

void Exchange::stop_watching_client() noexcept {
  client_read_.on_gone = nullptr;
  watch_due_.unlink();
}

bool Exchange::others_in_progress() const noexcept { return exchanges_on_this_thread > 1; }

bool Exchange::client_gone() const noexcept { return client_read_.state->gone; }

Awaitable<bool> Exchange::client_closed() {
  auto& socket = stream_.socket();
  auto [ec] = co_await socket.async_wait(tcp::socket::wait_read, kAsTuple);
  if (ec == asio::error::operation_aborted) co_return false;  // cancelled: the race is over
  if (!ec) {
    char probe;
    const auto n = ::recv(socket.native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
      // Pipelined bytes: the client is still there. Wait until cancelled.
      Timer forever{socket.get_executor(), Timer::time_point::max()};
      co_await forever.async_wait(kAsTuple);
      co_return false;
    }
  }
  keep_alive_ = false;  // EOF or a socket error: the client is gone
  co_return true;
}

// ---------------------------------------------------------------- HttpServer

HttpServer::HttpServer(IoThreads& io, ServerOptions options, Handler handler)
    : io_(io), options_(std::move(options)), handler_(std::move(handler)) {
  if (!options_.error_response) options_.error_response = plain_error;
}

HttpServer::~HttpServer() = default;

int HttpServer::requests_under_way() const noexcept {
  int total = 0;
  for (std::size_t i = 0; i < io_.size(); ++i)
    total += asio::use_service<DrainState>(io_.at(i)).under_way.load(std::memory_order_relaxed);
  return total;
}

Awaitable<void> HttpServer::serve_connection(Socket tcp_socket) {
  struct Release {
    std::atomic<std::size_t>& n;
    ~Release() { n.fetch_sub(1); }
  } release{connections_};

  boost::system::error_code ec;
  Exchange::Peer remote{tcp_socket.remote_endpoint(ec), {}};
  remote.address = remote.endpoint.address().to_string();
  Stream stream{std::move(tcp_socket)};
  beast::flat_buffer buffer;
  ConnectionDeadline deadline{stream.get_executor()};
  ClientRead client_read{stream.socket()};
  DrainState& drain_state = asio::use_service<DrainState>(stream.get_executor().context());
  bool first = true;
  // When the request being read began: for the first, the accept; for a
  // later one, its first bytes' arrival (or the previous reply's end, when
  // they were already there). For the log of an error reply sent here, to
  // the kernel's tick: a precise read would cost every request for the
  // rare one that needs it.
  auto began = coarse_steady_now();
  // One request object for the connection: each request reuses its storage.
  Request request;

  auto send_error = [&](std::string_view target, http::status status,
                        std::string_view message) -> Awaitable<void> {
    deadline.disarm();  // the reply and the lingering close keep time of their own
    Response res = options_.error_response(target, status, message);
    res.version(11);
    res.keep_alive(false);
    res.set(http::field::server, options_.server_name);
    res.prepare_payload();
    // A HEAD gets the header alone, its Content-Length the body's (RFC 9110 §9.3.2).
    if (request.method() == http::verb::head) res.body().clear();
    stream.expires_after(std::chrono::seconds(5));
    auto [wec, wn] = co_await http::async_write(stream, res, kAsTuple);
    if (options_.on_error_reply)
      options_.on_error_reply(request, remote.address, res.result_int(), wn, began);
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
    request.clear();
    RequestParser parser{request};
    parser.header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
    parser.body_limit(options_.max_body_bytes);

    // The deadline cancels the read rather than closing the socket, so that a
    // 408 can still be sent. A kept-alive connection may idle between
    // requests for up to keep_alive_timeout; from the next request's first
    // byte on, read_timeout holds as for the first request (the whole
    // request, header and body), so a kept-alive connection is no slower
    // road for a dribbling client.
    const bool idle = !first && buffer.size() == 0;
    if (idle) {
      // Listed so that a drain (stop_accepting) can cancel the wait: its
      // flag is checked before each step that would wait, its cancel ends
      // the wait under way.
      DrainState::Wait idle_wait{*this, stream.socket()};
      drain_state.add(idle_wait);
      // The read the handler's client watch left pending (or a new one) is
      // this wait; bytes it brings start the request.
      deadline.arm(stream.socket(), options_.keep_alive_timeout);
      if (!draining_.load() && !client_read.state->pending && !client_read.state->gone) {
        // Busy: the client has usually sent its next request by the time the
        // work already ready here has run, and the read then finds it.
        if (exchanges_on_this_thread > 0) co_await let_ready_work_run(stream.get_executor());
        if (!draining_.load()) start_client_read(client_read, stream.socket(), buffer);
      }
      if (client_read.state->pending && draining_.load()) {
        beast::error_code ignored;
        stream.socket().cancel(ignored);  // the drain came before this wait began
      }
      if (client_read.state->pending) co_await wait_client_read(client_read, asio::deferred);
      // Drained: a request that has already arrived is served (as the
      // connection's last), not dropped; none, and the connection closes.
      if (buffer.size() == 0 && !client_read.state->gone && draining_.load()) {
        beast::error_code aec;
        if (stream.socket().available(aec) > 0 && !aec) {
          start_client_read(client_read, stream.socket(), buffer);
          if (client_read.state->pending) co_await wait_client_read(client_read, asio::deferred);
        }
      }
      if (buffer.size() == 0) break;  // closed, failed, or idle past the keep-alive timeout
    } else if (client_read.state->pending) {
      // The handler's client watch left a read pending, part of this
      // request already buffered: it reads into space it prepared in the
      // buffer, which the reads below would prepare again. It is ended (its
      // bytes, if any came, kept) before any of them starts.
      beast::error_code ignored;
      stream.socket().cancel(ignored);
      co_await wait_client_read(client_read, asio::deferred);
    }
    if (!first) began = coarse_steady_now();
    deadline.arm(stream.socket(), options_.read_timeout);
    // A header already buffered (the usual case once a client is busy) is
    // parsed without a coroutine of its own.
    beast::error_code hec = parse_buffered_header(buffer, parser);
    if (hec == http::error::need_more) hec = co_await read_header(stream.socket(), buffer, parser, deadline);
    // The target, once the request line has been parsed (empty before),
    // picks the dialect of an error reply.
    const std::string_view target = request.target();
    if (hec) {
      if (hec == http::error::header_limit) {
        const std::string message =
            "request header too large: the limit is " + size_in_words(options_.max_header_bytes);
        co_await send_error(target, http::status::request_header_fields_too_large, message);
      } else if (hec == http::error::body_limit) {
        const std::string message =
            "request body too large: the limit is " + size_in_words(options_.max_body_bytes);
        co_await send_error(target, http::status::payload_too_large, message);
      } else if (hec == beast::error::timeout && buffer.size() > 0) {
        co_await send_error(target, http::status::request_timeout, "request header timed out");
      } else if (hec != http::error::end_of_stream && hec != beast::error::timeout &&
                 hec != asio::error::connection_reset && hec != asio::error::eof) {
        co_await send_error(target, http::status::bad_request, header_error_message(hec));
      }
      break;
    }
    first = false;
    // From its header to its reply's end, whether forwarded or answered here.
    struct UnderWay {
      explicit UnderWay(DrainState& state) : state(state) { state.count_under_way(1); }
      ~UnderWay() { state.count_under_way(-1); }
      DrainState& state;
    } under_way{drain_state};
    if (const auto refusal = refuse_header(request)) {
      co_await send_error(target, refusal->status, refusal->message);
      break;
    }
    if (ascii_iequals(request[http::field::expect], "100-continue") && request.version() >= 11 &&
        !parser.is_done()) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      stream.expires_after(options_.read_timeout);
      co_await asio::async_write(stream, asio::buffer(kContinue), kAsTuple);
      stream.expires_never();
    }
    if (!parser.is_done()) {
      beast::error_code bec;
      if (const std::uint64_t length = parser.declared_length();
          length != RequestParser::kNoDeclaredLength) {
        // The parser holds the header only; the body is read past it. One
        // already buffered is taken without a coroutine of its own.
        auto& body = request.body();
        const std::size_t got = take_buffered_body(buffer, body, length);
        if (got < length)
          bec = co_await read_sized_body(stream.socket(), buffer, body, got, length, deadline);
      } else {
        bec = co_await read_parsed_body(stream.socket(), buffer, parser,
                                        options_.max_header_bytes + kHeaderReadBytes, deadline);
      }
      if (bec) {
        if (bec == http::error::body_limit) {
          const std::string message =
              "request body too large: the limit is " + size_in_words(options_.max_body_bytes);
          co_await send_error(target, http::status::payload_too_large, message);
        } else if (bec == http::error::buffer_overflow) {
          co_await send_error(target, http::status::bad_request,
                              "malformed request body: a chunk size line or trailer field too long");
        } else if (bec == beast::error::timeout) {
          co_await send_error(target, http::status::request_timeout, "request body timed out");
        } else if (bec != http::error::end_of_stream && bec != asio::error::connection_reset) {
          co_await send_error(target, http::status::bad_request,
                              "malformed request body: " + bec.message());
        }
        break;
      }
    }
    deadline.disarm();

    // A HEAD is served as its GET (Exchange::set_head_only()). Rewritten
    // only now: the method is stored with the request's other text, which
    // may move, and `target` above views that text.
    const bool head_only = request.method() == http::verb::head;
    if (head_only) request.set_method(http::verb::get);
    Exchange exchange{stream, buffer, request, remote, deadline, client_read, &draining_};
    if (head_only) exchange.set_head_only();
    {
      struct InProgress {
        InProgress() noexcept { ++exchanges_on_this_thread; }
        ~InProgress() { --exchanges_on_this_thread; }
      } in_progress;
      co_await handler_(exchange);
    }
    exchange.stop_watching_client();
    deadline.disarm();
    if (!exchange.responded()) {
      Response res = options_.error_response(request.target(), http::status::internal_server_error,
                                             "no response produced");
      co_await exchange.respond(std::move(res));
    }
    if (!exchange.keep_alive()) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.socket().close(ec);
}

}  // namespace lmwarden::net
