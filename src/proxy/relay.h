// One attempt at forwarding a client's request to one upstream server, and the
// streaming relay of its reply.
//
// The client's request is forwarded as its original bytes: only the header is
// rewritten (hop-by-hop fields dropped, X-data-parallel-rank set or removed,
// X-Forwarded-For added, Host set). The reply is relayed piece by piece as it
// arrives (an SSE token reaches the client as soon as vLLM has sent its whole
// event); a tap sees the same bytes on their way through.
#pragma once

#include <atomic>

#include <chrono>
#include <span>
#include <string>
#include <string_view>

#include "config/config.h"
#include "net/http_server.h"
#include "proxy/dialect.h"
#include "proxy/upstream_pool.h"

namespace lmwarden::proxy {

// Sees the relayed reply (for usage accounting and time to first byte).
// It may also hold back bytes (an event stream's open event, until it is
// whole) or drop them (the injected usage chunk): on_body returns the pieces
// to write to the client, in order.
class RelayObserver {
 public:
  virtual ~RelayObserver() = default;
  virtual void on_request_sent() noexcept {}
  virtual void on_response_header(unsigned status, std::string_view content_type, bool chunked) = 0;
  virtual std::span<const std::string_view> on_body(std::string_view bytes) = 0;
  virtual std::span<const std::string_view> on_end() = 0;  // anything held back, at the end
  // The upstream reply has been read to its end; called once, before its last
  // bytes go to the client, so whoever sees the end of the reply also sees the
  // request's counts settled.
  virtual void on_upstream_done() {}
  // The reply was cut short after it started (`kind`: reset, idle_timeout,
  // first_byte_timeout); called before the client hears of it, so that whoever
  // has seen the end of the reply finds the failure counted.
  virtual void on_cut_short(std::string_view /*kind*/) {}
};

struct AttemptResult {
  enum class Outcome {
    kRelayed,      // the reply went to the client (whatever its status)
    kRetryable,    // nothing reached the client; another replica may be tried
    kFailed,       // nothing reached the client; answer with `status`
    kCutShort,     // the reply started but the upstream failed mid-way
    kClientGone,   // the client went away; the upstream request was closed
  };
  Outcome outcome = Outcome::kRelayed;
  net::http::status status = net::http::status::ok;  // for kRetryable/kFailed
  std::string message;                                // for the error reply and logs
  std::string error_kind;  // connect, connect_timeout, first_byte_timeout, idle_timeout,
                           // status_5xx, protocol, reset; or kShutdownKind
  // The server could not be reached at all (connection refused, no route, or
  // no answer within the connect timeout): every rank it serves failed, not
  // only the one tried.
  bool server_unreachable = false;
};

// The error kind of a request the warden itself cut when its shutdown grace
// period ended: the access log's, not an upstream error.
inline constexpr std::string_view kShutdownKind = "shutdown";

struct AttemptContext {
  net::Exchange& exchange;
  UpstreamPool& pool;
  const config::Timeouts& timeouts;
  Dialect dialect;
  std::string_view forwarded_for;    // client address for X-Forwarded-For
  RelayObserver* observer = nullptr;
  // Set while an upstream connection is in use, connecting included, so that
  // a client disconnect can close it at once (the engine then aborts the
  // request).
  UpstreamConnection** live_upstream = nullptr;
  // Set when the warden's shutdown grace period has ended: the live upstream
  // connection is then closed, and the request ended with an error (a 503,
  // or an error event in a stream that had begun), not retried.
  const std::atomic<bool>* cutting = nullptr;
  // The X-Request-Id the warden adds upstream; empty when the client sent
  // its own, which goes up unchanged with the other fields.
  std::string_view request_id;
  // When the attempt under way must have had its first body byte
  // (timeouts.first_byte from sending the request): a header that came before
  // it does not start the wait again.
  std::chrono::steady_clock::time_point first_byte_due{};
};

// Writes into `out` (replacing what it held) the header of `request` as this
// backend and rank (-1: no rank header) receive it, in wire form: the target
// under the backend's base path; hop-by-hop fields, Expect and any rank header
// the client sent dropped; X-Forwarded-For extended with `forwarded_for`; Host
// set; credentials replaced when the backend has its own API key;
// X-Request-Id added as `request_id` unless empty (in place of any the client
// sent: an empty one, which the server would read first); and the body's
// Content-Length. The request itself is left as the client sent it.
void write_upstream_head(std::string& out, const net::Request& request,
                         const config::BackendConfig& backend, int rank,
                         std::string_view forwarded_for, std::string_view request_id = {});

// Whether one of the request's Connection fields names the field `name`
// (any case): a field for this hop only, which write_upstream_head drops.
bool named_in_connection(const net::Request& request, std::string_view name);

// Writes into `out` (replacing what it held) the status line and fields of an
// upstream reply whose header `reply` has parsed, as the client receives them,
// in the form Exchange::begin_stream takes: hop-by-hop fields and
// Content-Length dropped (the exchange writes the framing).
void write_client_head(std::string& out, const ReplyParser& reply);

// Whether a 5xx reply (before anything was relayed) is to be reported as
// retryable rather than relayed. Asked only when such a reply comes: the
// answer may take the model's lock.
class RetryElsewhere {
 public:
  virtual bool operator()() const = 0;

 protected:
  ~RetryElsewhere() = default;
};

// Forwards once.
net::Awaitable<AttemptResult> forward_once(AttemptContext& ctx,
                                           const config::BackendConfig& backend, int rank,
                                           const RetryElsewhere& retry_elsewhere);

}  // namespace lmwarden::proxy
