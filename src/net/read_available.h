// A socket read that saves a system call per wait, as nginx's reads do.
//
// Asio's async_read_some first tries a recv and waits for epoll only when
// that recv finds nothing. When the last read emptied the socket, that recv
// finds nothing: in the relay of an event stream at an engine's pace, one
// wasted recv per event, a third of the relay's system calls. On a VM whose
// every system call costs a microsecond or more, the warden spent 16-20 %
// less CPU per streamed event without it (docs/performance-history.md,
// round 24).
//
// async_read_available reads like async_read_some, but a read after which
// the kernel says nothing is left tells Asio's epoll reactor that the socket
// is drained: the next read is queued and waits for epoll's next report of
// the socket (an edge: Asio registers sockets edge-triggered) without trying
// a recv first. "Nothing is left" is the kernel's own count of the bytes
// still queued after the read (TCP_INQ, Linux 4.18, which enable_drain_hints
// turns on), not a guess from a short read: bytes that came during the read
// count, and so does a FIN that came with the last bytes (which makes no
// report of its own once they have been reported: after a short read alone,
// the end of the stream would go unseen). The reactor keeps the drained
// state per descriptor and clears it when epoll reports the socket ready,
// whether or not a read was waiting then, so a read started after such a
// report tries its recv at once. (Asio's own receive reports the socket
// drained only at the end of the stream. async_wait would skip the recv
// too, but Asio re-arms the descriptor with epoll_ctl for each wait: a system
// call as well.)
//
// One case makes no report of its own: a reset (RST) that arrives together
// with the peer's last bytes. TCP_INQ does not count it, Asio does not
// register for EPOLLRDHUP (which would show it), and epoll reports the socket
// once for both; so the read after those bytes would wait for a report that
// never comes, where a recv would have failed at once. A sweep covers it:
// once a second (kSweepPeriod), each io_context that has reads waiting asks
// the kernel, with one poll() over all of their sockets, which of them can be
// read, and completes those reads with a recv of their own. A reset alone,
// or after bytes already read, is reported by epoll as before. nginx,
// registered for EPOLLRDHUP, sees it at once.
//
// Without TCP_INQ on the socket (not enabled, another kind of socket, an old
// kernel), a read never reports the socket drained: it is async_read_some.
// The read is an operation of Asio's reactor, built on its interface in
// boost::asio::detail; it is compiled only for the Boost version and reactor
// it was written and tested against (1.81, epoll; kEdgeTrackedReads says
// whether this build has it). Elsewhere the function is async_read_some.
//
// Requirements: the socket's executor is an io_context's run by one thread
// (as each of the warden's I/O threads is): the completion handler is invoked
// directly from the reactor's completion, which is what Asio's own dispatch
// does there. It is not cancellable per operation; closing or cancelling the
// socket ends it with operation_aborted, as it does any read.
#pragma once

#include <array>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/version.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

#include "net/executor.h"

#if BOOST_VERSION == 108100 && defined(BOOST_ASIO_HAS_EPOLL) && \
    !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)
#define LMWARDEN_EDGE_TRACKED_READS 1
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#include <boost/asio/detail/socket_ops.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/intrusive/list_hook.hpp>
#include <sys/uio.h>
#else
#define LMWARDEN_EDGE_TRACKED_READS 0
#endif

namespace lmwarden::net {

inline constexpr bool kEdgeTrackedReads = LMWARDEN_EDGE_TRACKED_READS != 0;

// Asks the kernel to say, with each read of this TCP socket, how many bytes
// are still queued (TCP_INQ): what lets async_read_available wait without a
// recv first. One setsockopt; false if the kernel refused it (the reads then
// work as async_read_some's). The upstream pool does it on each connection
// it opens; the server does it once, on its listening socket, whose
// connections inherit it (Linux copies the listener's TCP options into each
// accepted socket; ReadAvailable.AnAcceptedConnectionInheritsTheHints checks
// that the kernel running the tests does).
bool enable_drain_hints(Socket& socket) noexcept;
bool enable_drain_hints(Acceptor& acceptor) noexcept;

// Reads of async_read_available on this thread whose recv found nothing (and
// that then waited): what the edge tracking is there to keep near zero.
std::uint64_t reads_that_found_nothing() noexcept;

// How often an io_context with reads waiting checks their sockets for what
// epoll will not report (the reset above). The sweep's timer stays pending
// for up to this long after the last read has ended, so an io_context left
// to run out of work (rather than stopped, as the warden's are) returns
// from run() up to that much later.
inline constexpr std::chrono::milliseconds kSweepPeriod{1000};

// Reads of async_read_available on this thread that the sweep completed:
// zero unless a socket became readable without a report.
std::uint64_t reads_completed_by_sweep() noexcept;

#if LMWARDEN_EDGE_TRACKED_READS
namespace read_available_detail {

// The buffers of one read, as recv/recvmsg take them.
struct Destination {
  static constexpr std::size_t kMaxBuffers = 4;
  std::array<iovec, kMaxBuffers> pieces{};
  std::size_t count = 0;
  std::size_t room = 0;
};

// The part of the operation that does not depend on the handler: the recv,
// and what the kernel's count of the bytes left tells the reactor.
class ReadOpBase : public asio::detail::reactor_op {
 public:
  using Reactor = asio::detail::reactor;

  // Its place in its io_context's list of waiting reads (WaitingReads).
  boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>>
      waiting;

  // Called right after the reactor took the operation: whether it is queued,
  // waiting for epoll (rather than done, and posted with its result).
  bool queued() const noexcept { return !ended_ && !ec_; }

