// The I/O threads and the accepting side of the HTTP server: the listening
// socket, the accept loop, and the hand-over of each connection to the
// thread that serves it (HttpServer::serve_connection, http_server.cpp).
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "common/exception_text.h"
#include "net/drain_state.h"
#include "net/http_server.h"
#include "net/read_available.h"

namespace lmwarden::net {

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

// ---------------------------------------------------------------- IoThreads

IoThreads::IoThreads(int threads, DescriptorTables tables) : tables_(tables) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  own_table_ = std::make_unique<char[]>(static_cast<std::size_t>(threads));
  channels_.resize(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i) {
    contexts_.push_back(std::make_unique<Context>(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO));
    // A timer makes the context create its reactor (an epoll, an eventfd and
    // a timerfd descriptor) now, rather than at its first connection, which
    // may come when the process has run out of descriptors.
    [[maybe_unused]] const Timer create_reactor{*contexts_.back()};
    guards_.push_back(std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
        contexts_.back()->get_executor()));
  }
  // Made here, before the threads copy the table, so that each has both ends.
  if (tables_ == DescriptorTables::kPerThread) {
    for (std::size_t i = 1; i < channels_.size(); ++i) {
      int ends[2];
      if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, ends) != 0)
        throw std::system_error(errno, std::system_category(),
                                "cannot make the channels between the I/O threads");
      channels_[i] = {ends[0], ends[1]};
    }
  }
}

IoThreads::~IoThreads() {
  stop();
  join();
  for (const Channel& c : channels_) {  // this thread's copies
    if (c.send >= 0) ::close(c.send);
    if (c.receive >= 0) ::close(c.receive);
  }
}

std::size_t IoThreads::next_index() noexcept {
  return cursor_.fetch_add(1, std::memory_order_relaxed) % contexts_.size();
}

void IoThreads::on_stop(std::function<void(asio::io_context&)> hook) {
  if (started_ && tables_ == DescriptorTables::kPerThread)
    throw std::logic_error("IoThreads::on_stop after start: the threads would not run it");
  on_stop_.push_back(std::move(hook));
}

void IoThreads::keep_for_first_thread(int fd) {
  if (started_ && tables_ == DescriptorTables::kPerThread)
    throw std::logic_error(
        "IoThreads::keep_for_first_thread after start: the threads never saw it");
  first_thread_only_.push_back(fd);
}

void IoThreads::start() {
  if (started_) return;
  started_ = true;
  // Every thread has its table (and own_table_ its answer) before any runs a
  // handler, so that a handler may ask about another thread's.
  auto ready = std::make_shared<std::latch>(static_cast<std::ptrdiff_t>(contexts_.size()) + 1);
  for (std::size_t i = 0; i < contexts_.size(); ++i) {
    threads_.emplace_back([this, i, ready] {
      prepare_thread(i);
      ready->arrive_and_wait();
      run_thread(i);
    });
  }
  ready->arrive_and_wait();
  if (tables_ == DescriptorTables::kPerThread && own_table(0))
    for (const int fd : first_thread_only_) ::close(fd);  // this thread's copies
  first_thread_only_.clear();
}

namespace {

constexpr const char* kOwnTable = "/proc/thread-self/fd";

// ThreadSanitizer keeps one record per descriptor number for the whole
// process, so the same number in two tables reads to it as a race on one
// descriptor: its builds keep the shared table.
#if defined(__SANITIZE_THREAD__)
constexpr bool kTablesTracedAsOne = true;
#else
constexpr bool kTablesTracedAsOne = false;
#endif

// Closes the copies in this thread's new table that it has no use for: every
// descriptor but the standard three, `keep`, and the epoll, eventfd and
// timerfd descriptors of Asio's reactors (any context may post to any other,
// which writes to the other's eventfd from this thread). Another object's
// socket or pipe stays open for as long as any table holds it: a copy here
// would keep a connection open, or a port listening, after its owner closed
// it. False when the table cannot be listed.
bool close_copies(const std::vector<int>& keep) {
  DIR* dir = ::opendir(kOwnTable);
  if (dir == nullptr) return false;
  const int listing = ::dirfd(dir);
  std::vector<int> others;
  while (const dirent* entry = ::readdir(dir)) {
    int fd = -1;
    const std::string_view name = entry->d_name;
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc{}) continue;
    if (fd <= 2 || fd == listing || std::find(keep.begin(), keep.end(), fd) != keep.end()) continue;
    char target[64];
    const ssize_t n = ::readlinkat(listing, entry->d_name, target, sizeof target);
    const std::string_view what(target, n > 0 ? static_cast<std::size_t>(n) : 0);
    if (what == "anon_inode:[eventpoll]" || what == "anon_inode:[eventfd]" ||
        what == "anon_inode:[timerfd]")
      continue;
    others.push_back(fd);
  }
  ::closedir(dir);
  for (const int fd : others) ::close(fd);
  return true;
}

}  // namespace

