#include "proxy/relay.h"

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/container/small_vector.hpp>
#include <charconv>
#include <concepts>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace lmwarden::proxy {
namespace {

namespace http = net::http;
using namespace std::string_view_literals;  // appended text of known length
constexpr auto kAsTuple = net::asio::as_tuple(net::asio::use_awaitable);

// RFC 9110 §7.6.1: connection-specific fields never cross the proxy.
constexpr std::array<http::field, 8> kHopByHop = {
    http::field::connection,        http::field::keep_alive,         http::field::proxy_connection,
    http::field::te,                http::field::trailer,            http::field::transfer_encoding,
    http::field::upgrade,           http::field::proxy_authorization};

// Says which fields of a message are hop-by-hop: the fixed ones and those its
// sender listed in Connection. Views into the message's fields: no copies.
class HopByHop {
 public:
  explicit HopByHop(const http::fields& fields) {
    for (auto token : http::token_list{fields[http::field::connection]}) listed_.push_back(token);
  }
  bool operator()(const http::fields::value_type& f) const {
    if (f.name() != http::field::unknown && std::ranges::find(kHopByHop, f.name()) != kHopByHop.end())
      return true;
    return std::ranges::any_of(listed_, [&](std::string_view token) {
      return net::beast::iequals(token, f.name_string());
    });
  }

