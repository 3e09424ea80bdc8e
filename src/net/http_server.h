// The HTTP/1.1 server layer shared by the warden and the simulator.
//
// One accept loop hands each connection to one of the I/O threads (an
// io_context per thread, so a connection's coroutines never need a strand).
// A connection reads one request at a time under the configured limits and
// timeouts, then calls the handler, which answers through an Exchange: either a
// whole response or a streamed one (header first, then body pieces as they are
// produced). Errors are values (`as_tuple`), never exceptions on this path.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/intrusive/list_hook.hpp>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "net/connection_deadline.h"
#include "net/executor.h"
#include "net/request.h"

namespace lmwarden::net {

namespace http = beast::http;
using Response = http::response<http::string_body>;
using ResponseHeader = http::response<http::empty_body>;

// How the warden's coroutines await an operation: `co_await op(..., kAsTuple)`
// gives the results as a tuple (an error is a value, not an exception), and
// the operation is awaited directly. (use_awaitable would start each one from
// a coroutine frame of its own, allocated and resumed per read or write;
// asio::deferred does not.) An operand of the awaitable operators (||, &&)
// must be an awaitable and takes asio::use_awaitable_t<Executor>.
inline constexpr auto kAsTuple = asio::as_tuple(asio::deferred);

// Resumes the coroutine that awaits it after the work already ready on its
// thread, and after the reactor's next poll.
inline auto let_ready_work_run(const Executor& executor) {
  return asio::post(executor, asio::deferred);
}

struct ServerOptions {
  std::size_t max_header_bytes = 64 * 1024;
  std::size_t max_body_bytes = 32 * 1024 * 1024;
  std::size_t max_connections = 4096;
  std::chrono::milliseconds read_timeout{60'000};       // one whole request
  std::chrono::milliseconds keep_alive_timeout{300'000};  // idle between requests
  std::string server_name = "lmwarden";
  // Builds the error reply the server itself sends (400/408/413/431) before a
  // handler ran; lets each application answer in its client's dialect.
  std::function<Response(std::string_view target, http::status, std::string_view message)>
      error_response;
  // Told of each of those replies once written: the request as far as it was
  // read (method and target empty when its first line was not), the client's
  // address, the status, the bytes the socket took, and when the request
  // began (its first bytes were read; a connection's first request: when the
  // connection was accepted). For an access log.
  std::function<void(const Request& request, std::string_view client, unsigned status,
                     std::size_t sent_bytes, std::chrono::steady_clock::time_point began)>
      on_error_reply;
  // Told of each connection refused at once for max_connections. For a counter.
  std::function<void()> on_connection_refused;
};

// Writes what the socket takes at once, without suspending and without a trip
// through the scheduler (one sendmsg: an asynchronous write that completes at
// once still posts its completion, and the event loop polls epoll once more
// before running it). Returns the bytes written; a full socket buffer is not
// an error (the caller then waits for room).
std::size_t write_now(Socket& socket, std::span<const asio::const_buffer> buffers,
                      beast::error_code& ec);

// The same for reading: what the socket holds now, without suspending (one
// recvmsg); 0 bytes and no error when nothing has arrived yet.
std::size_t read_now(Socket& socket, std::span<const asio::mutable_buffer> buffers,
                     beast::error_code& ec);

// Appends the pieces (each convertible to std::string_view) with one size
// update: an append per piece would check capacity each time and call memcpy
// even for the two bytes of a literal ": ", whose copy inlines here. No piece
// may view `out` itself: the resize may move it before the pieces are copied.
template <class... Pieces>
void append_all(std::string& out, const Pieces&... pieces) {
  const std::size_t at = out.size();
  out.resize(at + (std::string_view(pieces).size() + ...));
  char* p = out.data() + at;
  ((p = std::copy_n(std::string_view(pieces).data(), std::string_view(pieces).size(), p)), ...);
}

// Appends one field line, "Name: value" and CRLF.
inline void append_field(std::string& out, std::string_view name, std::string_view value) {
  using namespace std::string_view_literals;
  append_all(out, name, ": "sv, value, "\r\n"sv);
}

// Appends a status line and the fields `keep` accepts, each line ending in
// CRLF: the wire form Exchange::begin_stream takes. `Fields`: Beast's fields,
// or any range of elements with name(), name_string() and value().
template <class Fields, class Keep>
void write_status_and_fields(std::string& out, unsigned status, std::string_view reason,
                             const Fields& fields, Keep keep) {
  using namespace std::string_view_literals;
  char digits[12];
  const char* const end = std::to_chars(std::begin(digits), std::end(digits), status).ptr;
  append_all(out, "HTTP/1.1 "sv, std::string_view(digits, static_cast<std::size_t>(end - digits)),
             " "sv, reason, "\r\n"sv);
  for (const auto& f : fields)
    if (keep(f)) append_field(out, f.name_string(), f.value());
}

// The same for `header`, with its reason phrase or the standard one.
template <class Keep>
void write_status_and_fields(std::string& out, const http::response_header<>& header, Keep keep) {
  write_status_and_fields(out, header.result_int(), header.reason(), header, keep);
}

// The connection's pending read of its client (see Exchange::watch_client).
struct ClientRead;

// One request and the means to answer it.
class Exchange {
 public:
  // The client's address, written once per connection.
  struct Peer {
    tcp::endpoint endpoint;
    std::string address;  // e.g. "127.0.0.1"
  };

  // `draining`: the server's flag; once set, the reply not yet begun is the
  // connection's last (Connection: close).
  Exchange(Stream& stream, beast::flat_buffer& buffer, Request& request, const Peer& remote,
           ConnectionDeadline& deadline, ClientRead& client_read,
           const std::atomic<bool>* draining = nullptr)
      : stream_(stream),
        buffer_(buffer),
        request_(request),
        remote_(remote),
        deadline_(deadline),
        client_read_(client_read),
        draining_(draining),
        http10_(request.version() < 11),
        keep_alive_(request.keep_alive()) {}
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  Request& request() noexcept { return request_; }
  const tcp::endpoint& remote() const noexcept { return remote_.endpoint; }
  std::string_view remote_address() const noexcept { return remote_.address; }
  Stream& stream() noexcept { return stream_; }
  // The connection's one deadline: a handler arms it for what it waits on
  // (the relay: its upstream reads) and disarms it after.
  ConnectionDeadline& deadline() noexcept { return deadline_; }

  // Whole response. Sets keep-alive from the request unless already closing.
  Awaitable<beast::error_code> respond(Response response);

  // A HEAD request reaches the handler as the GET it asks about (the server
  // rewrites it); the exchange then sends that reply's header (its
  // Content-Length or chunked framing included) and no body: respond() drops
  // the body, and the body writes of a stream write nothing.
  void set_head_only() noexcept { head_only_ = true; }

  // Streamed response: the header (with Content-Length, or chunked when
  // `chunked`), then body pieces, each written as soon as it is given. An
  // HTTP/1.0 client, which knows no chunked framing, gets the body without
  // one, ended by closing the connection.
  // `first_body`, when given, is the first body piece: it leaves with the
  // header in one write (a small reply then costs one send, not two).
  Awaitable<beast::error_code> begin_stream(const ResponseHeader& header, bool chunked,
                                            std::string_view first_body = {});
  // The same from a header already in wire form: `head` is the status line
  // and the fields, each line ending in CRLF, without the framing fields
  // (Connection, Content-Length, Transfer-Encoding) and without the blank
  // line; the exchange adds those: `content_length` when known, else chunked
  // framing when `chunked`, else none (a bodiless reply).
  Awaitable<beast::error_code> begin_stream(std::string_view head,
                                            std::optional<std::uint64_t> content_length,
                                            bool chunked, std::string_view first_body = {});
  Awaitable<beast::error_code> write_body(std::string_view bytes);
  // write_body without a coroutine frame, for a relay's loop: writes the
  // piece (chunk-framed when chunked) as far as the socket takes it at once.
  // True when that was all of it, or when the write failed (`ec` says);
  // false when the socket took only part: the rest is held here, and
  // co_await write_rest() sends it before anything else is written. `bytes`
  // must stay valid until then.
  bool write_body_now(std::string_view bytes, beast::error_code& ec) {
    return write_body_now(std::span<const std::string_view>(&bytes, 1), ec);
  }
  // The same for up to kMaxBodyPieces pieces, sent as one piece (one chunk,
  // one gathered write).
  static constexpr std::size_t kMaxBodyPieces = 4;
  bool write_body_now(std::span<const std::string_view> pieces, beast::error_code& ec);
  Awaitable<beast::error_code> write_rest();
  Awaitable<beast::error_code> end_stream();
  // end_stream without a coroutine frame, as write_body_now: true when done
  // (or failed: `ec` says), false when co_await write_rest() must finish it.
  bool end_stream_now(beast::error_code& ec);

  // Completes with true when the client has closed its side (or its socket
  // failed), with false when cancelled. Pipelined bytes say nothing about a
  // disconnect, so when they arrive it waits on until cancelled. Cancellable
  // (per-operation cancellation), so it races the upstream relay with asio's
  // awaitable operators.
  Awaitable<bool> client_closed();

  // The same watch without a coroutine of its own: a read of the client's
  // socket stays pending while the handler works, and the callback given to
  // on_client_gone runs if it ends in EOF or an error (the client left;
  // keep-alive is then off). The read is the connection's next read: bytes it
  // brings (the next request) go to the connection's buffer, and after the
  // handler the server waits on it as its wait between requests. So the
  // watch costs no system call beyond that read: unlike async_wait, which
  // Asio re-registers (epoll_ctl) every time, a read needs no epoll change.
  //
  // The handler asks for it (watch_client) when it is about to wait on
  // something else, such as an upstream server; asking again is a no-op. The
  // read starts at the I/O thread's next watch tick (within kClientWatchTick),
  // unless the handler has finished by then: the client sends nothing while
  // it waits for its reply, so a read started at once would find nothing (a
  // system call wasted on every request) and only a wait longer than a tick
  // needs the watch. Not started when a pipelined request is already
  // buffered. The callback must stay valid until stop_watching_client(),
  // which the server also calls after every handler.
  static constexpr std::chrono::milliseconds kClientWatchTick{50};
  void on_client_gone(std::function<void()> callback);
  void watch_client();
  void stop_watching_client() noexcept;
  bool client_gone() const noexcept;

  // Whether other exchanges are in progress on this I/O thread. A handler
  // about to read what a fast peer is sending may first let their ready work
  // run (co_await yield_to_ready_work()): by then the bytes have usually
  // arrived, and the read finds them at once instead of finding nothing (a
  // system call wasted) and waiting.
  bool others_in_progress() const noexcept;
  auto yield_to_ready_work() { return let_ready_work_run(stream_.get_executor()); }

  bool responded() const noexcept { return state_ != State::kNone; }
  // Bytes of the reply the client's socket has taken so far: status line,
  // header, body and chunk framing (nginx's $bytes_sent).
  std::uint64_t bytes_sent() const noexcept { return bytes_sent_; }
  bool keep_alive() const noexcept { return keep_alive_ && !client_gone(); }
  void close_after() noexcept { keep_alive_ = false; }

 private:
  friend class ClientWatchTicker;
  bool client_watch_needed() const noexcept;
  void start_client_watch();
  enum class State { kNone, kStreaming, kDone };
  Stream& stream_;
  beast::flat_buffer& buffer_;
  Request& request_;
  const Peer& remote_;
  ConnectionDeadline& deadline_;
  ClientRead& client_read_;
  const std::atomic<bool>* draining_;
  bool draining() const noexcept { return draining_ && draining_->load(); }
  State state_ = State::kNone;
  std::uint64_t bytes_sent_ = 0;
  bool chunked_ = false;
  bool head_only_ = false;
  bool http10_;  // the client speaks HTTP/1.0: no chunked framing, keep-alive said aloud
  // Writes unsent_[0, count) as far as the socket takes it at once: true when
  // all went (or the write failed: `ec` says), false when the rest is held
  // for write_rest(). The tail of write_body_now and end_stream_now.
  bool send_parts_now(std::size_t count, beast::error_code& ec);

  // A body piece (or the last chunk) the socket did not take whole: its
  // framed parts (the size line, the pieces, CRLF), how many, and how much of
  // them has gone.
  std::array<asio::const_buffer, kMaxBodyPieces + 2> unsent_{};
  std::size_t unsent_count_ = 0;
  std::size_t unsent_sent_ = 0;
  std::array<char, 20> size_line_{};
  bool keep_alive_;  // the client's wish, read before a handler rewrites the request
  // Linked while a watch_client() waits for its tick.
  boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>>
      watch_due_;
};

using Handler = std::function<Awaitable<void>(Exchange&)>;

// Whether the I/O threads share the process's descriptor table (as threads
// do) or each has one of its own (IoThreads, below).
enum class DescriptorTables { kShared, kPerThread };

// A pool of single-threaded io_contexts, one thread each.
//
// Each context is made without locking in its reactor's per-socket state
// (Asio's concurrency hint UNSAFE_IO), which saves two mutex lock/unlock pairs
// per read or write. The contract that buys: a socket or timer is opened,
// used and closed only on the thread of the context it belongs to (Asio's
// descriptor states are pooled per context, so even registering a new socket
// from another thread races with that thread's event loop). Work may still be
// posted to a context from any thread: the acceptor hands each connection
// over as a bare descriptor.
//
// With DescriptorTables::kPerThread each thread, as it starts, takes a copy of
// the process's descriptor table for itself (unshare(CLONE_FILES)). Linux
// takes a reference on the file for every system call on a descriptor of a
// table that several threads share, and skips it where the table has one
// user: about 2.5 % of the warden's CPU under small requests, by a profile
// on this project's test VM (docs/performance-history.md, round 27). A file stays open for as long as any
// table holds it, so each thread closes at once the copies it has no use
// for: all but the standard three, the reactors' epoll, eventfd and timerfd
// descriptors, the channels below and, on the first thread, what
// keep_for_first_thread() named. What that asks of the code that runs on
// the threads, beyond the contract above:
//  - a descriptor opened on one thread means nothing on another: a
//    connection goes to another thread through send_descriptor();
//  - what a thread opened is closed on it: the hooks given to on_stop() run
//    on each thread once stop() has ended its loop, and the context's
//    unfinished handlers (coroutines holding sockets) are destroyed there;
//  - a descriptor opened before start() that the first thread is to use (a
//    listening socket) is given to keep_for_first_thread(); the starting
//    thread's copy is closed once the threads have theirs;
//  - the threads block asynchronous signals, so that a signal handler runs
//    on a thread of the process's own table (Asio's signal pipe is there).
// Where the table cannot be copied or listed (a seccomp filter that forbids
// unshare, no /proc) the threads share it, as with kShared, and the log says
// so (info).
class IoThreads {
 public:
  explicit IoThreads(int threads, DescriptorTables tables = DescriptorTables::kShared);
  ~IoThreads();
  IoThreads(const IoThreads&) = delete;
  IoThreads& operator=(const IoThreads&) = delete;

  std::size_t next_index() noexcept;  // round robin
  asio::io_context& at(std::size_t i) noexcept { return *contexts_[i]; }
  std::size_t size() const noexcept { return contexts_.size(); }
  void start();
  void stop();
  void join();

  // Before start(): run on each thread, with its context, after stop().
  void on_stop(std::function<void(asio::io_context&)> hook);
  // Before start(): a descriptor of this (the starting) thread's table that
  // after start() stays in the first thread's table alone.
  void keep_for_first_thread(int fd);
  // After start(): whether thread i has a descriptor table of its own.
  bool own_table(std::size_t i) const noexcept { return own_table_[i] != 0; }
  // From the first thread, after start(): sends its descriptor fd to thread
  // i, where channel(i) receives it (receive_descriptor). True when it is on
  // its way; the caller then closes its own. False when thread i shares the
  // first thread's table (the number is good there as it is) or the
  // channel is full.
  bool send_descriptor(std::size_t i, int fd) noexcept;
  // Thread i's end of its channel (-1 where it has none), in its own table.
  int channel(std::size_t i) const noexcept { return channels_[i].receive; }
  // After start(): whether a descriptor number of the first thread's table
  // means the same on thread i.
  bool shares_first_table(std::size_t i) const noexcept {
    return i == 0 || (!own_table(0) && !own_table(i));
  }

 private:
  // An io_context whose unfinished handlers can be destroyed before the
  // context is (Asio's execution_context::shutdown, which the destructor
  // calls), on the thread that ran it.
  struct Context : asio::io_context {
    using asio::io_context::io_context;
    using asio::execution_context::shutdown;
  };
  struct Channel {
    int send = -1;
    int receive = -1;
  };
  void prepare_thread(std::size_t i);
  void run_thread(std::size_t i);

  DescriptorTables tables_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::vector<std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>>> guards_;
  std::vector<std::thread> threads_;
  std::vector<std::function<void(asio::io_context&)>> on_stop_;
  std::vector<int> first_thread_only_;
  std::vector<Channel> channels_;
  std::unique_ptr<char[]> own_table_;
  bool started_ = false;
  std::atomic<std::size_t> cursor_{0};
};

// Takes one descriptor sent by IoThreads::send_descriptor from the channel
// `channel` (non-blocking). The descriptor, or -1 with errno set (EAGAIN when
// none waits; EMFILE when one came but this table had no room for it).
int receive_descriptor(int channel) noexcept;

class HttpServer {
 public:
  HttpServer(IoThreads& io, ServerOptions options, Handler handler);
  ~HttpServer();

  // Binds and starts accepting; returns the bound endpoint (port 0 → real port).
  // Throws std::system_error with a clear message when the address is unusable
  // (start-up only, never on the request path).
  tcp::endpoint listen(const std::string& host, std::uint16_t port);
  // The same on a socket that listens already, passed by a service manager
  // (socket_activation.h); the server owns `fd` from here. Throws
  // std::system_error when it cannot be served.
  tcp::endpoint adopt(int fd);

  // Drains: stops accepting new connections, closes those that wait between
  // requests, and makes each reply not yet begun its connection's last
  // (Connection: close). Requests in progress run on.
  void stop_accepting();
  // Destroys the listening socket at once; only with the I/O threads stopped
  // (with tables of their own, the first thread closed it as it stopped).
  void close_acceptor() noexcept { acceptor_.reset(); }
  std::size_t open_connections() const noexcept { return connections_.load(); }
  // Requests whose header has been read and whose reply has not ended (a
  // drain waits for them).
  int requests_under_way() const noexcept;

 private:
  // What listen() and adopt() share once acceptor_ listens: its threads.
  tcp::endpoint serve_acceptor(tcp protocol);
  void start_accepting();
  Awaitable<void> accept_loop();
  // Counts a connection refused for max_connections and logs the refusals:
  // at once when none was logged in the last 10 s, else 10 s after the last
  // line (say_refusals_later), so that none goes unsaid. Acceptor's thread.
  void note_refusal();
  Awaitable<void> say_refusals_later();
  void say_refusals(std::chrono::steady_clock::time_point now);
  // Serves the accepted descriptor fd (of this thread's table) on ctx, this
  // thread's context; closes it if it cannot.
  void serve_accepted(asio::io_context& ctx, int fd);
  // On thread i: serves the connections the first thread sends it.
  Awaitable<void> receive_connections(std::size_t i);
  Awaitable<void> serve_connection(Socket socket);
  // On context's thread: closes this server's connections that wait there
  // between requests.
  void close_idle_connections(asio::io_context& context) noexcept;

  IoThreads& io_;
  ServerOptions options_;
  Handler handler_;
  std::unique_ptr<Acceptor> acceptor_;
  tcp protocol_ = tcp::v4();  // the listening socket's
  std::atomic<std::size_t> connections_{0};
  std::atomic<bool> draining_{false};
  // Refusals for max_connections (the acceptor's thread only).
  std::size_t refused_unsaid_ = 0;
  std::chrono::steady_clock::time_point refusals_said_{};
  bool refusals_to_say_later_ = false;  // say_refusals_later is waiting
};

// "HOST:PORT" split, with [v6]:port. False when malformed.
bool split_host_port(std::string_view text, std::string& host, std::uint16_t& port);

}  // namespace lmwarden::net
