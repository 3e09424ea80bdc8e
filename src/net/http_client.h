// A one-shot HTTP/1.1 GET for the control plane (scrapes, health probes):
// a fresh connection, one request, the whole reply, all under one deadline.
// Not for the data plane, which keeps pooled connections (proxy/upstream_pool).
#pragma once

#include <chrono>
#include <string>

#include "net/http_server.h"

namespace lmwarden::net {

struct GetResult {
  beast::error_code error;  // connect, timeout, protocol
  unsigned status = 0;
  std::string body;
};

Awaitable<GetResult> http_get(std::string host, std::uint16_t port, std::string target,
                              std::chrono::milliseconds timeout,
                              std::size_t body_limit = 32 * 1024 * 1024);

// Connects `stream` to host:port under the stream's deadline: a literal
// address directly, a name through the resolver, to the first of its
// addresses that accepts.
Awaitable<beast::error_code> connect_to(Stream& stream, const std::string& host,
                                        std::uint16_t port);

// Connects `stream` to the first of `endpoints` that accepts, under the
// stream's deadline. (Beast's connect to a range of endpoints predates the
// completion tokens kAsTuple is built on.)
Awaitable<beast::error_code> connect_any(Stream& stream, const Resolver::results_type& endpoints);

}  // namespace lmwarden::net
