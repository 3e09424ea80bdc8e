// Hosts as addresses and names: whether a host is an IP literal, and
// "HOST:PORT" as a URL authority, a Host field or a log line writes it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace lmwarden {

inline bool is_ipv4(const std::string& s) noexcept {
  in_addr addr{};
  return inet_pton(AF_INET, s.c_str(), &addr) == 1;
}

// Without brackets.
inline bool is_ipv6(const std::string& s) noexcept {
  in6_addr addr{};
  return inet_pton(AF_INET6, s.c_str(), &addr) == 1;
}

// An IPv6 address in brackets.
inline std::string host_port(std::string_view host, std::uint16_t port) {
  const bool ipv6 = host.find(':') != std::string_view::npos;
  std::string out;
  if (ipv6) out += '[';
  out += host;
  if (ipv6) out += ']';
  return out + ':' + std::to_string(port);
}

}  // namespace lmwarden
