// The I/O threads and the accepting side of the HTTP server: the listening
// socket, the accept loop, and the hand-over of each connection to the
// thread that serves it (HttpServer::serve_connection, http_server.cpp).
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "net/http_server.h"
#include "net/read_available.h"

namespace lmwarden::net {

namespace {

// What an exception says, for a log line.
std::string describe(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

}  // namespace

// ---------------------------------------------------------------- IoThreads

IoThreads::IoThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < threads; ++i) {
    contexts_.push_back(std::make_unique<asio::io_context>(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO));
    // A timer makes the context create its reactor (an epoll, an eventfd and
    // a timerfd descriptor) now, rather than at its first connection, which
    // may come when the process has run out of descriptors.
    [[maybe_unused]] const Timer create_reactor{*contexts_.back()};
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

// ------------------------------------------------- HttpServer: accepting

tcp::endpoint HttpServer::listen(const std::string& host, std::uint16_t port) {
  auto& ctx = io_.at(0);
  boost::system::error_code ec;
  Resolver resolver{ctx};
  auto results = resolver.resolve(host, std::to_string(port), Resolver::passive, ec);
  if (ec || results.empty()) throw std::system_error(ec, "cannot resolve listen address " + host);
  const tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor_ = std::make_unique<Acceptor>(ctx);
  acceptor_->open(endpoint.protocol(), ec);
  if (!ec) acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_->bind(endpoint, ec);
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) acceptor_->non_blocking(true, ec);  // accept_loop() calls accept4 itself
  // Inherited by every accepted connection: reads that wait without a recv
  // first (read_available.h). Without it they are Asio's reads.
  if (!ec) enable_drain_hints(*acceptor_);
  if (ec) throw std::system_error(ec, "cannot listen on " + host + ":" + std::to_string(port));
  start_accepting();
  return acceptor_->local_endpoint();
}

// The accept loop does not throw on its own (its errors are values); should
// something under it throw anyway (an allocation), it is logged and the loop
// starts again rather than leaving the server up and deaf.
void HttpServer::start_accepting() {
  asio::co_spawn(acceptor_->get_executor(), accept_loop(), [this](std::exception_ptr failure) {
    if (!failure) return;
    spdlog::error("accept loop failed: {}; accepting again", describe(failure));
    if (acceptor_ && acceptor_->is_open()) start_accepting();
  });
}

void HttpServer::stop_accepting() {
  if (!acceptor_) return;
  asio::post(acceptor_->get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
  });
}

namespace {

// An accepted descriptor on its way to the thread that will serve it; closed
// if it never gets there (its io_context stopped first).
struct AcceptedFd {
  int fd;
  explicit AcceptedFd(int fd) noexcept : fd(fd) {}
  AcceptedFd(AcceptedFd&& other) noexcept : fd(std::exchange(other.fd, -1)) {}
  AcceptedFd& operator=(AcceptedFd&&) = delete;
  ~AcceptedFd() {
    if (fd >= 0) ::close(fd);
  }
  int release() noexcept { return std::exchange(fd, -1); }
};

}  // namespace

// The acceptor waits for readiness and takes connections with accept4 itself,
// rather than with Asio's accept into another io_context: that would register
// the new socket with the other context's reactor from this thread, which the
// contexts' lock-free reactors do not allow (see IoThreads). The descriptor
// is handed over bare and becomes a socket on the thread that serves it.
Awaitable<void> HttpServer::accept_loop() {
  Timer backoff{acceptor_->get_executor()};
  std::size_t refused = 0;  // since the last warning about it
  std::chrono::steady_clock::time_point refusal_said{};
  boost::system::error_code ec;
  const tcp protocol = acceptor_->local_endpoint(ec).protocol();
  while (acceptor_->is_open()) {
    auto [wec] = co_await acceptor_->async_wait(tcp::acceptor::wait_read, kAsTuple);
    if (wec == asio::error::operation_aborted || !acceptor_->is_open()) break;
    for (;;) {
      const int fd =
          ::accept4(acceptor_->native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;  // try the next one
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;     // none left: wait again
        // Out of descriptors (or another failure): back off instead of
        // spinning, and let existing connections finish.
        spdlog::warn("accept failed: {}; pausing accepts for 100 ms",
                     std::system_category().message(errno));
        backoff.expires_after(std::chrono::milliseconds(100));
        co_await backoff.async_wait(kAsTuple);
        break;
      }
      AcceptedFd accepted{fd};
      if (connections_.load() >= options_.max_connections) {
        // Refused: closed with `accepted`. Said at most every 10 s, with
        // how many since the last time.
        ++refused;
        const auto now = std::chrono::steady_clock::now();
        if (now - refusal_said >= std::chrono::seconds(10)) {
          spdlog::warn("{} connection(s) refused: limits.max_connections ({}) reached", refused,
                       options_.max_connections);
          refused = 0;
          refusal_said = now;
        }
        continue;
      }
      connections_.fetch_add(1);
      asio::io_context& ctx = io_.next();
      asio::post(ctx, [this, &ctx, protocol, accepted = std::move(accepted)]() mutable {
        boost::system::error_code ec;
        Socket socket{ctx.get_executor()};
        socket.assign(protocol, accepted.fd, ec);
        if (ec) {
          connections_.fetch_sub(1);
          spdlog::warn("accepted connection not served: {}", ec.message());
          return;  // the descriptor is closed with `accepted`
        }
        accepted.release();
        socket.set_option(tcp::no_delay(true), ec);
        // A connection's errors are values; anything thrown under it (an
        // allocation) ends that connection alone, and is logged.
        asio::co_spawn(ctx, serve_connection(std::move(socket)), [](std::exception_ptr failure) {
          if (failure) spdlog::error("connection ended by an error: {}", describe(failure));
        });
      });
    }
  }
}

}  // namespace lmwarden::net