void IoThreads::prepare_thread(std::size_t i) {
  if (tables_ != DescriptorTables::kPerThread) return;
  sigset_t asynchronous;
  ::sigfillset(&asynchronous);
  for (const int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS})
    ::sigdelset(&asynchronous, fault);
  ::pthread_sigmask(SIG_BLOCK, &asynchronous, nullptr);
  // Without a listing of the new table its copies could not be closed.
  std::string refused;
  if (kTablesTracedAsOne)
    refused = "a ThreadSanitizer build, which tracks descriptors by number across threads";
  else if (::access(kOwnTable, R_OK) != 0)
    refused = std::string(kOwnTable) + ": " + std::system_category().message(errno);
  if (refused.empty() && ::unshare(CLONE_FILES) != 0)
    refused = "unshare: " + std::system_category().message(errno);
  if (!refused.empty()) {
    if (i == 0)
      spdlog::info("the I/O threads share the process's descriptor table ({}); each system call "
                   "on a socket then costs a little more",
                   refused);
    return;
  }
  std::vector<int> keep;
  for (const Channel& c : channels_) keep.insert(keep.end(), {c.send, c.receive});
  if (i == 0) keep.insert(keep.end(), first_thread_only_.begin(), first_thread_only_.end());
  if (!close_copies(keep))
    spdlog::error("I/O thread {} cannot list its descriptor table ({}): copies of other "
                  "descriptors stay open in it",
                  i, std::system_category().message(errno));
  own_table_[i] = 1;
}

void IoThreads::run_thread(std::size_t i) {
  Context& ctx = *contexts_[i];
  ctx.run();
  if (tables_ != DescriptorTables::kPerThread) return;
  for (const auto& hook : on_stop_) hook(ctx);
  ctx.shutdown();
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

namespace {

// A message of the channels: one byte, and room for one descriptor.
struct ChannelMessage {
  char byte = 0;
  iovec data{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr header{};
  ChannelMessage() noexcept {
    header.msg_iov = &data;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof control;
  }
  ChannelMessage(const ChannelMessage&) = delete;
  ChannelMessage& operator=(const ChannelMessage&) = delete;
};

}  // namespace

bool IoThreads::send_descriptor(std::size_t i, int fd) noexcept {
  if (shares_first_table(i) || channels_[i].send < 0) return false;
  ChannelMessage message;
  cmsghdr* rights = CMSG_FIRSTHDR(&message.header);
  rights->cmsg_level = SOL_SOCKET;
  rights->cmsg_type = SCM_RIGHTS;
  rights->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(rights), &fd, sizeof fd);
  ssize_t sent;
  do sent = ::sendmsg(channels_[i].send, &message.header, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  return sent == 1;
}

int receive_descriptor(int channel) noexcept {
  ChannelMessage message;
  ssize_t got;
  do got = ::recvmsg(channel, &message.header, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  if (got < 0) return -1;
  if (got == 0) {  // every sending end is closed
    errno = EPIPE;
    return -1;
  }
  const cmsghdr* rights = CMSG_FIRSTHDR(&message.header);
  if ((message.header.msg_flags & MSG_CTRUNC) != 0 || rights == nullptr ||
      rights->cmsg_type != SCM_RIGHTS || rights->cmsg_len != CMSG_LEN(sizeof(int))) {
    errno = EMFILE;  // the kernel closed what it could not give us
    return -1;
  }
  int fd;
  std::memcpy(&fd, CMSG_DATA(rights), sizeof fd);
  return fd;
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
  return serve_acceptor(endpoint.protocol());
}

tcp::endpoint HttpServer::adopt(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  boost::system::error_code ec;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0)
    ec.assign(errno, boost::system::system_category());
  const tcp protocol = address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4();
  acceptor_ = std::make_unique<Acceptor>(io_.at(0));
  if (!ec) acceptor_->assign(protocol, fd, ec);
  if (!ec) acceptor_->non_blocking(true, ec);
  if (!ec) enable_drain_hints(*acceptor_);
  if (ec)
    throw std::system_error(
        ec, "cannot accept on the passed socket (descriptor " + std::to_string(fd) + ")");
  return serve_acceptor(protocol);
}

tcp::endpoint HttpServer::serve_acceptor(tcp protocol) {
  protocol_ = protocol;
  // The listening socket is the first thread's alone: closed there when it
  // stops (below), or sooner by stop_accepting().
  io_.keep_for_first_thread(acceptor_->native_handle());
  io_.on_stop([this, first = &io_.at(0)](asio::io_context& ctx) {
    if (&ctx != first || !acceptor_) return;
    boost::system::error_code ignored;
    acceptor_->close(ignored);
  });
  start_accepting();
  for (std::size_t i = 1; i < io_.size(); ++i) {
    if (io_.channel(i) < 0) continue;
    asio::co_spawn(io_.at(i), receive_connections(i), [i](std::exception_ptr failure) {
      if (failure)
        spdlog::error("I/O thread {} no longer takes connections: {}", i, exception_text(failure));
    });
  }
  return acceptor_->local_endpoint();
}

// The accept loop does not throw on its own (its errors are values); should
// something under it throw anyway (an allocation), it is logged and the loop
// starts again rather than leaving the server up and deaf.
void HttpServer::start_accepting() {
  asio::co_spawn(acceptor_->get_executor(), accept_loop(), [this](std::exception_ptr failure) {
    if (!failure) return;
    spdlog::error("accept loop failed: {}; accepting again", exception_text(failure));
    if (acceptor_ && acceptor_->is_open()) start_accepting();
  });
}

void HttpServer::stop_accepting() {
  if (!acceptor_) return;
  draining_.store(true);
  asio::post(acceptor_->get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_->close(ignored);
  });
  for (std::size_t i = 0; i < io_.size(); ++i)
    asio::post(io_.at(i), [this, &ctx = io_.at(i)] { close_idle_connections(ctx); });
}

// The acceptor waits for readiness and takes connections with accept4 itself,
// rather than with Asio's accept into another io_context: that would register
// the new socket with the other context's reactor from this thread, which the
// contexts' lock-free reactors do not allow (see IoThreads). The descriptor
// is handed over bare and becomes a socket on the thread that serves it
// (sent over that thread's channel where it has a descriptor table of its
// own: IoThreads).
// Refusals for max_connections are logged at most this often.
constexpr auto kRefusalsSaidEvery = std::chrono::seconds(10);

Awaitable<void> HttpServer::accept_loop() {
  Timer backoff{acceptor_->get_executor()};
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
        note_refusal();  // and closed with `accepted`
        continue;
      }
      connections_.fetch_add(1);
      std::size_t to = io_.next_index();
      if (!io_.shares_first_table(to)) {
        // Its thread has a table of its own: the descriptor goes there over
        // the channel, and this thread's copy is closed with `accepted`.
        // Should the channel be full, it is served here.
        if (io_.send_descriptor(to, accepted.fd)) continue;
        to = 0;
      }
      asio::io_context& ctx = io_.at(to);
      asio::post(ctx, [this, &ctx, accepted = std::move(accepted)]() mutable {
        serve_accepted(ctx, accepted.release());
      });
    }
  }
}

