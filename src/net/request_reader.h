// Reading a request off a client connection under its one deadline
// (ConnectionDeadline): the header, then a body by Content-Length straight
// into the request's string, or a chunked one through Beast's parser. The
// server's connection loop (http_server.cpp) calls these; a header or body
// already buffered is taken without a coroutine of its own. The relay reads
// an upstream reply's header with the same two header functions.
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <cstddef>
#include <string>

#include "net/http_server.h"
#include "net/request.h"

namespace lmwarden::net {

// Beast's HTTP/1.1 request parser, writing into a Request (which the server
// keeps per connection): the start line and each field as they are parsed,
// and a body the parser decodes (a chunked one) into the request's body.
// A body with a Content-Length is read past the parser (read_sized_body).
class RequestParser final : public http::basic_parser<true> {
 public:
  explicit RequestParser(Request& into) noexcept : request_(into) {}
  Request& get() noexcept { return request_; }
  const Request& get() const noexcept { return request_; }

 private:
  using string_view = beast::string_view;
  static std::string_view view(string_view s) noexcept { return {s.data(), s.size()}; }

  void on_request_impl(http::verb method, string_view method_string, string_view target,
                       int version, beast::error_code&) override {
    request_.set_start_line(method, view(method_string), view(target),
                            static_cast<unsigned>(version));
  }
  void on_response_impl(int, string_view, int, beast::error_code&) override {}
  void on_field_impl(http::field name, string_view name_string, string_view value,
                     beast::error_code&) override {
    request_.insert(name, view(name_string), view(value));
  }
  void on_header_impl(beast::error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, beast::error_code&) override {}
  std::size_t on_body_impl(string_view body, beast::error_code&) override {
    request_.body().append(body.data(), body.size());
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, string_view, beast::error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, beast::error_code&) override {
    request_.body().append(body.data(), body.size());
    return body.size();
  }
  void on_finish_impl(beast::error_code&) override {}

  Request& request_;
};

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
asio::awaitable<beast::error_code> read_header(tcp::socket& socket, beast::flat_buffer& buffer,
                                               http::basic_parser<isRequest>& parser,
                                               ConnectionDeadline& deadline);

// Starts a body of `length` bytes (its Content-Length) with what the buffer
// holds; returns how many bytes that was. The body's string gets
// kBodyPadding bytes of room past its end.
std::size_t take_buffered_body(beast::flat_buffer& buffer, std::string& body, std::size_t length);

// Reads the rest of a body that take_buffered_body started with `got` bytes
// straight into it; bytes past its end stay in the buffer.
asio::awaitable<beast::error_code> read_sized_body(tcp::socket& socket, beast::flat_buffer& buffer,
                                                   std::string& body, std::size_t got,
                                                   std::size_t length,
                                                   ConnectionDeadline& deadline);

// Reads a body without a Content-Length (chunked) through the parser.
asio::awaitable<beast::error_code> read_parsed_body(tcp::socket& socket, beast::flat_buffer& buffer,
                                                    RequestParser& parser,
                                                    ConnectionDeadline& deadline);

// A request whose framing could be read two ways (both Content-Length and
// Transfer-Encoding) is the classic smuggling vector: refuse it outright.
bool ambiguous_framing(const RequestParser& parser);

}  // namespace lmwarden::net
