// A TCP server on 127.0.0.1 that misbehaves in one fixed way, for the fault
// tests of what a backend sends (fault_backend_test.cpp,
// fault_reply_head_test.cpp).
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>

#include "scratch.h"

namespace lmwarden::testing {

class BadServer {
 public:
  enum class Behaviour {
    kNeverAccept,  // listens, so connects succeed, but never reads or answers
    kGarbage,      // reads the request, answers bytes that are not HTTP, closes
    kCloseAtOnce,  // accepts and closes without a byte
    kReply,        // reads the request, answers the bytes it was given, closes
    // Answers the bytes it was given, then, 50 ms later, `last` and at once
    // a reset (RST): the warden's read is waiting when both arrive.
    kReplyThenReset,
    // Answers the first request on a connection with the bytes it was given
    // (a reply that keeps the connection), then reads the second, holds it
    // for 300 ms, and closes without a reply.
    kHoldTheSecondThenClose,
  };

  explicit BadServer(Behaviour behaviour, std::string reply = {}, std::string last = {})
      : behaviour_(behaviour), reply_(std::move(reply)), last_(std::move(last)) {
    fd_ = loopback_listener(64, port_);
    if (behaviour_ != Behaviour::kNeverAccept) thread_ = std::thread([this] { run(); });
  }
  ~BadServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }
  int accepted() const { return accepted_.load(); }
  int requests() const { return requests_.load(); }  // reads of a request that got bytes

 private:
  void run() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      ++accepted_;
      if (behaviour_ != Behaviour::kCloseAtOnce) {
        char buf[4096];
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 2000) > 0 && ::recv(c, buf, sizeof buf, 0) > 0) ++requests_;
        constexpr std::string_view kGarbage = "SPDY/9 what is this\r\n\x01\x02\x03\r\n\r\n";
        const std::string_view out = behaviour_ == Behaviour::kGarbage ? kGarbage : reply_;
        (void)::send(c, out.data(), out.size(), MSG_NOSIGNAL);
      }
      if (behaviour_ == Behaviour::kHoldTheSecondThenClose) {
        char buf[4096];
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 2000) > 0 && ::recv(c, buf, sizeof buf, 0) > 0) {
          ++requests_;
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
      }
      if (behaviour_ == Behaviour::kReplyThenReset) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const linger abort_on_close{1, 0};
        ::setsockopt(c, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
        (void)::send(c, last_.data(), last_.size(), MSG_NOSIGNAL);
      }
      ::close(c);
    }
  }

  Behaviour behaviour_;
  std::string reply_;
  std::string last_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> requests_{0};
};

}  // namespace lmwarden::testing
