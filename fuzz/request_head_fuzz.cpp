// libFuzzer target: the server's request parsing (net::RequestParser into a
// net::Request, src/net/request*.{h,cpp}) against Beast's own request parser
// and message on the same bytes. Both run Beast's grammar; what is checked is
// how the warden keeps the result:
//   - the same outcome (error or not, header done, message done);
//   - the same start line, the same header fields (known name, name as
//     spelled, value) in the order received, none of a chunked body's
//     trailer, the same decoded body;
//   - Request's lookups agree with the field list;
//   - keep-alive as the parser's own flags say (for HTTP/1.0 the warden's
//     is stricter: a "close" token wins over "keep-alive");
//   - the request was reused: it held another request (with fields and a
//     chunked body) before, as a connection's request object does.
// Seeds: the client captures of ../shared/fixtures/clients as wire requests
// (fuzz/make_corpus.py), with a chunked and a bodiless variant.
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "net/request_parser.h"

namespace {

namespace http = boost::beast::http;
using lmwarden::net::Request;
using lmwarden::net::RequestParser;

// Names the property that failed, then aborts (libFuzzer saves the input).
#define check(condition)                                                  \
  do {                                                                    \
    if (!(condition)) {                                                   \
      std::fprintf(stderr, "request_head_fuzz.cpp:%d: %s\n", __LINE__, #condition); \
      std::abort();                                                       \
    }                                                                     \
  } while (0)

std::string_view view(boost::beast::string_view s) { return {s.data(), s.size()}; }

// Feeds `input` as the server does: what the parser takes, until it is done,
// stops taking, or fails.
template <class Parser>
boost::beast::error_code feed(Parser& parser, std::string_view input) {
  parser.eager(true);
  boost::beast::error_code ec;
  while (!input.empty() && !parser.is_done()) {
    const std::size_t used = parser.put(boost::asio::buffer(input.data(), input.size()), ec);
    if (ec) return ec;
    if (used == 0) break;
    input.remove_prefix(used);
  }
  return ec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  Request request;
  {
    RequestParser previous{request};
    check(!feed(previous, "POST /before HTTP/1.1\r\nX-Old: 1\r\nConnection: close\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n3\r\nold\r\n0\r\n\r\n"));
    check(previous.is_done() && request.body() == "old");
  }
  request.clear();
  RequestParser ours{request};
  http::request_parser<http::string_body> beasts;
  const auto our_ec = feed(ours, input);
  const auto beast_ec = feed(beasts, input);
  check(our_ec == beast_ec);
  check(ours.is_header_done() == beasts.is_header_done());
  check(ours.is_done() == beasts.is_done());
  if (!ours.is_header_done()) return 0;

  // The fields are the header's: ours drops a chunked body's trailer fields,
  // which Beast's message adds; a parser of Beast's that stops at the end of
  // the header gives its fields alone.
  http::request_parser<http::empty_body> head;
  head.eager(false);
  {
    std::string_view rest = input;
    boost::beast::error_code ec;
    while (!rest.empty() && !head.is_header_done() && !ec)
      rest.remove_prefix(head.put(boost::asio::buffer(rest.data(), rest.size()), ec));
    check(head.is_header_done());
  }
  const auto& message = head.get();
  check(request.method() == message.method());
  check(request.method_string() == view(message.method_string()));
  check(request.target() == view(message.target()));
  check(request.version() == message.version());
  // Ours keeps the wire order. Beast's message files a repeated name after
  // the last field of that name, so the order it would give is rebuilt from
  // ours by that rule, then compared field by field.
  std::vector<lmwarden::net::FieldView> filed;
  for (const auto& mine : request) {
    auto at = filed.end();
    for (auto i = filed.begin(); i != filed.end(); ++i)
      if (boost::beast::iequals(i->name_string(), mine.name_string())) at = i + 1;
    filed.insert(at, mine);
  }
  check(filed.size() == request.field_count());
  auto it = filed.begin();
  for (const auto& f : message) {
    check(it != filed.end());
    const auto mine = *it++;
    check(mine.name() == f.name());
    check(mine.name_string() == view(f.name_string()));
    check(mine.value() == view(f.value()));
    // A lookup by name (any case) finds the first field of that name.
    const auto found = request.find(mine.name_string());
    check(found && *found == view(message[f.name_string()]));
  }
  check(it == filed.end());
  check(!request.find("X-Old") || message.find("X-Old") != message.end());

  if (request.version() >= 11) {
    check(request.keep_alive() == ours.keep_alive());
  } else {
    check(!request.keep_alive() || ours.keep_alive());
  }
  if (ours.is_done()) check(request.body() == view(beasts.get().body()));
  return 0;
}
