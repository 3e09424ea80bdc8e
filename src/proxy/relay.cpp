#include "proxy/relay.h"

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/write.hpp>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace lmwarden::proxy {
namespace {

namespace http = net::http;
constexpr auto kAsTuple = net::asio::as_tuple(net::asio::use_awaitable);

// RFC 9110 §7.6.1: connection-specific fields never cross the proxy.
constexpr std::array<http::field, 8> kHopByHop = {
    http::field::connection,        http::field::keep_alive,         http::field::proxy_connection,
    http::field::te,                http::field::trailer,            http::field::transfer_encoding,
    http::field::upgrade,           http::field::proxy_authorization};

template <class Fields>
void drop_hop_by_hop(Fields& fields) {
  // Fields the sender listed in Connection are hop-by-hop too.
  std::vector<std::string> listed;
  for (auto token : http::token_list{fields[http::field::connection]}) listed.emplace_back(token);
  for (const auto& name : listed) fields.erase(name);
  for (auto f : kHopByHop) fields.erase(f);
}

// Upstream reply reads: up to this much per read.
constexpr std::size_t kReplyReadBytes = 16 * 1024;
// Reply body decoded per pass (one gathered write to the client).
constexpr std::size_t kRelayChunkBytes = 16 * 1024;

// async_read_some hands over one parsed element at a time (one chunk of a
// chunked reply: one SSE event from vLLM). Events that arrived together are
// taken from what is already buffered, without waiting for the socket, so they
// leave in one write instead of one write (and one timer) each. Stops at a
// partial element, a full body buffer or the end of the reply; a parse error
// is returned as the read's error.
net::beast::error_code drain_buffered(http::response_parser<http::buffer_body>& parser,
                                      net::beast::flat_buffer& buffer) {
  while (!parser.is_done() && buffer.size() > 0 && parser.get().body().size > 0) {
    net::beast::error_code ec;
    const std::size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more || ec == http::error::need_buffer) break;
    if (ec) return ec;
    if (used == 0) break;
  }
  return {};
}

// Sends the request as its serializer lays it out (header and body), in as
// few writes as the socket allows. What the socket takes at once costs one
// sendmsg and no trip through the scheduler: an asynchronous write that
// completes at once still posts its completion, and the event loop then polls
// epoll once more before running it.
net::asio::awaitable<net::beast::error_code> send_request(net::tcp::socket& socket,
                                                          net::Request& request) {
  http::request_serializer<http::string_body> serializer{request};
  net::beast::error_code ec;
  if (!socket.non_blocking()) socket.non_blocking(true, ec);
  while (!ec && !serializer.is_done()) {
    std::array<net::asio::const_buffer, 64> pieces;
    std::size_t count = 0;
    serializer.next(ec, [&](net::beast::error_code&, const auto& buffers) {
      for (net::asio::const_buffer b : net::beast::buffers_range_ref(buffers)) {
        if (count == pieces.size()) break;
        pieces[count++] = b;
      }
    });
    if (ec) break;
    const std::span<const net::asio::const_buffer> gathered(pieces.data(), count);
    std::size_t sent = socket.write_some(gathered, ec);
    if (ec == net::asio::error::would_block || ec == net::asio::error::try_again) {
      auto [wec, n] = co_await socket.async_write_some(gathered, kAsTuple);  // waits for room
      ec = wec;
      sent = n;
    }
    if (!ec) serializer.consume(sent);
  }
  co_return ec;
}

bool is_reset(const net::beast::error_code& ec) {
  return ec == net::asio::error::eof || ec == http::error::end_of_stream ||
         ec == net::asio::error::connection_reset || ec == net::asio::error::broken_pipe;
}

}  // namespace

void prepare_upstream_request(net::Request& request, const config::BackendConfig& backend,
                              int rank, std::string_view original_target,
                              std::string_view forwarded_for) {
  drop_hop_by_hop(request);
  request.erase(http::field::expect);
  request.erase("X-data-parallel-rank");
  if (rank >= 0) request.set("X-data-parallel-rank", std::to_string(rank));
  if (backend.api_key_env) {
    const char* key = std::getenv(backend.api_key_env->c_str());
    request.erase("x-api-key");
    request.set(http::field::authorization, std::string("Bearer ") + (key ? key : ""));
  }
  // Append to a chain the client (or a proxy before us) already started.
  std::string xff(request["X-Forwarded-For"]);
  if (!forwarded_for.empty()) xff = xff.empty() ? std::string(forwarded_for) : xff + ", " + std::string(forwarded_for);
  if (!xff.empty()) request.set("X-Forwarded-For", xff);
  request.set(http::field::host, backend.host + ":" + std::to_string(backend.port));
  request.target(backend.base_path + std::string(original_target));
  request.version(11);
  request.keep_alive(true);
  request.prepare_payload();  // Content-Length from the body we hold (never chunked)
}

