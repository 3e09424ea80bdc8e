// "HOST:PORT" as a URL authority, a Host field or a log line writes it: an
// IPv6 address in brackets.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lmwarden {

inline std::string host_port(std::string_view host, std::uint16_t port) {
  const bool ipv6 = host.find(':') != std::string_view::npos;
  std::string out;
  if (ipv6) out += '[';
  out += host;
  if (ipv6) out += ']';
  return out + ':' + std::to_string(port);
}

}  // namespace lmwarden
