#include "proxy/relay.h"

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/container/small_vector.hpp>
#include <charconv>
#include <chrono>
#include <concepts>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "common/ascii.h"
#include "common/coarse_clock.h"
#include "net/field_lookup.h"
#include "net/read_available.h"
#include "net/request_reader.h"

namespace lmwarden::proxy {
namespace {

namespace http = net::http;
using namespace std::string_view_literals;  // appended text of known length

// RFC 9110 §7.6.1: connection-specific fields never cross the proxy.
constexpr std::array<http::field, 8> kHopByHop = {
    http::field::connection,        http::field::keep_alive,         http::field::proxy_connection,
    http::field::te,                http::field::trailer,            http::field::transfer_encoding,
    http::field::upgrade,           http::field::proxy_authorization};

// Calls `f` with each name the message's Connection fields list (RFC 9110
// §7.6.1), until it returns true; whether it did. `Fields`: a Request's or a
// ReplyParser's.
template <class Fields, class F>
bool any_connection_token(const Fields& fields, F&& f) {
  for (const auto& field : fields)
    if (field.name() == http::field::connection)
      for (auto token : http::token_list{field.value()})
        if (f(std::string_view(token))) return true;
  return false;
}

// Says which fields of a message are hop-by-hop: the fixed ones and those its
// sender listed in Connection (in any of its Connection fields). Views into
// the message's fields: no copies, for the few names a Connection field lists
// (close, keep-alive, Upgrade). Past kFewListed, the names are kept
// lowercased in a hashed set: compared one by one with every field, a
// header of thousands of each took the I/O thread for over a second
// (quadratic: 1.33 s for 16,000 names and 8,000 fields).
// `Fields`: a Request's or a ReplyParser's.
class HopByHop {
 public:
  template <class Fields>
  explicit HopByHop(const Fields& fields) {
    any_connection_token(fields, [this](std::string_view token) {
      list(token);
      return false;
    });
  }
  template <class Field>
  bool operator()(const Field& f) const {
    if (f.name() != http::field::unknown && std::ranges::find(kHopByHop, f.name()) != kHopByHop.end())
      return true;
    if (many_) return many_->contains(ascii_lowercase(f.name_string()));
    return std::ranges::any_of(
        listed_, [&](std::string_view token) { return ascii_iequals(token, f.name_string()); });
  }

 private:
  static constexpr std::size_t kFewListed = 16;

  void list(std::string_view token) {
    if (!many_ && listed_.size() < kFewListed) {
      listed_.push_back(token);
      return;
    }
    if (!many_) {
      many_.emplace();
      for (std::string_view t : listed_) many_->insert(ascii_lowercase(t));
      listed_.clear();
    }
    many_->insert(ascii_lowercase(token));
  }

