// The parser that fills the server's Request: Beast's HTTP/1.1 request
// parser (its grammar, limits and framing checks), with the message kept our
// way. Apart from the server's I/O so that a fuzz target can drive it alone.
#pragma once

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/ascii.h"
#include "net/request.h"

namespace lmwarden::net {

namespace beast = boost::beast;

// A request target in absolute form ("http://host:8080/v1/models?x=1", as a
// client configured to use the warden as an HTTP proxy sends it) as its
// origin form ("/v1/models?x=1"), which a server must accept (RFC 9112
// 3.2.2) and the warden routes and forwards by; `scratch` holds it when it
// is not a part of `target` (no path: "http://host?x" is "/?x"). Any other
// target is returned as it is.
inline std::string_view origin_form(std::string_view target, std::string& scratch) {
  if (target.empty() || target.front() == '/') return target;  // origin form: nearly every request
  constexpr std::string_view kSchemes[] = {"http://", "https://"};
  for (const std::string_view scheme : kSchemes) {
    if (target.size() <= scheme.size() || !ascii_istarts_with(target, scheme)) continue;
    const std::string_view rest = target.substr(scheme.size());
    const auto path = rest.find_first_of("/?#");
    if (path == 0) return target;  // no authority: not a URI a server is sent
    if (path == std::string_view::npos) return "/";
    if (rest[path] == '/') return rest.substr(path);
    scratch.assign("/").append(rest.substr(path));
    return scratch;
  }
  return target;
}

// Beast's HTTP/1.1 request parser, writing into a Request (which the server
// keeps per connection): the start line and each field as they are parsed,
// and a body the parser decodes (a chunked one) into the request's body.
// A body with a Content-Length is read past the parser (read_sized_body).
// The trailer fields of a chunked body are parsed (so that a malformed one
// is refused) and dropped, as nginx drops them: fields that came after the
// header were never seen by the checks the header gets (API key, refused
// fields, session id, rank), and are not forwarded.
class RequestParser final : public http::basic_parser<true> {
 public:
  static constexpr std::uint64_t kNoDeclaredLength = UINT64_MAX;

  explicit RequestParser(Request& into) noexcept : request_(into) {}
  Request& get() noexcept { return request_; }
  const Request& get() const noexcept { return request_; }
  // Once the head is parsed: the body length its Content-Length declared,
  // or kNoDeclaredLength (a chunked body, or none). Beast's content_length()
  // returns a boost::optional whose `none` GCC 12 takes for uninitialized
  // wherever the call is inlined (a false warning, silenced here).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
  std::uint64_t declared_length() const noexcept {
    return content_length().value_or(kNoDeclaredLength);
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

 private:
  using string_view = beast::string_view;
  static std::string_view view(string_view s) noexcept { return {s.data(), s.size()}; }

  void on_request_impl(http::verb method, string_view method_string, string_view target,
                       int version, beast::error_code&) override {
    std::string scratch;
    request_.set_start_line(method, view(method_string), origin_form(view(target), scratch),
                            static_cast<unsigned>(version));
  }
  void on_response_impl(int, string_view, int, beast::error_code&) override {}
  void on_field_impl(http::field name, string_view name_string, string_view value,
                     beast::error_code&) override {
    if (is_header_done()) return;  // a trailer field
    request_.insert(name, view(name_string), view(value));
  }
  void on_header_impl(beast::error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, beast::error_code&) override {}
  std::size_t on_body_impl(string_view body, beast::error_code&) override {
    request_.body().append(view(body));
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, string_view, beast::error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, beast::error_code&) override {
    request_.body().append(view(body));
    return body.size();
  }
  void on_finish_impl(beast::error_code&) override {}

  Request& request_;
};

}  // namespace lmwarden::net
