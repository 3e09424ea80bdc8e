// Scratch resources of integration tests: a directory removed afterwards, and
// a loopback port nothing listens on.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace lmwarden::testing {

// A fresh directory for one test's files, removed afterwards.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "lmwarden-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// loopback_listener's backlog for a socket bound and never listening.
inline constexpr int kBoundOnly = -1;

// A socket bound to 127.0.0.1 at a port the OS picks, stored in `port`, and
// listening with `backlog` unless that is kBoundOnly; throws when it cannot.
inline int loopback_listener(int backlog, std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      (backlog != kBoundOnly && ::listen(fd, backlog) != 0) ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("cannot bind or listen on 127.0.0.1");
  port = ntohs(addr.sin_port);
  return fd;
}

// A loopback port bound and released: free a moment ago, for a server or a
// listen address the test starts or names itself. Another process may bind
// it meanwhile, as it may any port.
inline std::uint16_t free_port() {
  std::uint16_t port = 0;
  ::close(loopback_listener(kBoundOnly, port));
  return port;
}

// A loopback port where a connect is refused, for a server that is not
// there: bound and never listening, and held so until this process exits,
// so that no listener of a test running beside it (ctest -j) can take it
// meanwhile and answer in its place.
inline std::uint16_t closed_port() {
  std::uint16_t port = 0;
  (void)loopback_listener(kBoundOnly, port);  // kept open on purpose: it holds the port
  return port;
}

// A loopback port where a connect waits without an answer, as one to a host
// that drops packets does: it listens with a backlog of 0 and one connection
// fills that, so the kernel drops the SYNs of any other (and the connecting
// side retries them for minutes).
class UnansweredConnects {
 public:
  UnansweredConnects() : listener_(loopback_listener(0, port_)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port_);
    filler_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(filler_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("the connect that fills the backlog failed");
  }
  ~UnansweredConnects() {
    ::close(filler_);
    ::close(listener_);
  }
  UnansweredConnects(const UnansweredConnects&) = delete;
  UnansweredConnects& operator=(const UnansweredConnects&) = delete;
  std::uint16_t port() const { return port_; }

 private:
  std::uint16_t port_ = 0;  // (before listener_: the listener's initializer sets it)
  int listener_ = -1;
  int filler_ = -1;
};

}  // namespace lmwarden::testing
