// HTTP/1.1 GETs to one server for the control plane (health probes,
// scrapes), over one connection kept alive from call to call: a server polled
// twice a second costs no connection per poll. Each call has one deadline,
// connect included; a connection that fails or times out, or whose reply
// asks to close, is closed, and the next call opens a fresh one. A kept
// connection the server closed while idle (its keep-alive timeout, a
// restart) fails before any reply byte: the call then tries once more on a
// fresh connection, within the same deadline. Not for the data plane, which
// keeps pooled connections (proxy/upstream_pool). One call at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "net/http_server.h"
#include "net/name_lookup.h"

namespace lmwarden::net {

struct GetResult {
  beast::error_code error;  // connect, timeout, protocol
  unsigned status = 0;
  std::string body;
};

class HttpGetter {
 public:
  HttpGetter(Executor executor, std::string host, std::uint16_t port);

  Awaitable<GetResult> get(std::string_view target, std::chrono::milliseconds timeout,
                           std::size_t body_limit = 32 * 1024 * 1024);

  // Connections this getter has opened (attempted) so far.
  std::uint64_t connections_opened() const noexcept { return opened_; }

 private:
  Executor executor_;
  std::string host_;
  std::uint16_t port_;
  std::string host_field_;  // "host:port"
  std::optional<Stream> stream_;  // the kept connection, when there is one
  beast::flat_buffer buffer_;
  std::uint64_t opened_ = 0;
};

// Connects `stream` to host:port by `deadline` (which it sets as the
// stream's): a literal address directly, a name through look_up, to the
// first of its addresses that accepts. The deadline bounds a lookup too
// (net/name_lookup.h).
Awaitable<beast::error_code> connect_to(Stream& stream, const std::string& host, std::uint16_t port,
                                        std::chrono::steady_clock::time_point deadline);

// Connects `stream` to the first of `endpoints` that accepts, under the
// stream's deadline. (Beast's connect to a range of endpoints predates the
// completion tokens kAsTuple is built on.)
Awaitable<beast::error_code> connect_any(Stream& stream, const Endpoints& endpoints);

}  // namespace lmwarden::net