 private:
  boost::container::small_vector<std::string_view, 4> listed_;
};

using net::append_field;

// A field line whose value is a number, without a temporary string.
template <std::integral Integer>
void append_field(std::string& out, std::string_view name, Integer n) {
  char digits[24];
  const auto end = std::to_chars(std::begin(digits), std::end(digits), n).ptr;
  append_field(out, name, std::string_view(digits, static_cast<std::size_t>(end - digits)));
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

// Sends the request's head and body, in as few writes as the socket allows
// (one sendmsg when it takes them at once; the wait for room, if any, is
// bounded by the connection deadline the caller armed).
net::asio::awaitable<net::beast::error_code> send_request(net::tcp::socket& socket,
                                                          std::string_view head,
                                                          std::string_view body) {
  const std::array<net::asio::const_buffer, 2> pieces{net::asio::buffer(head), net::asio::buffer(body)};
  net::beast::error_code ec;
  const std::size_t sent = net::write_now(socket, pieces, ec);
  if (ec || sent == head.size() + body.size()) co_return ec;
  net::beast::buffers_suffix<std::span<const net::asio::const_buffer>> rest(pieces);
  rest.consume(sent);
  auto [wec, n] = co_await net::asio::async_write(socket, rest, kAsTuple);
  co_return wec;
}

bool is_reset(const net::beast::error_code& ec) {
  return ec == net::asio::error::eof || ec == http::error::end_of_stream ||
         ec == net::asio::error::connection_reset || ec == net::asio::error::broken_pipe;
}

}  // namespace

void write_upstream_head(std::string& out, const net::Request& request,
                         const config::BackendConfig& backend, int rank,
                         std::string_view forwarded_for) {
  const HopByHop hop_by_hop{request};
  const bool own_key = backend.api_key_env.has_value();
  auto rewritten = [&](const http::fields::value_type& f) {
    switch (f.name()) {
      case http::field::expect:
      case http::field::host:
      case http::field::content_length:
        return true;
      case http::field::authorization:
        return own_key;
      default:
        return net::beast::iequals(f.name_string(), "X-Forwarded-For") ||
               net::beast::iequals(f.name_string(), "X-data-parallel-rank") ||
               (own_key && net::beast::iequals(f.name_string(), "x-api-key"));
    }
  };

  out.clear();
  out.append(request.method_string()).append(" "sv).append(backend.base_path);
  out.append(request.target()).append(" HTTP/1.1\r\n"sv);
  for (const auto& f : request)
    if (!hop_by_hop(f) && !rewritten(f)) append_field(out, f.name_string(), f.value());
  if (rank >= 0) append_field(out, "X-data-parallel-rank", rank);
  if (own_key) {
    const char* key = std::getenv(backend.api_key_env->c_str());
    out.append("Authorization: Bearer "sv).append(key ? key : "").append("\r\n"sv);
  }
  // Extends a chain the client (or a proxy before us) already started; the
  // values of several X-Forwarded-For fields join into one list.
  bool chain = false;
  const auto [first, last] = request.equal_range("X-Forwarded-For");
  for (auto it = first; it != last; ++it) {
    out.append(chain ? ", "sv : "X-Forwarded-For: "sv).append(it->value());
    chain = true;
  }
  if (!forwarded_for.empty())
    out.append(chain ? ", "sv : "X-Forwarded-For: "sv).append(forwarded_for);
  if (chain || !forwarded_for.empty()) out.append("\r\n"sv);
  append_field(out, "Host", backend.authority);
  // The body is held whole, so it goes with its length, never chunked; a
  // bodiless GET or HEAD gets none (as Beast's prepare_payload decides).
  const auto verb = request.method();
  if (!request.body().empty() || verb == http::verb::post || verb == http::verb::put ||
      verb == http::verb::options)
    append_field(out, "Content-Length", request.body().size());
  out.append("\r\n"sv);
}

void write_client_head(std::string& out, const http::response_header<>& reply) {
  const HopByHop hop_by_hop{reply};
  out.clear();
  net::write_status_and_fields(out, reply, [&](const http::fields::value_type& f) {
    return !hop_by_hop(f) && f.name() != http::field::content_length;
  });
}

net::asio::awaitable<AttemptResult> forward_once(AttemptContext& ctx,
                                                 const config::BackendConfig& backend, int rank,
                                                 bool may_retry) {
  using Outcome = AttemptResult::Outcome;
  const net::Request& request = ctx.exchange.request();

  // A pooled connection may have been closed by the server an instant ago; if
  // it fails before any reply byte, try once more on a fresh connection.
  for (int fresh = 0; fresh < 2; ++fresh) {
    std::optional<UpstreamConnection> idle;
    if (fresh == 0) idle = ctx.pool.take_idle(backend);
    UpstreamConnection conn;
    if (idle) {
      conn = std::move(*idle);
    } else {
      ctx.exchange.watch_client();  // connecting can take up to the connect timeout
      auto [cec, opened] = co_await ctx.pool.connect(backend, ctx.timeouts.connect);
      if (cec) {
        const bool timeout = cec == net::beast::error::timeout;
        co_return AttemptResult{Outcome::kRetryable, http::status::bad_gateway,
                                "cannot connect to " + backend.url + ": " + cec.message(),
                                timeout ? "connect_timeout" : "connect"};
      }
      conn = std::move(opened);
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
    write_upstream_head(conn.head, request, backend, rank, ctx.forwarded_for);
    const auto wec = classify(co_await send_request(upstream.socket(), conn.head, request.body()));
    if (wec == net::asio::error::operation_aborted)
      co_return AttemptResult{Outcome::kClientGone, {}, "client went away", ""};
    if (wec) {
      if (conn.reused && is_reset(wec)) continue;
      co_return AttemptResult{Outcome::kRetryable, http::status::bad_gateway,
                              "sending to " + backend.url + " failed: " + wec.message(), "reset"};
    }

    if (ctx.observer) ctx.observer->on_request_sent();
    conn.buffer.reserve(kReplyReadBytes);  // reads are sized by free capacity (512 bytes at least)
    // With other requests in progress here, the reply is read only after
    // their ready work has run: a fast server has usually answered by then,
    // and one read takes the reply instead of a read that finds nothing and
    // a wait. The client watch is started only when the reply is awaited.
    bool reply_arrived = false;
    if (ctx.exchange.others_in_progress()) {
      co_await ctx.exchange.yield_to_ready_work();
      net::beast::error_code rec;
      const std::array<net::asio::mutable_buffer, 1> into{conn.buffer.prepare(kReplyReadBytes)};
      const std::size_t n = net::read_now(upstream.socket(), into, rec);
      conn.buffer.commit(n);
      reply_arrived = n > 0;
    }
    if (!reply_arrived) ctx.exchange.watch_client();
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

    // The request head has gone: its buffer takes the reply's.
    write_client_head(conn.head, reply);
    std::optional<std::uint64_t> length;
    if (const auto declared = parser.content_length()) length = *declared;
    const bool chunked = !length && !parser.is_done();
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
        ctx.exchange.watch_client();  // more of the reply to wait for
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
        if (auto ec = co_await ctx.exchange.begin_stream(conn.head, length, chunked, first))
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
