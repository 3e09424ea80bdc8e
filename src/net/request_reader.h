// Reading a request off a client connection under its one deadline
// (ConnectionDeadline): the header, then a body by Content-Length straight
// into the request's string, or a chunked one through Beast's parser. The
// server's connection loop (http_server.cpp) calls these; a header or body
// already buffered is taken without a coroutine of its own. The relay reads
// an upstream reply's header with the same two header functions.
#pragma once

#include <cstddef>
#include <string>

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

// Sizes `body` for `length` bytes (its Content-Length) and starts it with
// what the buffer holds; returns how many bytes that was.
std::size_t take_buffered_body(beast::flat_buffer& buffer, Body& body, std::size_t length);

// Reads the rest of a body that take_buffered_body started with `got` bytes
// straight into it; bytes past its end stay in the buffer.
Awaitable<beast::error_code> read_sized_body(Socket& socket, beast::flat_buffer& buffer, Body& body,
                                             std::size_t got, std::size_t length,
                                             ConnectionDeadline& deadline);

// Reads a body without a Content-Length (chunked) through the parser.
Awaitable<beast::error_code> read_parsed_body(Socket& socket, beast::flat_buffer& buffer,
                                              RequestParser& parser, ConnectionDeadline& deadline);

// A request whose framing could be read two ways (both Content-Length and
// Transfer-Encoding) is the classic smuggling vector: refuse it outright.
bool ambiguous_framing(const RequestParser& parser);

}  // namespace lmwarden::net
