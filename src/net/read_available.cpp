#include "net/read_available.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cassert>
#include <cerrno>
#include <cstring>

namespace lmwarden::net {
namespace {

thread_local std::uint64_t found_nothing = 0;

}  // namespace

std::uint64_t reads_that_found_nothing() noexcept {
  return found_nothing;
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
  if (op->into_.room == 0) return done;  // nothing to read into: at once, as Asio does
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  for (;;) {
    msghdr message{};
    message.msg_iov = op->into_.pieces.data();
    message.msg_iovlen = op->into_.count;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(op->fd_, &message, 0);
    if (n > 0) {
      op->bytes_transferred_ = static_cast<std::size_t>(n);
      return drained(message) ? done_and_exhausted : done;
    }
    if (n == 0) {
      op->ec_ = asio::error::eof;
      return done_and_exhausted;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      ++found_nothing;
      return not_done;
    }
    op->ec_ = boost::system::error_code(errno, asio::error::get_system_category());
    return done;
  }
}

}  // namespace read_available_detail
#endif

}  // namespace lmwarden::net
