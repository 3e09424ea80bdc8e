#include "net/read_available.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <boost/intrusive/list.hpp>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <exception>
#include <vector>

namespace lmwarden::net {
namespace {

thread_local std::uint64_t found_nothing = 0;
thread_local std::uint64_t completed_by_sweep = 0;

}  // namespace

std::uint64_t reads_that_found_nothing() noexcept {
  return found_nothing;
}

std::uint64_t reads_completed_by_sweep() noexcept {
  return completed_by_sweep;
}

namespace {

bool set_tcp_inq([[maybe_unused]] int fd) noexcept {
#if LMWARDEN_EDGE_TRACKED_READS
  const int on = 1;
  return ::setsockopt(fd, IPPROTO_TCP, TCP_INQ, &on, sizeof on) == 0;
#else
  return false;
#endif
}

}  // namespace

bool enable_drain_hints(Socket& socket) noexcept {
  return set_tcp_inq(socket.native_handle());
}

bool enable_drain_hints(Acceptor& acceptor) noexcept {
  return set_tcp_inq(acceptor.native_handle());
}

#if LMWARDEN_EDGE_TRACKED_READS
namespace read_available_detail {
namespace {

// Whether a read's control message says that nothing is left to read: the
// count of queued bytes is 0 (a FIN that has come counts as 1). No count
// (TCP_INQ not enabled) says nothing.
bool drained(msghdr& message) noexcept {
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level == SOL_TCP && c->cmsg_type == TCP_CM_INQ &&
        c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int left = 0;
      std::memcpy(&left, CMSG_DATA(c), sizeof left);
      return left == 0;
    }
  }
  return false;
}

}  // namespace

Destination destination(std::span<const asio::mutable_buffer> buffers) noexcept {
  assert(buffers.size() <= Destination::kMaxBuffers);
  Destination into;
  for (const asio::mutable_buffer& b : buffers) {
    if (into.count == Destination::kMaxBuffers) break;
    if (b.size() == 0) continue;
    into.pieces[into.count++] = iovec{b.data(), b.size()};
    into.room += b.size();
  }
  return into;
}

// "done_and_exhausted" when nothing is left (and at the end of the stream) is
// what makes the reactor wait for epoll's next report before it tries this
// socket again; "not_done" queues the read until that report.
asio::detail::reactor_op::status ReadOpBase::perform(reactor_op* base) noexcept {
  auto* op = static_cast<ReadOpBase*>(base);
  const status result = op->read();
  op->ended_ = result != not_done;
  return result;
}

asio::detail::reactor_op::status ReadOpBase::read() noexcept {
  if (into_.room == 0) return done;  // nothing to read into: at once, as Asio does
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  for (;;) {
    msghdr message{};
    message.msg_iov = into_.pieces.data();
    message.msg_iovlen = into_.count;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(fd_, &message, 0);
    if (n > 0) {
      bytes_transferred_ = static_cast<std::size_t>(n);
      return drained(message) ? done_and_exhausted : done;
    }
    if (n == 0) {
      ec_ = asio::error::eof;
      return done_and_exhausted;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ++found_nothing;
      return not_done;
    }
    ec_ = boost::system::error_code(errno, asio::error::get_system_category());
    return done;
  }
}

bool ReadOpBase::complete_now(Reactor& reactor) noexcept {
  assert(queued());
  if (perform(this) == not_done) return false;
  ++completed_by_sweep;
  // Out of the descriptor's queue, and posted: the completion runs later,
  // from the scheduler (one thread), as a cancelled operation's does. It
  // reports the recv's own outcome, not the cancellation's.
  const boost::system::error_code outcome = ec_;
  reactor.cancel_ops_by_key(fd_, descriptor_, Reactor::read_op, this);
  ec_ = outcome;
  return true;
}

// The reads of one io_context that are queued in its reactor, and the timer
// that sweeps them, which runs only while there are some.
class WaitingReads final : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;

  explicit WaitingReads(asio::io_context& context)
      : service(context),
        reactor_(asio::use_service<ReadOpBase::Reactor>(context)),
        timer_(context) {}

  ReadOpBase::Reactor& reactor() noexcept { return reactor_; }

  void add(ReadOpBase& op) {
    waiting_.push_back(op);
    if (!ticking_) arm();
  }

 private:
  using List = boost::intrusive::list<
      ReadOpBase,
      boost::intrusive::member_hook<ReadOpBase, decltype(ReadOpBase::waiting), &ReadOpBase::waiting>,
      boost::intrusive::constant_time_size<false>>;

  void arm() {
    timer_.expires_after(kSweepPeriod);
    // The service outlives its timer's handler: the context destroys pending
    // handlers, uninvoked, before its services.
    timer_.async_wait([this](const boost::system::error_code& ec) {
      ticking_ = false;
      if (ec) return;
      sweep();
      if (!waiting_.empty()) arm();  // else idle: the next add() arms again
    });
    ticking_ = true;  // once the wait is pending (async_wait may throw)
  }

  // One poll() over the sockets of the reads still queued; each whose socket
  // can be read (bytes, the end of the stream, an error) is completed now.
  // Reads that have left the queue (done, cancelled, their socket closed)
  // leave the list when their completion has run and destroyed them.
  void sweep() noexcept {
    polled_.clear();
    reads_.clear();
    try {
      for (ReadOpBase& op : waiting_) {
        if (!op.queued()) continue;
        polled_.push_back(pollfd{op.fd(), POLLIN, 0});
        reads_.push_back(&op);
      }
    } catch (const std::bad_alloc&) {
      return;  // the next sweep tries again
    }
    if (polled_.empty()) return;
    int ready = 0;
    do ready = ::poll(polled_.data(), polled_.size(), 0);
    while (ready < 0 && errno == EINTR);
    // Completing a read posts it and runs no handler: the list holds still.
    for (std::size_t i = 0; ready > 0 && i < polled_.size(); ++i) {
      if (polled_[i].revents == 0) continue;
      --ready;
      reads_[i]->complete_now(reactor_);
    }
  }

  void shutdown() override { waiting_.clear(); }

  ReadOpBase::Reactor& reactor_;
  List waiting_;
  Timer timer_;
  std::vector<pollfd> polled_;
  std::vector<ReadOpBase*> reads_;
  bool ticking_ = false;
};

WaitingReads& waiting_reads(asio::io_context& context) {
  return asio::use_service<WaitingReads>(context);
}

ReadOpBase::Reactor& reactor_of(WaitingReads& reads) noexcept {
  return reads.reactor();
}

void wait_in_sweep(WaitingReads& reads, ReadOpBase& op) noexcept {
  try {
    reads.add(op);
  } catch (const std::exception&) {
    // Out of memory for the timer's wait: this read waits for epoll alone,
    // as it did before there was a sweep.
    op.waiting.unlink();
  }
}

}  // namespace read_available_detail
#endif

}  // namespace lmwarden::net
