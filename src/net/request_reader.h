// Reading a request off a client connection under its one deadline
// (ConnectionDeadline): the header, then a body by Content-Length straight
// into the request's string, or a chunked one through Beast's parser. The
// server's connection loop (http_server.cpp) calls these; a header or body
// already buffered is taken without a coroutine of its own. The relay reads
// an upstream reply's header with the same two header functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "net/http_server.h"
#include "net/request_parser.h"

namespace lmwarden::net {


// Bytes asked of the socket per read of a request header (and by the client
// watch): a usual header and the start of its body come in one read.
inline constexpr std::size_t kHeaderReadBytes = 16 * 1024;

// Parses the header bytes already buffered: need_more when it is not all there.
// For a request's parser or a reply's (instantiated for both).
template <bool isRequest>
beast::error_code parse_buffered_header(beast::flat_buffer& buffer,
                                        http::basic_parser<isRequest>& parser);

// Reads until `parser` holds a whole header (Beast's async_read_header, with
// the connection deadline instead of a timer per read, and no composed
// operation). Called once parse_buffered_header said need_more. The end of
// the connection before any byte is end_of_stream; after some, partial_message.
template <bool isRequest>
Awaitable<beast::error_code> read_header(Socket& socket, beast::flat_buffer& buffer,
                                         http::basic_parser<isRequest>& parser,
                                         ConnectionDeadline& deadline);

// Starts `body`, of `length` bytes (its Content-Length), with what the buffer
// holds; returns how many bytes that was. Its storage grows with the bytes
// that come, not at once to `length`.
std::size_t take_buffered_body(beast::flat_buffer& buffer, Body& body, std::size_t length);

// Reads the rest of a body that take_buffered_body started with `got` bytes
// straight into it; bytes past its end stay in the buffer. Leaves body.size()
// == `length` when it succeeds.
Awaitable<beast::error_code> read_sized_body(Socket& socket, beast::flat_buffer& buffer, Body& body,
                                             std::size_t got, std::size_t length,
                                             ConnectionDeadline& deadline);

// Reads a body without a Content-Length (chunked) through the parser. Beast
// bounds the decoded body (body_limit) but not a chunk's size line, its
// extensions or the trailer fields: the bytes waiting for the parser are
// bounded here, by `max_pending`, and more is buffer_overflow.
Awaitable<beast::error_code> read_parsed_body(Socket& socket, beast::flat_buffer& buffer,
                                              RequestParser& parser, std::size_t max_pending,
                                              ConnectionDeadline& deadline);

// Why a parsed request header cannot be served (the reply, after which the
// connection is closed), or nothing when it can. Beast's parser refuses a
// malformed or conflicting Content-Length, and a Transfer-Encoding next to
// one in most orders; left to the server are the framings it would read
// another way than the next hop (request smuggling: a Transfer-Encoding whose
// last coding is not chunked is read by Beast as no body at all, leaving the
// body to be read as the next request) and RFC 9112's rules on Host.
struct Refusal {
  http::status status;
  std::string_view message;
};
std::optional<Refusal> refuse_header(const Request& request);

}  // namespace lmwarden::net
