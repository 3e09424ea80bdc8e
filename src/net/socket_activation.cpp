#include "net/socket_activation.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace lmwarden::net {

namespace {

std::string errno_text() {
  return std::system_category().message(errno);
}

// A variable's value as a whole number; nothing when unset or not one.
std::optional<long> number_in(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  const std::string_view value{text};
  long n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc{} || end != value.data() + value.size()) return std::nullopt;
  return n;
}

int socket_option(int fd, int level, int name) {
  int value = 0;
  socklen_t size = sizeof value;
  if (::getsockopt(fd, level, name, &value, &size) != 0) return -1;
  return value;
}

}  // namespace

std::string listening_tcp_problem(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return "not open (" + errno_text() + ")";
  if (!S_ISSOCK(st.st_mode)) return "not a socket";
  const int domain = socket_option(fd, SOL_SOCKET, SO_DOMAIN);
  const int type = socket_option(fd, SOL_SOCKET, SO_TYPE);
  if (domain == AF_UNIX) return "a Unix socket (lmwarden serves TCP)";
  if (domain != AF_INET && domain != AF_INET6)
    return "a socket of another family than IPv4 or IPv6";
  if (type == SOCK_DGRAM) return "a UDP socket (ListenDatagram=; lmwarden needs ListenStream=)";
  if (type != SOCK_STREAM || socket_option(fd, SOL_SOCKET, SO_PROTOCOL) != IPPROTO_TCP)
    return "not a TCP socket";
  if (socket_option(fd, SOL_SOCKET, SO_ACCEPTCONN) != 1)
    return "a TCP socket that does not listen (Accept=yes passes connections; lmwarden needs "
           "Accept=no)";
  return {};
}

std::optional<PassedSocket> take_passed_socket(int first) {
  const auto pid = number_in("LISTEN_PID");
  if (!pid || *pid != static_cast<long>(::getpid())) return std::nullopt;
  const char* count_text = std::getenv("LISTEN_FDS");
  const auto count = number_in("LISTEN_FDS");
  // Taken, whatever follows: nothing started from here inherits them.
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  if (!count || *count < 0)
    throw std::runtime_error(std::string("LISTEN_FDS is not a count of descriptors: ") +
                             (count_text ? "\"" + std::string(count_text) + "\"" : "unset"));
  if (*count == 0) return std::nullopt;
  if (*count > 1)
    throw std::runtime_error(
        "the service manager passed " + std::to_string(*count) +
        " sockets (LISTEN_FDS); lmwarden listens on one: give its socket unit one ListenStream=");
  const int fd = first;
  if (const std::string problem = listening_tcp_problem(fd); !problem.empty())
    throw std::runtime_error("the socket the service manager passed (descriptor " +
                             std::to_string(fd) + ") is " + problem);
  if (const int flags = ::fcntl(fd, F_GETFD); flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);

  PassedSocket passed{.fd = fd};
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0)
    throw std::runtime_error("the socket the service manager passed: getsockname: " + errno_text());
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    passed.port = ntohs(v6.sin6_port);
  } else {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    passed.port = ntohs(v4.sin_port);
  }
  passed.host = text;
  return passed;
}

}  // namespace lmwarden::net