void HttpServer::note_refusal() {
  if (options_.on_connection_refused) options_.on_connection_refused();
  ++refused_unsaid_;
  const auto now = std::chrono::steady_clock::now();
  if (now - refusals_said_ >= kRefusalsSaidEvery) {
    say_refusals(now);
  } else if (!refusals_to_say_later_) {
    refusals_to_say_later_ = true;
    asio::co_spawn(acceptor_->get_executor(), say_refusals_later(), asio::detached);
  }
}

Awaitable<void> HttpServer::say_refusals_later() {
  Timer timer{acceptor_->get_executor()};
  timer.expires_at(refusals_said_ + kRefusalsSaidEvery);
  co_await timer.async_wait(kAsTuple);
  refusals_to_say_later_ = false;
  if (refused_unsaid_ > 0) say_refusals(std::chrono::steady_clock::now());
}

void HttpServer::say_refusals(std::chrono::steady_clock::time_point now) {
  spdlog::warn("{} connection(s) refused: limits.max_connections ({}) reached", refused_unsaid_,
               options_.max_connections);
  refused_unsaid_ = 0;
  refusals_said_ = now;
}

void HttpServer::serve_accepted(asio::io_context& ctx, int fd) {
  AcceptedFd accepted{fd};
  boost::system::error_code ec;
  Socket socket{ctx.get_executor()};
  socket.assign(protocol_, accepted.fd, ec);
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
    if (failure) spdlog::error("connection ended by an error: {}", exception_text(failure));
  });
}

Awaitable<void> HttpServer::receive_connections(std::size_t i) {
  if (io_.shares_first_table(i)) co_return;  // connections come by post()
  // A copy of the channel's end that this coroutine owns and closes, here.
  const int own = ::fcntl(io_.channel(i), F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    spdlog::error("I/O thread {} cannot take connections: {}", i,
                  std::system_category().message(errno));
    co_return;
  }
  asio::io_context& ctx = io_.at(i);
  asio::posix::basic_stream_descriptor<Executor> channel{ctx.get_executor(), own};
  for (;;) {
    auto [ec] = co_await channel.async_wait(asio::posix::descriptor_base::wait_read, kAsTuple);
    if (ec) co_return;  // closed as the thread stops
    for (;;) {
      const int fd = receive_descriptor(channel.native_handle());
      if (fd >= 0) {
        serve_accepted(ctx, fd);
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EMFILE || errno == ENFILE) {
        connections_.fetch_sub(1);
        spdlog::warn("a connection was dropped on its way to I/O thread {}: out of descriptors", i);
        continue;
      }
      spdlog::error("I/O thread {} no longer takes connections: {}", i,
                    std::system_category().message(errno));
      co_return;
    }
  }
}

void HttpServer::close_idle_connections(asio::io_context& context) noexcept {
  asio::use_service<DrainState>(context).close_for(*this);
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