net::asio::awaitable<AttemptResult> forward_once(AttemptContext& ctx,
                                                 const config::BackendConfig& backend, int rank,
                                                 bool may_retry) {
  using Outcome = AttemptResult::Outcome;
  net::Request& request = ctx.exchange.request();
  prepare_upstream_request(request, backend, rank, ctx.original_target, ctx.forwarded_for);

  // A pooled connection may have been closed by the server an instant ago; if
  // it fails before any reply byte, try once more on a fresh connection.
  for (int fresh = 0; fresh < 2; ++fresh) {
    auto [cec, conn] = co_await ctx.pool.acquire(backend, ctx.timeouts.connect, fresh == 0);
    if (cec) {
      const bool timeout = cec == net::beast::error::timeout;
      co_return AttemptResult{Outcome::kRetryable, http::status::bad_gateway,
                              "cannot connect to " + backend.url + ": " + cec.message(),
                              timeout ? "connect_timeout" : "connect"};
    }
    auto& upstream = *conn.stream;
    struct LiveGuard {
      net::beast::tcp_stream** slot;
      ~LiveGuard() { if (slot) *slot = nullptr; }
    } live{ctx.live_upstream};
    if (ctx.live_upstream) *ctx.live_upstream = &upstream;
    if (ctx.exchange.client_gone())
      co_return AttemptResult{Outcome::kClientGone, {}, "client went away", ""};

    // Upstream timeouts run on the client connection's one deadline (no timer
    // armed per read); it closes this socket when they pass. Armed only while
    // an upstream operation is pending, so a slow client write never counts
    // as upstream silence.
    struct Disarm {
      net::ConnectionDeadline& deadline;
      ~Disarm() { deadline.disarm(); }
    } disarm{ctx.exchange.deadline()};
    // An upstream operation's error, as the relay reports it.
    auto classify = [&](net::beast::error_code ec) {
      if (ec && ctx.exchange.client_gone()) ec = net::asio::error::operation_aborted;
      else if (ec && ctx.exchange.deadline().expired()) ec = net::beast::error::timeout;
      return ec;
    };

    ctx.exchange.deadline().arm(upstream.socket(), ctx.timeouts.first_byte,
                                net::ConnectionDeadline::OnExpiry::kClose);
    const auto wec = classify(co_await send_request(upstream.socket(), request));
    if (wec == net::asio::error::operation_aborted)
      co_return AttemptResult{Outcome::kClientGone, {}, "client went away", ""};
    if (wec) {
      if (conn.reused && is_reset(wec)) continue;
      co_return AttemptResult{Outcome::kRetryable, http::status::bad_gateway,
                              "sending to " + backend.url + " failed: " + wec.message(), "reset"};
    }

    if (ctx.observer) ctx.observer->on_request_sent();
    conn.buffer.reserve(kReplyReadBytes);  // reads are sized by free capacity (512 bytes at least)
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);  // replies stream for as long as they need
    auto [hec0, hn] =
        co_await http::async_read_header(upstream.socket(), conn.buffer, parser, kAsTuple);
    ctx.exchange.deadline().disarm();
    const auto hec = classify(hec0);
    if (hec) {
      if (conn.reused && is_reset(hec) && conn.buffer.size() == 0) continue;
      if (hec == net::beast::error::timeout)
        co_return AttemptResult{Outcome::kFailed, http::status::gateway_timeout,
                                "upstream " + backend.url + " sent no reply within the first-byte timeout",
                                "first_byte_timeout"};
      if (hec == net::asio::error::operation_aborted)
        co_return AttemptResult{Outcome::kClientGone, {}, "client went away", ""};
      co_return AttemptResult{Outcome::kRetryable, http::status::bad_gateway,
                              "bad reply from " + backend.url + ": " + hec.message(), "protocol"};
    }
    auto& reply = parser.get();
    const unsigned status = reply.result_int();
    if (status >= 500 && may_retry) {
      co_return AttemptResult{Outcome::kRetryable, http::status::bad_gateway,
                              "upstream " + backend.url + " answered " + std::to_string(status),
                              "status_5xx"};
    }

    net::ResponseHeader header{reply.result(), 11};
    for (const auto& field : reply) header.insert(field.name_string(), field.value());
    drop_hop_by_hop(header);
    const auto length = parser.content_length();
    const bool chunked = !length && !parser.is_done();
    if (length) header.content_length(*length);
    const bool event_stream = reply[http::field::content_type].starts_with("text/event-stream");
    if (ctx.observer) ctx.observer->on_response_header(status, reply[http::field::content_type], chunked);
    // First pass: no read; the body bytes that came with the header (all of
    // a small reply) leave with it in one write. Then one read per pass, and
    // whatever else is already buffered with it.
    if (!conn.relay_chunk) conn.relay_chunk = std::make_unique<char[]>(kRelayChunkBytes);
    const std::span<char> chunk{conn.relay_chunk.get(), kRelayChunkBytes};
    bool header_sent = false;
    for (;;) {
      reply.body().data = chunk.data();
      reply.body().size = chunk.size();
      net::beast::error_code rec;
      if (!header_sent) {
        if (!parser.is_done()) rec = drain_buffered(parser, conn.buffer);
      } else {
        if (parser.is_done()) break;
        ctx.exchange.deadline().arm(upstream.socket(), ctx.timeouts.idle,
                                    net::ConnectionDeadline::OnExpiry::kClose);
        auto [ec, rn] =
            co_await http::async_read_some(upstream.socket(), conn.buffer, parser, kAsTuple);
        ctx.exchange.deadline().disarm();
        if (ec != http::error::need_buffer) rec = classify(ec);
        if (!rec) rec = drain_buffered(parser, conn.buffer);
      }
      const std::size_t got = chunk.size() - reply.body().size;
      const std::string_view whole{chunk.data(), got};
      std::span<const std::string_view> pieces;
      if (got > 0 && ctx.observer) {
        pieces = ctx.observer->on_body(whole);
      } else if (got > 0) {
        pieces = {&whole, 1};
      }
      // Before the last bytes (or a bodiless reply's header) leave.
      if (ctx.observer && parser.is_done()) ctx.observer->on_upstream_done();
      std::size_t next = 0;
      if (!header_sent) {
        header_sent = true;
        const std::string_view first = pieces.empty() ? std::string_view{} : pieces[next++];
        if (auto ec = co_await ctx.exchange.begin_stream(std::move(header), chunked, first))
          co_return AttemptResult{Outcome::kClientGone, {}, "client went away: " + ec.message(), ""};
      }
      for (; next < pieces.size(); ++next)
        if (auto ec = co_await ctx.exchange.write_body(pieces[next]))
          co_return AttemptResult{Outcome::kClientGone, {}, "client went away: " + ec.message(), ""};
      if (rec) {
        if (rec == net::asio::error::operation_aborted)
          co_return AttemptResult{Outcome::kClientGone, {}, "client went away", ""};
        const bool idle = rec == net::beast::error::timeout;
        const std::string message = idle ? "upstream " + backend.url + " went silent mid-reply"
                                         : "upstream " + backend.url + " failed mid-reply: " + rec.message();
        if (chunked && event_stream) {
          // Tell the client in its dialect and end the stream cleanly.
          (void)co_await ctx.exchange.write_body(stream_error_event(ctx.dialect, message));
          (void)co_await ctx.exchange.end_stream();
        }
        ctx.exchange.close_after();
        co_return AttemptResult{Outcome::kCutShort, http::status::bad_gateway, message,
                                idle ? "idle_timeout" : "reset"};
      }
    }
    if (ctx.observer)
      for (std::string_view piece : ctx.observer->on_end())
        if (auto ec = co_await ctx.exchange.write_body(piece))
          co_return AttemptResult{Outcome::kClientGone, {}, "client went away: " + ec.message(), ""};
    if (auto ec = co_await ctx.exchange.end_stream())
      co_return AttemptResult{Outcome::kClientGone, {}, "client went away: " + ec.message(), ""};
    if (parser.keep_alive()) ctx.pool.release(std::move(conn));
    co_return AttemptResult{Outcome::kRelayed, reply.result(), {}, {}};
  }
  co_return AttemptResult{Outcome::kRetryable, http::status::bad_gateway,
                          "upstream " + backend.url + " closed the connection", "reset"};
}

}  // namespace lmwarden::proxy
