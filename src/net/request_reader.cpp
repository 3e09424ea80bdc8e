#include "net/request_reader.h"

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <cstring>
#include <tuple>
#include <utility>

#include "common/ascii.h"
#include "net/read_available.h"

namespace lmwarden::net {
namespace {

// Room for bytes past a request body (a pipelined request), read together
// with the body's end.
constexpr std::size_t kSpillBytes = 4 * 1024;

// One read of the client under the connection deadline: nothing is read once
// the deadline has passed, and a read it cut short reads as a timeout.
template <class MutableBuffers>
Awaitable<std::pair<beast::error_code, std::size_t>> read_before_deadline(
    Socket& socket, MutableBuffers into, const ConnectionDeadline& deadline) {
  if (deadline.expired())
    co_return std::pair{beast::error_code{beast::error::timeout}, std::size_t{0}};
  auto [ec, n] = co_await async_read_available(socket, into, kAsTuple);
  if (ec == asio::error::operation_aborted && deadline.expired()) ec = beast::error::timeout;
  co_return std::pair{ec, n};
}

}  // namespace

template <bool isRequest>
beast::error_code parse_buffered_header(beast::flat_buffer& buffer,
                                        http::basic_parser<isRequest>& parser) {
  if (buffer.size() == 0) return http::error::need_more;
  beast::error_code ec;
  buffer.consume(parser.put(buffer.data(), ec));
  return ec;
}

template <bool isRequest>
Awaitable<beast::error_code> read_header(Socket& socket, beast::flat_buffer& buffer,
                                         http::basic_parser<isRequest>& parser,
                                         ConnectionDeadline& deadline) {
  for (;;) {
    auto [rec, n] =
        co_await read_before_deadline(socket, buffer.prepare(kHeaderReadBytes), deadline);
    buffer.commit(n);
    if (rec == asio::error::eof) {
      if (!parser.got_some()) co_return http::error::end_of_stream;
      beast::error_code ec;
      parser.put_eof(ec);
      co_return ec;
    }
    if (rec) co_return rec;
    if (const auto ec = parse_buffered_header(buffer, parser); ec != http::error::need_more)
      co_return ec;
  }
}

template beast::error_code parse_buffered_header(beast::flat_buffer&, http::basic_parser<true>&);
template beast::error_code parse_buffered_header(beast::flat_buffer&, http::basic_parser<false>&);
template Awaitable<beast::error_code> read_header(Socket&, beast::flat_buffer&,
                                                  http::basic_parser<true>&, ConnectionDeadline&);
template Awaitable<beast::error_code> read_header(Socket&, beast::flat_buffer&,
                                                  http::basic_parser<false>&, ConnectionDeadline&);

namespace {

// A body's storage is sized for its declared length only as its bytes come:
// at most this much past those that have arrived (and then twice what has),
// so that connections declaring large bodies they do not send hold little.
constexpr std::size_t kBodyAheadBytes = std::size_t{1} << 20;

// Moves what the buffer holds of the body (up to the body's storage) into it.
std::size_t take_into(beast::flat_buffer& buffer, Body& body, std::size_t got) {
  const std::size_t n = std::min(buffer.size(), body.size() - got);
  if (n > 0) std::memcpy(body.data() + got, buffer.data().data(), n);
  buffer.consume(n);
  return n;
}

}  // namespace

std::size_t take_buffered_body(beast::flat_buffer& buffer, Body& body, std::size_t length) {
  body.resize_for_overwrite(std::min(length, buffer.size() + kBodyAheadBytes));
  return take_into(buffer, body, 0);
}

Awaitable<beast::error_code> read_sized_body(Socket& socket, beast::flat_buffer& buffer, Body& body,
                                             std::size_t got, std::size_t length,
                                             ConnectionDeadline& deadline) {
  while (got < length) {
    if (got == body.size())
      body.resize_for_overwrite(std::min(length, got + std::max(got, kBodyAheadBytes)));
    // Bytes a read brought past the body's storage wait in the buffer.
    if (buffer.size() > 0) {
      got += take_into(buffer, body, got);
      continue;
    }
    const std::array<asio::mutable_buffer, 2> into{
        asio::buffer(body.data() + got, body.size() - got), buffer.prepare(kSpillBytes)};
    // What has already arrived (most of a large body, usually) is taken at
    // once; only a read that finds nothing waits.
    beast::error_code rec;
    std::size_t n = read_now(socket, into, rec);
    if (!rec && n == 0) std::tie(rec, n) = co_await read_before_deadline(socket, into, deadline);
    const std::size_t mine = std::min(n, body.size() - got);
    got += mine;
    buffer.commit(n - mine);
    if (rec) {
      body.resize_for_overwrite(got);  // what came, for the refusal's log line
      co_return rec == asio::error::eof ? beast::error_code(http::error::partial_message) : rec;
    }
  }
  co_return beast::error_code{};
}

Awaitable<beast::error_code> read_parsed_body(Socket& socket, beast::flat_buffer& buffer,
                                              RequestParser& parser, std::size_t max_pending,
                                              ConnectionDeadline& deadline) {
  parser.eager(true);
  beast::error_code ec;
  for (;;) {
    if (buffer.size() > 0) {
      const std::size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec && ec != http::error::need_more) co_return ec;
      ec = {};
      if (parser.is_done()) co_return ec;
      if (used > 0 && buffer.size() > 0) continue;
    }
    // What the parser left waits for the end of a size line or a trailer.
    if (buffer.size() >= max_pending) co_return http::error::buffer_overflow;
    auto [rec, n] =
        co_await read_before_deadline(socket, buffer.prepare(kHeaderReadBytes), deadline);
    buffer.commit(n);
    if (rec == asio::error::eof) {
      parser.put_eof(ec);
      if (!ec && !parser.is_done()) ec = http::error::partial_message;
      co_return ec;
    }
    if (rec) co_return rec;
  }
}

std::optional<Refusal> refuse_header(const Request& request) {
  std::size_t hosts = 0;
  bool content_length = false;
  bool transfer_encoding = false;
  // The transfer codings of every Transfer-Encoding field, in order: how
  // many, how many of them are chunked, and whether chunked is the last.
  std::size_t codings = 0;
  std::size_t chunked = 0;
  bool chunked_last = false;
  for (const FieldView f : request) {
    if (f.name() == http::field::host) ++hosts;
    if (f.name() == http::field::content_length) content_length = true;
    if (f.name() != http::field::transfer_encoding) continue;
    transfer_encoding = true;
    for (const auto coding : http::token_list{f.value()}) {
      ++codings;
      chunked_last = ascii_iequals(coding, "chunked");
      chunked += chunked_last ? 1 : 0;
    }
  }
  if (transfer_encoding) {
    if (content_length)
      return Refusal{http::status::bad_request, "request has both Content-Length and Transfer-Encoding"};
    if (request.version() < 11)
      return Refusal{http::status::bad_request, "Transfer-Encoding in an HTTP/1.0 request"};
    if (!chunked_last || chunked > 1)
      return Refusal{http::status::bad_request,
                     "Transfer-Encoding must end in chunked, once (else the body has no known length)"};
    if (codings > 1)
      return Refusal{http::status::not_implemented,
                     "unsupported transfer coding: send the body chunked, or with Content-Length"};
  }
  if (request.version() >= 11 ? hosts != 1 : hosts > 1)
    return Refusal{http::status::bad_request, "an HTTP/1.1 request needs exactly one Host field"};
  return std::nullopt;
}

}  // namespace lmwarden::net
