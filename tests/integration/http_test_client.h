// A small blocking HTTP/1.1 client for integration tests, with socket-level
// timeouts so that a test can never hang on a silent server.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lmwarden::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpReply {
  unsigned status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class HttpConnection {
 public:
  explicit HttpConnection(std::uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  void send(http::verb method, const std::string& target, const std::string& body,
            const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    http::write(socket_, req);
    head_sent_ = method == http::verb::head;
  }

  void send_raw(std::string_view bytes) { asio::write(socket_, asio::buffer(bytes)); }

  // Reads a whole reply.
  HttpReply read() {
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    parser.skip(head_sent_);  // a reply to HEAD has a header only, whatever it says of a body
    http::read(socket_, buffer_, parser);
    return to_reply(parser.release());
  }

  // Streaming: read the header, then body pieces as they come.
  HttpReply read_header() {
    parser_.emplace();
    parser_->body_limit(boost::none);
    http::read_header(socket_, buffer_, *parser_);
    HttpReply r;
    r.status = parser_->get().result_int();
    for (const auto& f : parser_->get()) r.headers[lower(std::string(f.name_string()))] = std::string(f.value());
    return r;
  }
  // Next piece of the body; nullopt at the end of the body.
  std::optional<std::string> read_some() {
    if (parser_->is_done()) return std::nullopt;
    char chunk[8192];
    parser_->get().body().data = chunk;
    parser_->get().body().size = sizeof chunk;
    beast::error_code ec;
    http::read_some(socket_, buffer_, *parser_, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) throw beast::system_error(ec);
    return std::string(chunk, sizeof chunk - parser_->get().body().size);
  }
  // Reads body pieces until `needle` has appeared; returns all read.
  std::string read_until(const std::string& needle) {
    std::string all;
    while (all.find(needle) == std::string::npos) {
      auto piece = read_some();
      if (!piece) break;
      all += *piece;
    }
    return all;
  }

  void close() {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }
  tcp::socket& socket() { return socket_; }

 private:
  static std::string lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  static HttpReply to_reply(http::response<http::string_body> res) {
    HttpReply r;
    r.status = res.result_int();
    for (const auto& f : res) r.headers[lower(std::string(f.name_string()))] = std::string(f.value());
    r.body = std::move(res.body());
    return r;
  }

  asio::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  bool head_sent_ = false;
};

// One request on a fresh connection.
inline HttpReply http_request(std::uint16_t port, http::verb method, const std::string& target,
                              const std::string& body = "",
                              const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  HttpConnection c{port};
  c.send(method, target, body, headers);
  return c.read();
}

// Polls `condition` every 10 ms until true or the deadline; returns the last result.
template <class F>
bool eventually(F condition, std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

}  // namespace lmwarden::testing
