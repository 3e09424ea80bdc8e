// A "Redis" that takes connections and reads what comes, and answers nothing
// but PING: a Redis that stalls once connected (paused, or not Redis at all).
// With Ping::kWhenAsked it answers a PING only when the test says so
// (answer_ping), so that a test decides when the store connects; with
// Ping::kAlways a thread of its own answers every PING at once, for a warden
// whose store connects again on its own. (The kernel completes connections
// from the backlog, so a store connects at once whether or not they were
// accepted yet.)
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "scratch.h"

namespace lmwarden::testing {

class SilentRedis {
 public:
  enum class Ping { kWhenAsked, kAlways };

  explicit SilentRedis(Ping ping = Ping::kWhenAsked)
      : ping_(ping), listener_(loopback_listener(64, port_)) {
    ::fcntl(listener_, F_SETFL, O_NONBLOCK);
    if (ping_ == Ping::kAlways) {
      thread_ = std::thread([this] {
        while (!stop_) {
          take_in();
          wait_for_more(std::chrono::milliseconds(20));
        }
      });
    }
  }
  ~SilentRedis() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (const Connection& c : connections_)
      if (c.fd >= 0) ::close(c.fd);
    ::close(listener_);
  }
  SilentRedis(const SilentRedis&) = delete;
  SilentRedis& operator=(const SilentRedis&) = delete;

  std::uint16_t port() const { return port_; }

  // Connections made to it so far.
  std::size_t connections() {
    take_in();
    const std::lock_guard lock(mutex_);
    return connections_.size();
  }

  // True once `text` arrived on one connection, since its last PING
  // answered (within 5 s).
  bool received(const std::string& text) { return received_on(text) >= 0; }

  // How many times `text` arrived in all (a command's name: "GET", "SET").
  int seen(const std::string& text) {
    take_in();
    const std::lock_guard lock(mutex_);
    int n = 0;
    for (std::size_t at = all_.find(text); at != std::string::npos; at = all_.find(text, at + 1))
      ++n;
    return n;
  }

  // With Ping::kWhenAsked: answers the PING of a connection (the store's
  // check before it counts as connected) and nothing after it.
  bool answer_ping() {
    const int fd = received_on("PING");
    if (fd < 0) return false;
    const std::lock_guard lock(mutex_);
    for (Connection& c : connections_)
      if (c.fd == fd) c.bytes.clear();
    return ::send(fd, "+PONG\r\n", 7, MSG_NOSIGNAL) == 7;
  }

 private:
  // The connection `text` arrived on (within 5 s), or -1.
  int received_on(const std::string& text) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      take_in();
      {
        const std::lock_guard lock(mutex_);
        for (const Connection& c : connections_)
          if (c.fd >= 0 && c.bytes.find(text) != std::string::npos) return c.fd;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return -1;
  }

  // Accepts the connections waiting and reads what has come on each (a
  // connection its peer closed is closed); with Ping::kAlways, answers each
  // PING in it.
  void take_in() {
    const std::lock_guard lock(mutex_);
    for (int fd; (fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;)
      connections_.push_back({fd, {}});
    for (Connection& c : connections_) {
      if (c.fd < 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        ::close(c.fd);
        c.fd = -1;
        continue;
      }
      if (n < 0) continue;
      c.bytes.append(buf, static_cast<std::size_t>(n));
      all_.append(buf, static_cast<std::size_t>(n));
      if (ping_ != Ping::kAlways) continue;
      for (std::size_t at = c.bytes.find("PING"); at != std::string::npos;
           at = c.bytes.find("PING", at + 4))
        (void)::send(c.fd, "+PONG\r\n", 7, MSG_NOSIGNAL);
      c.bytes.clear();
    }
  }

  // Until a connection or bytes come, or `limit`.
  void wait_for_more(std::chrono::milliseconds limit) {
    std::vector<pollfd> fds{{listener_, POLLIN, 0}};
    {
      const std::lock_guard lock(mutex_);
      for (const Connection& c : connections_)
        if (c.fd >= 0) fds.push_back({c.fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), static_cast<int>(limit.count()));
  }

  struct Connection {
    int fd;             // -1 once its peer closed it
    std::string bytes;  // received since its last PING answered
  };

  const Ping ping_;
  std::uint16_t port_ = 0;  // (before listener_: the listener's initializer sets it)
  int listener_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mutex_;
  std::vector<Connection> connections_;  // every connection accepted, in order
  std::string all_;                      // every byte received
};

}  // namespace lmwarden::testing