  boost::container::small_vector<std::string_view, 4> listed_;
  std::optional<std::unordered_set<std::string>> many_;
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
constexpr int kMaxInterimReplies = 8;  // 1xx replies before the final one
// A pooled connection that ends with no reply byte this soon after the
// request went out was most likely closed by its server as idle, as the
// request was on its way (a keep-alive timeout): the request goes again on a
// fresh connection. One that ends later was closed by a server that had the
// request, which may have worked on it: a failure of the attempt, retried
// elsewhere only as `retries` allows.
constexpr auto kIdleCloseWindow = std::chrono::milliseconds(100);

// Parses what is buffered into the body buffer (all the chunks of a chunked
// reply that have arrived: each one SSE event from vLLM), so that events that
// arrived together leave in one write instead of one write (and one timer)
// each. Stops at a partial chunk, a full body buffer or the end of the reply;
// a parse error is returned as the read's error.
net::beast::error_code drain_buffered(ReplyParser& parser, net::beast::flat_buffer& buffer) {
  while (!parser.is_done() && buffer.size() > 0 && parser.body_room() > 0) {
    net::beast::error_code ec;
    const std::size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (!ec) {
      if (used == 0) break;
      continue;
    }
    if (ec == http::error::need_more || ec == http::error::need_buffer) break;
    return ec;
  }
  return {};
}

// Sends the request's head and body, in as few writes as the socket allows
// (one sendmsg when it takes them at once; the wait for room, if any, is
// bounded by the connection deadline the caller armed).
net::Awaitable<net::beast::error_code> send_request(net::Socket& socket, std::string_view head,
                                                    std::string_view body) {
  const std::array<net::asio::const_buffer, 2> pieces{net::asio::buffer(head), net::asio::buffer(body)};
  net::beast::error_code ec;
  const std::size_t sent = net::write_now(socket, pieces, ec);
  if (ec || sent == head.size() + body.size()) co_return ec;
  net::beast::buffers_suffix<std::span<const net::asio::const_buffer>> rest(pieces);
  rest.consume(sent);
  auto [wec, n] = co_await net::asio::async_write(socket, rest, net::kAsTuple);
  co_return wec;
}

// Takes what the socket holds now into the reply buffer, without waiting:
// the bytes taken (0 when nothing has come).
std::size_t take_what_came(net::Socket& socket, net::beast::flat_buffer& buffer,
                           net::beast::error_code& ec) {
  const std::array<net::asio::mutable_buffer, 1> into{buffer.prepare(kReplyReadBytes)};
  const std::size_t got = net::read_now(socket, into, ec);
  buffer.commit(got);
  return got;
}

// Whether the server sent anything before the reset that ended the request's
// send: taken into the buffer, it is read as the reply.
bool answered_early(net::Socket& socket, net::beast::flat_buffer& buffer) {
  net::beast::error_code ignored;
  return take_what_came(socket, buffer, ignored) > 0;
}

void append_text(std::string& out, std::string_view text) {
  out.append(text);
}
void append_text(std::string& out, unsigned n) {
  out.append(std::to_string(n));
}

// An attempt's result, its message the parts of `text` joined, then ": " and
// the error's message when there is one. A plain function, so that building
// the message takes no room in the relay's coroutine frame.
template <class... Text>
AttemptResult attempt_result(AttemptResult::Outcome outcome, http::status status,
                             std::string_view kind, const net::beast::error_code& ec,
                             const Text&... text) {
  std::string message;
  (append_text(message, text), ...);
  if (ec) message.append(": "sv).append(ec.message());
  return {outcome, status, std::move(message), std::string(kind)};
}

// A connection to the backend that could not be opened. Refused, unroutable
// and timed-out connects say the server is not there; a local shortage (no
// free descriptor or port) or a name that did not resolve says nothing about
// the server itself.
AttemptResult connect_failure(const config::BackendConfig& backend,
                              const net::beast::error_code& ec) {
  const bool timed_out = ec == net::beast::error::timeout;
  AttemptResult result = attempt_result(
      AttemptResult::Outcome::kRetryable, http::status::bad_gateway,
      timed_out ? "connect_timeout"sv : "connect"sv, ec, "cannot connect to "sv, backend.url);
  result.server_unreachable = timed_out || ec == net::asio::error::connection_refused ||
                              ec == net::asio::error::host_unreachable ||
                              ec == net::asio::error::network_unreachable ||
                              ec == net::asio::error::timed_out;
  return result;
}

AttemptResult client_gone(const net::beast::error_code& ec = {}) {
  return attempt_result(AttemptResult::Outcome::kClientGone, {}, "", ec, "client went away"sv);
}

bool is_reset(const net::beast::error_code& ec) {
  return ec == net::asio::error::eof || ec == http::error::end_of_stream ||
         ec == net::asio::error::connection_reset || ec == net::asio::error::broken_pipe;
}

bool cutting(const AttemptContext& ctx) { return ctx.cutting && ctx.cutting->load(); }

// An upstream operation's error, as the relay reports it: the client gone
// (operation_aborted), the warden cutting its requests at the end of its
// shutdown (shut_down), or a timeout.
net::beast::error_code classify(AttemptContext& ctx, net::beast::error_code ec) {
  if (ec && ctx.exchange.client_gone())
    ec = net::asio::error::operation_aborted;
  else if (ec && cutting(ctx))
    ec = net::asio::error::shut_down;
  else if (ec && ctx.exchange.deadline().expired())
    ec = net::beast::error::timeout;
  return ec;
}

// What a client whose request the shutdown cut is told, before or after its
// reply began.
constexpr std::string_view kShutdownMessage =
    "the warden is shutting down and its grace period ended before this reply did; send the "
    "request again";

// A request the shutdown cut before any of its reply reached the client.
AttemptResult cut_by_shutdown() {
  return attempt_result(AttemptResult::Outcome::kFailed, http::status::service_unavailable,
                        kShutdownKind, {}, kShutdownMessage);
}

// Where a relayed reply stands when it is cut short.
struct Relayed {
  bool body_started = false;  // some of the body has come (else: the first-byte wait)
  bool at_event_end = true;   // what went to the client ends an SSE event (or is nothing)
};

// The upstream failed (or went silent) after the reply started: a streamed
// reply is ended cleanly with an error event in the client's dialect, and the
// client connection closes after it. The observer holds an event's bytes
// until it is whole, so the client has whole events only; but one too long to
// hold went out as it came, and if the upstream left it half sent it is ended
// first, so that the error event is an event of its own.
net::Awaitable<AttemptResult> cut_short(AttemptContext& ctx, const config::BackendConfig& backend,
                                        net::beast::error_code ec, bool event_stream,
                                        Relayed relayed) {
  using Outcome = AttemptResult::Outcome;
  AttemptResult result =
      ec == net::asio::error::shut_down
          ? attempt_result(Outcome::kCutShort, http::status::service_unavailable, kShutdownKind, {},
                           kShutdownMessage)
      : ec != net::beast::error::timeout
          ? attempt_result(Outcome::kCutShort, http::status::bad_gateway, "reset", ec, "upstream "sv,
                           backend.url, " failed mid-reply"sv)
      : relayed.body_started
          ? attempt_result(Outcome::kCutShort, http::status::gateway_timeout, "idle_timeout", {},
                           "upstream "sv, backend.url, " went silent mid-reply"sv)
          : attempt_result(Outcome::kCutShort, http::status::gateway_timeout, "first_byte_timeout",
                           {}, "upstream "sv, backend.url,
                           " sent its reply header but no body within the first-byte timeout"sv);
  if (ctx.observer) ctx.observer->on_cut_short(result.error_kind);
  if (event_stream) {
    if (!relayed.at_event_end) (void)co_await ctx.exchange.write_body("\n\n"sv);
    (void)co_await ctx.exchange.write_body(stream_error_event(
        ctx.dialect, result.status, result.message, path_of(ctx.exchange.request().target())));
    (void)co_await ctx.exchange.end_stream();
  }
  ctx.exchange.close_after();
  co_return result;
}

// Whether the bytes sent so far, ending with `pieces`, end an SSE event with
// a blank line (LF LF, as vLLM writes them); `before`: whether those before
// did. A stream whose lines end in CR LF reads as not ending one: the blank
// line cut_short then adds is harmless after a whole event.
bool ends_event(std::span<const std::string_view> pieces, bool before) {
  // The last two bytes, across pieces; a blank piece changes nothing.
  char last[2] = {before ? '\n' : 'x', before ? '\n' : 'x'};
  for (const std::string_view piece : pieces) {
    if (piece.size() >= 2) {
      last[0] = piece[piece.size() - 2];
      last[1] = piece.back();
    } else if (piece.size() == 1) {
      last[0] = last[1];
      last[1] = piece.back();
    }
  }
  return last[0] == '\n' && last[1] == '\n';
}

// Relays the reply whose header conn's parser has read: head and body go to
// the client as they arrive, through the observer. Then the connection goes
// back to the pool if both sides keep it alive. (Apart from forward_once so
// that each coroutine frame holds only its own part's locals: GCC gives every
// local of a coroutine a slot in its frame, allocated per request.)
net::Awaitable<AttemptResult> relay_reply(AttemptContext& ctx, const config::BackendConfig& backend,
                                          UpstreamConnection& conn, unsigned status) {
  auto& parser = *conn.reader->parser;
  auto& upstream = conn.stream->socket();
  // The request head has gone: its buffer takes the reply's. The header's
  // views into conn.buffer are read here, before the buffer takes more.
  write_client_head(conn.head, parser);
  std::optional<std::uint64_t> length;
  // A 204 has no body, whatever length it declares (RFC 9110 §8.6: it must
  // declare none, and nginx drops one): relayed without framing fields.
  if (const auto declared = parser.content_length(); declared && status != 204) length = *declared;
  const bool chunked = !length && !parser.is_done();
  const std::string_view content_type =
      net::first_value(parser.fields(), http::field::content_type);
  const bool event_stream = content_type.starts_with("text/event-stream");
  if (ctx.observer) ctx.observer->on_response_header(status, content_type, chunked);
  // First pass: no read; the body bytes that came with the header (all of
  // a small reply) leave with it in one write. Then each pass relays what
  // is buffered (what a full chunk left over), or else reads the socket once
  // and relays what that brought. The socket is read directly, not with
  // Beast's http::async_read_some, whose composed operation costs more than
  // the read itself when events arrive back to back; and with
  // async_read_available, so that after a read that emptied the socket the
  // next one waits for the next event without a recv that finds nothing.
  const std::span<char> chunk{conn.reader->chunk};
  // Each put() decodes all that is buffered, chunk after chunk, until the
  // body buffer is full, rather than one chunk header or one chunk's data
  // per call.
  parser.eager(true);
  bool header_sent = false;
  Relayed relayed;
  for (;;) {
    parser.body_buffer(chunk.data(), chunk.size());
    if (header_sent && parser.is_done()) break;
    net::beast::error_code rec;
    if (!parser.is_done()) rec = drain_buffered(parser, conn.buffer);
    if (header_sent && !rec && !parser.is_done() && parser.body_room() == chunk.size()) {
      ctx.exchange.watch_client();  // more of the reply to wait for
      // A streamed reply's header comes at once; its first event after the
      // engine's queue and prefill, which the first-byte timeout is for: what
      // is left of it since the request was sent.
      if (relayed.body_started) {
        ctx.exchange.deadline().arm(upstream, ctx.timeouts.idle,
                                    net::ConnectionDeadline::OnExpiry::kClose);
      } else {
        ctx.exchange.deadline().arm_until(upstream, ctx.first_byte_due,
                                          net::ConnectionDeadline::OnExpiry::kClose);
      }
      auto [ec, rn] = co_await net::async_read_available(
          upstream, conn.buffer.prepare(kReplyReadBytes), net::kAsTuple);
      ctx.exchange.deadline().disarm();
      conn.buffer.commit(rn);
      // A reply delimited by the close ends here; one with a length or
      // chunks that is not complete is cut short (partial_message).
      if (ec && ec == net::asio::error::eof) parser.put_eof(ec);
      rec = classify(ctx, ec);
      if (!rec) rec = drain_buffered(parser, conn.buffer);
    }
    const std::size_t got = chunk.size() - parser.body_room();
    const std::string_view whole{chunk.data(), got};
    if (got > 0) relayed.body_started = true;
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
        co_return client_gone(ec);
    }
    // The pieces leave in one gathered write (one chunk) where the socket
    // takes them at once (the usual case), without a coroutine frame of
    // their own; only a slow client's rest is awaited.
    while (next < pieces.size()) {
      const auto some = pieces.subspan(next, std::min(pieces.size() - next, net::Exchange::kMaxBodyPieces));
      next += some.size();
      net::beast::error_code wec;
      if (!ctx.exchange.write_body_now(some, wec)) wec = co_await ctx.exchange.write_rest();
      if (wec) co_return client_gone(wec);
    }
    if (event_stream && !pieces.empty()) relayed.at_event_end = ends_event(pieces, relayed.at_event_end);
    if (rec && rec == net::asio::error::operation_aborted) co_return client_gone();
    if (rec) co_return co_await cut_short(ctx, backend, rec, chunked && event_stream, relayed);
  }
  if (ctx.observer)
    for (std::string_view piece : ctx.observer->on_end())
      if (auto ec = co_await ctx.exchange.write_body(piece)) co_return client_gone(ec);
  {
    net::beast::error_code ec;
    if (!ctx.exchange.end_stream_now(ec)) ec = co_await ctx.exchange.write_rest();
    if (ec) co_return client_gone(ec);
  }
  const bool keep_alive = parser.keep_alive();
  conn.reader->parser.reset();
  if (keep_alive) ctx.pool.release(conn);
  co_return AttemptResult{
      AttemptResult::Outcome::kRelayed, static_cast<http::status>(status), {}, {}};
}

// Whether a reply's body is framed as the relay can pass it on: by its length,
// by the close, or by chunks alone. A Transfer-Encoding with another coding
// (gzip, …) would reach the client coded with nothing saying so, once the
// field is dropped as hop-by-hop; one beside a Content-Length is the
// ambiguity RFC 9112 §6.3 says to treat as an error.
bool framed_plainly(const ReplyParser& reply) {
  int codings = 0;
  bool chunked_only = true;
  for (const auto& f : reply.fields())
    if (f.name() == http::field::transfer_encoding)
      for (auto coding : http::token_list{f.value()}) {
        ++codings;
        chunked_only = chunked_only && ascii_iequals(coding, "chunked");
      }
  return codings == 0 || (codings == 1 && chunked_only && !reply.content_length());
}

}  // namespace

bool named_in_connection(const net::Request& request, std::string_view name) {
  return any_connection_token(
      request, [name](std::string_view token) { return ascii_iequals(token, name); });
}

void write_upstream_head(std::string& out, const net::Request& request,
                         const config::BackendConfig& backend, int rank,
                         std::string_view forwarded_for, std::string_view request_id) {
  const HopByHop hop_by_hop{request};
  const bool own_key = backend.api_key_env.has_value();
  auto rewritten = [&](const net::FieldView& f) {
    switch (f.name()) {
      case http::field::expect:
      case http::field::host:
      case http::field::content_length:
        return true;
      case http::field::authorization:
        return own_key;
      default:
        return ascii_iequals(f.name_string(), "X-data-parallel-rank") ||
               (own_key && ascii_iequals(f.name_string(), "x-api-key")) ||
               (!request_id.empty() && ascii_iequals(f.name_string(), "X-Request-Id"));
    }
  };

  out.clear();
  net::append_all(out, request.method_string(), " "sv, backend.base_path, request.target(),
                  " HTTP/1.1\r\n"sv);
  // X-Forwarded-For values the client (or a proxy before us) sent, in order:
  // the chain this hop extends.
  boost::container::small_vector<std::string_view, 2> chain;
  for (const auto& f : request) {
    if (hop_by_hop(f)) continue;
    if (f.name() == http::field::unknown && ascii_iequals(f.name_string(), "X-Forwarded-For"))
      chain.push_back(f.value());
    else if (!rewritten(f))
      append_field(out, f.name_string(), f.value());
  }
  if (rank >= 0) append_field(out, "X-data-parallel-rank", rank);
  if (own_key) net::append_all(out, "Authorization: Bearer "sv, backend.api_key, "\r\n"sv);
  // Several X-Forwarded-For fields join into one list.
  if (!forwarded_for.empty()) chain.push_back(forwarded_for);
  for (std::size_t i = 0; i < chain.size(); ++i)
    net::append_all(out, i == 0 ? "X-Forwarded-For: "sv : ", "sv, chain[i]);
  if (!chain.empty()) out.append("\r\n"sv);
  if (!request_id.empty()) append_field(out, "X-Request-Id", request_id);
  append_field(out, "Host", backend.authority);
  // The body is held whole, so it goes with its length, never chunked; a
  // bodiless GET or HEAD gets none (as Beast's prepare_payload decides).
  const auto verb = request.method();
  if (!request.body().empty() || verb == http::verb::post || verb == http::verb::put ||
      verb == http::verb::options)
    append_field(out, "Content-Length", request.body().size());
  out.append("\r\n"sv);
}

void write_client_head(std::string& out, const ReplyParser& reply) {
  const HopByHop hop_by_hop{reply.fields()};
  out.clear();
  net::write_status_and_fields(out, reply.status(), reply.reason(), reply.fields(),
                               [&](const ReplyParser::Field& f) {
                                 return !hop_by_hop(f) && f.name() != http::field::content_length;
                               });
}

net::Awaitable<AttemptResult> forward_once(AttemptContext& ctx,
                                           const config::BackendConfig& backend, int rank,
                                           const RetryElsewhere& retry_elsewhere) {
  using Outcome = AttemptResult::Outcome;
  const net::Request& request = ctx.exchange.request();

  // A pooled connection may have been closed by the server an instant ago; if
  // it fails before any reply byte, try once more on a fresh connection.
  for (int fresh = 0; fresh < 2; ++fresh) {
    if (cutting(ctx)) co_return cut_by_shutdown();  // no new connection once cutting
    UpstreamConnection conn;
    struct LiveGuard {
      UpstreamConnection** slot;
      ~LiveGuard() {
        if (slot) *slot = nullptr;
      }
    } live{ctx.live_upstream};
    if (ctx.live_upstream) *ctx.live_upstream = &conn;
    net::beast::error_code cec;
    if (fresh > 0 || !ctx.pool.take_idle(backend, conn)) {
      ctx.exchange.watch_client();  // connecting can take up to the connect timeout
      cec = co_await ctx.pool.connect(backend, ctx.timeouts.connect, conn);
    }
    // Before the connect's own error: the client's leaving or the shutdown's
    // cut may be what closed it.
    if (ctx.exchange.client_gone()) co_return client_gone();
    if (cutting(ctx)) co_return cut_by_shutdown();
    if (cec) co_return connect_failure(backend, cec);
    auto& upstream = *conn.stream;

    // Upstream timeouts run on the client connection's one deadline (no timer
    // armed per read); it closes this socket when they pass. Armed only while
    // an upstream operation is pending, so a slow client write never counts
    // as upstream silence.
    struct Disarm {
      net::ConnectionDeadline& deadline;
      ~Disarm() { deadline.disarm(); }
    } disarm{ctx.exchange.deadline()};

    ctx.first_byte_due = ctx.exchange.deadline().arm(upstream.socket(), ctx.timeouts.first_byte,
                                                     net::ConnectionDeadline::OnExpiry::kClose);
    write_upstream_head(conn.head, request, backend, rank, ctx.forwarded_for, ctx.request_id);
    const auto wec =
        classify(ctx, co_await send_request(upstream.socket(), conn.head, request.body()));
    if (wec == net::asio::error::operation_aborted) co_return client_gone();
    if (wec == net::asio::error::shut_down) co_return cut_by_shutdown();
    // A server may answer before it has read the whole body, and close (an
    // nginx in front of vLLM refusing a body over its limit does): the close
    // with the body unread resets the send, and the answer, which came before
    // the reset, is the reply.
    if (wec && !(is_reset(wec) && answered_early(upstream.socket(), conn.buffer))) {
      if (conn.reused && is_reset(wec)) continue;
      co_return attempt_result(Outcome::kRetryable, http::status::bad_gateway, "reset", wec,
                               "sending to "sv, backend.url, " failed"sv);
    }
    conn.broken = wec.failed();  // the reply is read from a reset connection
    // The coarse clock, as the request path's other stamps: a tick is far
    // under the window.
    const auto sent_at =
        conn.reused ? coarse_steady_now() : std::chrono::steady_clock::time_point{};

    if (ctx.observer) ctx.observer->on_request_sent();
    conn.buffer.reserve(kReplyReadBytes);  // reads are sized by free capacity (512 bytes at least)
    // With other requests in progress here, the reply is read only after
    // their ready work has run: a fast server has usually answered by then,
    // and one read takes the reply instead of a read that finds nothing and
    // a wait. That look is taken while looks on this thread find replies
    // (ReplyLook); a slow server's requests go straight to the waiting read.
    // A header that has arrived whole is parsed at once; only one still on
    // its way is read (and the client watched meanwhile), with the server's
    // header reader rather than Beast's async_read_header, a composed
    // operation whose completion waits a turn of the event loop.
    if (ctx.exchange.others_in_progress()) {
      co_await ctx.exchange.yield_to_ready_work();
      if (ctx.pool.reply_look().wanted()) {
        net::beast::error_code rec;
        const std::size_t got = take_what_came(upstream.socket(), conn.buffer, rec);
        if (!rec) ctx.pool.reply_look().record(got > 0);
      }
    }
    if (!conn.reader) conn.reader = std::make_unique<ReplyReader>();
    // Interim replies (1xx but 101: 100 Continue, 103 Early Hints) are
    // dropped, and the final one that follows is read in their place (RFC
    // 9110 §15.2), within the same first-byte timeout. A few at most.
    net::beast::error_code hec0;
    bool interim_seen = false;  // then the server has the request: never sent again
    for (int interim = 0;; ++interim) {
      auto& parser = conn.reader->parser.emplace();
      parser.body_limit(boost::none);  // replies stream for as long as they need
      hec0 = net::parse_buffered_header(conn.buffer, parser);
      if (hec0 == http::error::need_more) {
        ctx.exchange.watch_client();
        hec0 = co_await net::read_header(upstream.socket(), conn.buffer, parser,
                                         ctx.exchange.deadline());
      }
      if (!hec0 && parser.status() >= 200 && !framed_plainly(parser))
        hec0 = http::error::bad_transfer_encoding;
      if (hec0 || parser.status() >= 200) break;
      // A switch of protocols the warden never asked for (it sends no
      // Upgrade; RFC 9110 §15.2.2): a bad reply, and the connection closed.
      if (parser.status() == 101) {
        hec0 = http::error::bad_status;
        break;
      }
      interim_seen = true;
      if (interim == kMaxInterimReplies) {
        hec0 = http::error::bad_status;  // an endless stream of them: a bad reply
        break;
      }
    }
    ctx.exchange.deadline().disarm();
    auto& parser = *conn.reader->parser;
    const auto hec = classify(ctx, hec0);
    if (hec) {
      const bool nothing_came = is_reset(hec) && conn.buffer.size() == 0 && !interim_seen;
      if (nothing_came && conn.reused && coarse_steady_now() - sent_at < kIdleCloseWindow) continue;
      if (hec == net::beast::error::timeout)
        co_return attempt_result(Outcome::kFailed, http::status::gateway_timeout,
                                 "first_byte_timeout", {}, "upstream "sv, backend.url,
                                 " sent no reply within the first-byte timeout"sv);
      if (hec == net::asio::error::operation_aborted) co_return client_gone();
      if (hec == net::asio::error::shut_down) co_return cut_by_shutdown();
      if (nothing_came)
        co_return attempt_result(Outcome::kRetryable, http::status::bad_gateway, "protocol", hec,
                                 "upstream "sv, backend.url,
                                 " closed the connection without a reply"sv);
      co_return attempt_result(Outcome::kRetryable, http::status::bad_gateway, "protocol", hec,
                               "bad reply from "sv, backend.url);
    }
    const unsigned status = parser.status();
    if (status >= 500 && retry_elsewhere()) {
      co_return attempt_result(Outcome::kRetryable, http::status::bad_gateway, "status_5xx", {},
                               "upstream "sv, backend.url, " answered "sv, status);
    }

    co_return co_await relay_reply(ctx, backend, conn, status);
  }
  co_return attempt_result(Outcome::kRetryable, http::status::bad_gateway, "reset", {},
                           "upstream "sv, backend.url, " closed the connection"sv);
}

}  // namespace lmwarden::proxy