  // Once its socket can be read: the recv, and, when that ends the read, the
  // operation taken from the reactor's queue and posted with its result.
  // False when the recv found nothing (the read stays queued). Only for a
  // queued() operation, on the thread that runs its io_context.
  bool complete_now(Reactor& reactor) noexcept;

  int fd() const noexcept { return fd_; }

 protected:
  ReadOpBase(int fd, Reactor::per_descriptor_data descriptor, const Destination& into,
             func_type complete)
      : reactor_op(boost::system::error_code{}, &ReadOpBase::perform, complete),
        fd_(fd),
        descriptor_(descriptor),
        into_(into) {
    cancellation_key_ = this;  // complete_now() takes exactly this operation from the queue
  }

 private:
  static status perform(reactor_op* base) noexcept;
  status read() noexcept;

  int fd_;
  Reactor::per_descriptor_data descriptor_;  // the reactor's state for fd_
  Destination into_;
  bool ended_ = false;  // a recv ended the read (bytes, the end of the stream or an error)
};

// The reads of one io_context that wait for epoll, which the sweep checks
// every kSweepPeriod while there are some (read_available.cpp).
class WaitingReads;

// The io_context's waiting reads (created with its first read), and through
// them its reactor: one service lookup per read.
WaitingReads& waiting_reads(asio::io_context& context);
ReadOpBase::Reactor& reactor_of(WaitingReads& reads) noexcept;

// Puts a queued read in the list; it leaves the list when it is destroyed.
void wait_in_sweep(WaitingReads& reads, ReadOpBase& op) noexcept;

// The operation with its handler. Its memory comes from the thread's
// recycling cache, as Asio's own operations' does.
template <class Handler>
class ReadOp final : public ReadOpBase {
 public:
  using Allocator = asio::recycling_allocator<ReadOp>;

  ReadOp(int fd, Reactor::per_descriptor_data descriptor, const Destination& into,
         Handler&& handler)
      : ReadOpBase(fd, descriptor, into, &ReadOp::complete), handler_(std::move(handler)) {}

 private:
  // Called by the scheduler with `owner` set to run the completion, or
  // without it to destroy the operation unrun (the io_context shutting down).
  // The memory is freed before the handler runs, so that the handler may
  // start the next read into it.
  static void complete(void* owner, asio::detail::operation* base,
                       const boost::system::error_code& /*unused*/, std::size_t /*unused*/) {
    auto* op = static_cast<ReadOp*>(base);
    Handler handler(std::move(op->handler_));
    const boost::system::error_code ec = op->ec_;
    const std::size_t n = op->bytes_transferred_;
    op->~ReadOp();
    Allocator{}.deallocate(op, 1);
    if (owner) std::move(handler)(ec, n);
  }

  Handler handler_;
};

// basic_socket keeps its implementation (descriptor, state and the
// reactor's per-descriptor data) protected.
class SocketInternals : public Socket {
 public:
  static auto& of(Socket& socket) noexcept {
    return (socket.*&SocketInternals::impl_).get_implementation();
  }
};

Destination destination(std::span<const asio::mutable_buffer> buffers) noexcept;

template <class Handler>
void start(Socket& socket, const Destination& into, Handler&& handler) {
  using Op = ReadOp<std::decay_t<Handler>>;
  auto& impl = SocketInternals::of(socket);
  WaitingReads& waiting = waiting_reads(socket.get_executor().context());
  ReadOpBase::Reactor& reactor = reactor_of(waiting);
  typename Op::Allocator allocator;
  Op* op = allocator.allocate(1);
  try {
    new (op) Op(impl.socket_, impl.reactor_data_, into, std::forward<Handler>(handler));
  } catch (...) {
    allocator.deallocate(op, 1);
    throw;
  }
  // As Asio's own socket operations do before their first recv.
  if ((impl.state_ & asio::detail::socket_ops::non_blocking) == 0 &&
      !asio::detail::socket_ops::set_internal_non_blocking(impl.socket_, impl.state_, true,
                                                           op->ec_)) {
    reactor.post_immediate_completion(op, false);
    return;
  }
  reactor.start_op(asio::detail::reactor::read_op, impl.socket_, impl.reactor_data_, op, false,
                   true);
  // A completed operation is posted, not run, so `op` is still there.
  if (op->queued()) wait_in_sweep(waiting, *op);
}

}  // namespace read_available_detail
#endif

// Reads some bytes into `buffers` (at most four, at least one byte of room in
// all) as socket.async_read_some does: completes with (error_code, bytes).
// The end of the stream is asio::error::eof with 0 bytes. The memory the
// buffers point to must stay valid until then (the span itself need not).
template <class Token>
auto async_read_available(Socket& socket, std::span<const asio::mutable_buffer> buffers,
                          Token&& token) {
#if LMWARDEN_EDGE_TRACKED_READS
  return asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
      [&socket](auto handler, const read_available_detail::Destination& into) {
        read_available_detail::start(socket, into, std::move(handler));
      },
      token, read_available_detail::destination(buffers));
#else
  return socket.async_read_some(buffers, std::forward<Token>(token));
#endif
}

template <class Token>
auto async_read_available(Socket& socket, asio::mutable_buffer buffer, Token&& token) {
#if LMWARDEN_EDGE_TRACKED_READS
  return async_read_available(socket, std::span<const asio::mutable_buffer>(&buffer, 1),
                              std::forward<Token>(token));
#else
  return socket.async_read_some(buffer, std::forward<Token>(token));
#endif
}

}  // namespace lmwarden::net
