// systemd's socket activation (sd_listen_fds(3)): a service manager that
// holds the listening socket passes it to the process it starts, as
// descriptor 3, with LISTEN_PID naming that process and LISTEN_FDS counting
// the descriptors. The socket outlives the process, so that a restart
// refuses no connection: those that come while no warden runs wait in its
// backlog for the next. No Asio here; HttpServer::adopt serves the socket.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lmwarden::net {

// The first descriptor a service manager passes (SD_LISTEN_FDS_START).
inline constexpr int kFirstPassedDescriptor = 3;

struct PassedSocket {
  int fd = -1;
  std::string host;  // an IP literal, IPv6 without brackets
  std::uint16_t port = 0;
};

// The listening socket passed to this process, if one was: LISTEN_PID is
// this process and LISTEN_FDS is set. The three LISTEN_ variables are then
// removed from the environment, and the descriptor is closed on exec.
// Nothing (the environment kept) when LISTEN_PID is unset or another
// process's, as when a parent's variables were inherited. Throws
// std::runtime_error, saying why, when a socket was passed that cannot be
// served: more than one, or one that is not a listening TCP socket.
std::optional<PassedSocket> take_passed_socket(int first = kFirstPassedDescriptor);

// Empty when `fd` is a TCP socket (IPv4 or IPv6) that listens; else what it
// is instead ("a UDP socket", "not a socket", …).
std::string listening_tcp_problem(int fd);

}  // namespace lmwarden::net
