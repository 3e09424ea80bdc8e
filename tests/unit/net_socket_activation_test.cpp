// Socket activation's protocol as sd_listen_fds(3) gives it: the variables
// that name this process, the one socket taken and what it must be. The
// sockets are real (loopback, port 0); the descriptor the protocol fixes at
// 3 is given as the one each test opened.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "net/socket_activation.h"

namespace lmwarden::net {
namespace {

class SocketActivation : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override {
    clear();
    for (const int fd : open_) ::close(fd);
  }
  static void clear() {
    ::unsetenv("LISTEN_PID");
    ::unsetenv("LISTEN_FDS");
    ::unsetenv("LISTEN_FDNAMES");
  }
  static void pass(const std::string& count, pid_t pid = ::getpid()) {
    ::setenv("LISTEN_PID", std::to_string(pid).c_str(), 1);
    ::setenv("LISTEN_FDS", count.c_str(), 1);
    ::setenv("LISTEN_FDNAMES", "lmwarden.socket", 1);
  }
  int kept(int fd) {
    if (fd >= 0) open_.push_back(fd);
    return fd;
  }
  // A TCP socket on the loopback of `family`, port 0; listening if asked.
  int tcp(int family, bool listening) {
    const int fd = kept(::socket(family, SOCK_STREAM, 0));
    if (fd < 0) return -1;
    int bound = -1;
    if (family == AF_INET6) {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_loopback;
      bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (bound != 0 || (listening && ::listen(fd, 8) != 0)) return -1;
    return fd;
  }
  static std::uint16_t port_of(int fd) {
    sockaddr_in6 a{};  // large enough for either; the port is at the same place
    socklen_t size = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size);
    return ntohs(a.sin6_port);
  }
  static std::string refusal(int fd, const std::string& count = "1") {
    pass(count);
    try {
      take_passed_socket(fd);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(taken)";
  }

 private:
  std::vector<int> open_;
};

TEST_F(SocketActivation, NothingIsTakenWithoutTheVariables) {
  const int fd = tcp(AF_INET, true);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(take_passed_socket(fd).has_value());
}

TEST_F(SocketActivation, VariablesNamingAnotherProcessAreLeftAlone) {
  const int fd = tcp(AF_INET, true);
  ASSERT_GE(fd, 0);
  pass("1", ::getppid());
  EXPECT_FALSE(take_passed_socket(fd).has_value());
  EXPECT_NE(std::getenv("LISTEN_PID"), nullptr);
  EXPECT_NE(std::getenv("LISTEN_FDS"), nullptr);
}

TEST_F(SocketActivation, AListeningSocketIsTakenWithItsAddressAndTheVariablesGo) {
  const int fd = tcp(AF_INET, true);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  pass("1");
  const auto passed = take_passed_socket(fd);
  ASSERT_TRUE(passed.has_value());
  EXPECT_EQ(passed->fd, fd);
  EXPECT_EQ(passed->host, "127.0.0.1");
  EXPECT_EQ(passed->port, port_of(fd));
  EXPECT_NE(passed->port, 0);
  EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << "not inherited by what it starts";
  EXPECT_EQ(std::getenv("LISTEN_PID"), nullptr);
  EXPECT_EQ(std::getenv("LISTEN_FDS"), nullptr);
  EXPECT_EQ(std::getenv("LISTEN_FDNAMES"), nullptr);
}

TEST_F(SocketActivation, AnIpv6SocketGivesItsAddressWithoutBrackets) {
  const int fd = tcp(AF_INET6, true);
  if (fd < 0) GTEST_SKIP() << "no IPv6 loopback here";
  pass("1");
  const auto passed = take_passed_socket(fd);
  ASSERT_TRUE(passed.has_value());
  EXPECT_EQ(passed->host, "::1");
  EXPECT_EQ(passed->port, port_of(fd));
}

TEST_F(SocketActivation, NoSocketPassedIsNothingTaken) {
  pass("0");
  EXPECT_FALSE(take_passed_socket(3).has_value());
  EXPECT_EQ(std::getenv("LISTEN_PID"), nullptr);
}

TEST_F(SocketActivation, WhatCannotBeServedIsRefusedSayingWhat) {
  const int listening = tcp(AF_INET, true);
  const int unbound = tcp(AF_INET, false);
  const int udp = kept(::socket(AF_INET, SOCK_DGRAM, 0));
  const int local = kept(::socket(AF_UNIX, SOCK_STREAM, 0));
  const int file = kept(::open("/proc/self/status", O_RDONLY));
  ASSERT_TRUE(listening >= 0 && unbound >= 0 && udp >= 0 && local >= 0 && file >= 0);
  EXPECT_EQ(refusal(listening, "2"),
            "the service manager passed 2 sockets (LISTEN_FDS); lmwarden listens on one: give its "
            "socket unit one ListenStream=");
  EXPECT_EQ(refusal(listening, "two"), "LISTEN_FDS is not a count of descriptors: \"two\"");
  const std::string head = "the socket the service manager passed (descriptor ";
  EXPECT_EQ(refusal(udp), head + std::to_string(udp) +
                              ") is a UDP socket (ListenDatagram=; lmwarden needs ListenStream=)");
  EXPECT_EQ(refusal(unbound), head + std::to_string(unbound) +
                                  ") is a TCP socket that does not listen (Accept=yes passes "
                                  "connections; lmwarden needs Accept=no)");
  EXPECT_EQ(refusal(local),
            head + std::to_string(local) + ") is a Unix socket (lmwarden serves TCP)");
  EXPECT_EQ(refusal(file), head + std::to_string(file) + ") is not a socket");
  const int closed = ::dup(file);
  ::close(closed);
  EXPECT_EQ(refusal(closed).rfind(head + std::to_string(closed) + ") is not open (", 0), 0u)
      << refusal(closed);
  // Each refusal took the variables too.
  EXPECT_EQ(std::getenv("LISTEN_PID"), nullptr);
}

}  // namespace
}  // namespace lmwarden::net
