// The request head the relay writes for an upstream server, and the reply head
// it writes for the client: both are written as bytes, field by field, so
// these tests read them back with Beast's parser.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config_loader.h"
#include "net/request_parser.h"
#include "proxy/relay.h"

namespace lmwarden::proxy {
namespace {

namespace http = net::http;
using Fields = std::vector<std::pair<std::string, std::string>>;

config::BackendConfig backend(std::string_view url) {
  auto parsed = config::parse_backend_url(url);
  EXPECT_TRUE(parsed) << url;
  return parsed ? *parsed : config::BackendConfig{};
}

net::Request client_request(http::verb verb, std::string_view target, const Fields& fields,
                            std::string body) {
  net::Request request{verb, target, 11};
  for (const auto& [name, value] : fields) request.insert(name, value);
  request.body().assign(body);
  return request;
}

// Parses `head` as a request header; the fields in the order written.
struct ParsedHead {
  http::request<http::empty_body> header;
  Fields fields;
};
ParsedHead parse_request_head(const std::string& head) {
  EXPECT_TRUE(head.ends_with("\r\n\r\n")) << head;
  http::request_parser<http::empty_body> parser;
  parser.skip(true);  // the body is not part of the head
  net::beast::error_code ec;
  parser.put(net::asio::buffer(head), ec);
  EXPECT_FALSE(ec) << ec.message() << "\n" << head;
  EXPECT_TRUE(parser.is_header_done()) << head;
  ParsedHead parsed{parser.release(), {}};
  // The fields in the order written: Beast's message files a repeated name
  // beside its first, the server's Request keeps them as they came.
  net::Request in_order;
  net::RequestParser fields_parser{in_order};
  fields_parser.skip(true);
  fields_parser.put(net::asio::buffer(head), ec);
  EXPECT_FALSE(ec) << ec.message();
  for (const auto& f : in_order)
    parsed.fields.emplace_back(std::string(f.name_string()), std::string(f.value()));
  return parsed;
}

// The fields of the head written for a plain backend, no rank, in order.
Fields upstream_fields(const net::Request& request, std::string_view forwarded_for) {
  std::string head;
  write_upstream_head(head, request, backend("http://127.0.0.1:8000"), -1, forwarded_for);
  return parse_request_head(head).fields;
}

TEST(UpstreamHead, RewritesOnlyWhatTheProxyOwnsAndKeepsTheRestInOrder) {
  const auto request = client_request(
      http::verb::post, "/v1/chat/completions?x=1",
      {{"Content-Type", "application/json"},
       {"Connection", "keep-alive, X-Trace-Hop"},
       {"X-Trace-Hop", "only for the next hop"},
       {"Keep-Alive", "timeout=5"},
       {"TE", "trailers"},
       {"Upgrade", "h2c"},
       {"Proxy-Authorization", "Basic abc"},
       {"Trailer", "X-Checksum"},
       {"Expect", "100-continue"},
       {"Host", "warden.example"},
       {"Content-Length", "999"},
       {"x-data-parallel-rank", "7"},
       {"X-Claude-Code-Session-Id", "3f0c"},
       {"Authorization", "Bearer client"},
       {"x-api-key", "client-key"}},
      R"({"model":"m"})");
  std::string head = "left over from the last request";
  write_upstream_head(head, request, backend("http://10.0.0.5:8001/vllm"), 2, "192.0.2.9");
  const auto parsed = parse_request_head(head);

  EXPECT_EQ(parsed.header.method(), http::verb::post);
  EXPECT_EQ(parsed.header.target(), "/vllm/v1/chat/completions?x=1");
  EXPECT_EQ(parsed.header.version(), 11u);
  EXPECT_THAT(parsed.fields,
              testing::ElementsAre(testing::Pair("Content-Type", "application/json"),
                                   testing::Pair("X-Claude-Code-Session-Id", "3f0c"),
                                   testing::Pair("Authorization", "Bearer client"),
                                   testing::Pair("x-api-key", "client-key"),
                                   testing::Pair("X-data-parallel-rank", "2"),
                                   testing::Pair("X-Forwarded-For", "192.0.2.9"),
                                   testing::Pair("Host", "10.0.0.5:8001"),
                                   testing::Pair("Content-Length", "13")));
  // The client's request is forwarded as it came, not edited.
  EXPECT_EQ(request.target(), "/v1/chat/completions?x=1");
  EXPECT_EQ(request[http::field::host], "warden.example");
}

TEST(UpstreamHead, AnAddedRequestIdFollowsTheForwardedFor) {
  const auto request = client_request(http::verb::post, "/v1/chat/completions",
                                      {{"Content-Type", "application/json"}}, "{}");
  std::string head;
  write_upstream_head(head, request, backend("http://127.0.0.1:8000"), -1, "127.0.0.1",
                      "0a1b2c3d-17");
  EXPECT_THAT(parse_request_head(head).fields,
              testing::ElementsAre(testing::Pair("Content-Type", "application/json"),
                                   testing::Pair("X-Forwarded-For", "127.0.0.1"),
                                   testing::Pair("X-Request-Id", "0a1b2c3d-17"),
                                   testing::Pair("Host", "127.0.0.1:8000"),
                                   testing::Pair("Content-Length", "2")));
}

// A client's empty X-Request-Id gets the warden's in its place, not beside
// it: vLLM reads the first field, and would name the request by nothing.
TEST(UpstreamHead, AnAddedRequestIdReplacesAnEmptyOneOfTheClient) {
  const auto request = client_request(http::verb::post, "/v1/chat/completions",
                                      {{"X-Request-Id", ""}, {"Accept", "*/*"}}, "{}");
  std::string head;
  write_upstream_head(head, request, backend("http://127.0.0.1:8000"), -1, "127.0.0.1",
                      "0a1b2c3d-17");
  EXPECT_THAT(parse_request_head(head).fields,
              testing::ElementsAre(
                  testing::Pair("Accept", "*/*"), testing::Pair("X-Forwarded-For", "127.0.0.1"),
                  testing::Pair("X-Request-Id", "0a1b2c3d-17"),
                  testing::Pair("Host", "127.0.0.1:8000"), testing::Pair("Content-Length", "2")));
  // The client's own id, the warden adding none, goes as it came.
  const auto own = client_request(http::verb::post, "/v1/chat/completions",
                                  {{"x-request-id", "client-7"}}, "{}");
  write_upstream_head(head, own, backend("http://127.0.0.1:8000"), -1, "127.0.0.1");
  EXPECT_THAT(parse_request_head(head).fields,
              testing::Contains(testing::Pair("x-request-id", "client-7")));
}

TEST(UpstreamHead, RepeatedFieldsKeepTheOrderTheyCameIn) {
  // A name that comes back after other fields stays where the client put it
  // (Beast's own field list would have moved it up beside the first).
  const auto request = client_request(http::verb::post, "/v1/messages",
                                      {{"X-Trace", "a"},
                                       {"Accept", "application/json"},
                                       {"x-trace", "b"},
                                       {"X-Other", "c"},
                                       {"X-TRACE", "d"}},
                                      "{}");
  EXPECT_THAT(upstream_fields(request, ""),
              testing::ElementsAre(testing::Pair("X-Trace", "a"),
                                   testing::Pair("Accept", "application/json"),
                                   testing::Pair("x-trace", "b"),
                                   testing::Pair("X-Other", "c"),
                                   testing::Pair("X-TRACE", "d"),
                                   testing::Pair("Host", "127.0.0.1:8000"),
                                   testing::Pair("Content-Length", "2")));
}

TEST(UpstreamHead, ExtendsTheForwardedForChainOfEveryField) {
  const auto request = client_request(http::verb::post, "/v1/messages",
                                      {{"X-Forwarded-For", "203.0.113.1"},
                                       {"x-forwarded-for", "198.51.100.2, 10.1.1.1"}},
                                      "{}");
  std::string head;
  write_upstream_head(head, request, backend("http://127.0.0.1:8000"), -1, "127.0.0.1");
  const auto parsed = parse_request_head(head);
  EXPECT_EQ(parsed.header["X-Forwarded-For"], "203.0.113.1, 198.51.100.2, 10.1.1.1, 127.0.0.1");
  EXPECT_EQ(parsed.header.count("X-Forwarded-For"), 1u);
  EXPECT_EQ(parsed.header.count("X-data-parallel-rank"), 0u) << "rank -1 writes no rank header";

  write_upstream_head(head, request, backend("http://127.0.0.1:8000"), -1, "");
  EXPECT_EQ(parse_request_head(head).header["X-Forwarded-For"], "203.0.113.1, 198.51.100.2, 10.1.1.1");
  const auto bare = client_request(http::verb::post, "/v1/messages", {}, "{}");
  write_upstream_head(head, bare, backend("http://127.0.0.1:8000"), -1, "");
  EXPECT_EQ(parse_request_head(head).header.count("X-Forwarded-For"), 0u);
}

TEST(UpstreamHead, EveryConnectionFieldListsHopByHopFields) {
  // RFC 9110 §5.3: several Connection fields are one list. A field it names
  // is for the next hop only, X-Forwarded-For included.
  const auto request = client_request(http::verb::post, "/v1/messages",
                                      {{"Connection", "keep-alive, X-Hop-One"},
                                       {"X-Hop-One", "1"},
                                       {"X-Hop-Two", "2"},
                                       {"X-Forwarded-For", "203.0.113.1"},
                                       {"X-Kept", "3"},
                                       {"connection", "x-hop-two, X-Forwarded-For"}},
                                      "{}");
  EXPECT_THAT(upstream_fields(request, "127.0.0.1"),
              testing::ElementsAre(testing::Pair("X-Kept", "3"),
                                   testing::Pair("X-Forwarded-For", "127.0.0.1"),
                                   testing::Pair("Host", "127.0.0.1:8000"),
                                   testing::Pair("Content-Length", "2")));
}

// Past a few names, the list is kept hashed (a header of thousands of names
// and fields was quadratic): the same fields go, in any case, repeated or not.
TEST(UpstreamHead, AConnectionFieldListingManyNamesDropsEachOfThem) {
  std::string names = "keep-alive";
  for (int i = 0; i < 40; ++i) names += ", X-Unsent-" + std::to_string(i);
  names += ", X-HOP-ONE, x-hop-one, X-Hop-Two";
  const auto request = client_request(http::verb::post, "/v1/messages",
                                      {{"Connection", names},
                                       {"x-hop-one", "1"},
                                       {"X-Kept", "2"},
                                       {"X-HOP-TWO", "3"},
                                       {"X-Unsent-39", "4"},
                                       {"X-Unsent-40", "5"}},
                                      "{}");
  EXPECT_THAT(upstream_fields(request, ""),
              testing::ElementsAre(testing::Pair("X-Kept", "2"), testing::Pair("X-Unsent-40", "5"),
                                   testing::Pair("Host", "127.0.0.1:8000"),
                                   testing::Pair("Content-Length", "2")));
}

TEST(UpstreamHead, ABackendWithItsOwnKeyReplacesTheClientsCredentials) {
  auto with_key = backend("http://127.0.0.1:8000");
  with_key.api_key_env = "LMWARDEN_TEST_UPSTREAM_KEY";
  with_key.api_key = "sk-upstream";  // as the loader reads it
  const auto request = client_request(http::verb::post, "/v1/messages",
                                      {{"authorization", "Bearer client"}, {"X-API-Key", "client-key"}},
                                      "{}");
  std::string head;
  write_upstream_head(head, request, with_key, -1, "");
  const auto parsed = parse_request_head(head);
  EXPECT_EQ(parsed.header.count(http::field::authorization), 1u);
  EXPECT_EQ(parsed.header[http::field::authorization], "Bearer sk-upstream");
  EXPECT_EQ(parsed.header.count("x-api-key"), 0u);
}

TEST(UpstreamHead, ContentLengthFollowsTheBodyAndTheMethod) {
  std::string head;
  const auto target = backend("http://127.0.0.1:8000");
  write_upstream_head(head, client_request(http::verb::get, "/v1/models", {}, ""), target, -1, "");
  EXPECT_EQ(parse_request_head(head).header.count(http::field::content_length), 0u);
  write_upstream_head(head, client_request(http::verb::post, "/v1/completions", {}, ""), target, -1, "");
  EXPECT_EQ(parse_request_head(head).header[http::field::content_length], "0");
  const auto chunked = client_request(http::verb::post, "/v1/completions",
                                      {{"Transfer-Encoding", "chunked"}}, std::string(70'000, 'x'));
  write_upstream_head(head, chunked, target, -1, "");
  const auto parsed = parse_request_head(head);
  EXPECT_EQ(parsed.header[http::field::content_length], "70000");
  EXPECT_EQ(parsed.header.count(http::field::transfer_encoding), 0u);
}

TEST(UpstreamHead, AnIpv6BackendIsNamedInBrackets) {
  std::string head;
  write_upstream_head(head, client_request(http::verb::post, "/v1/completions", {}, "{}"),
                      backend("http://[::1]:8000"), -1, "");
  EXPECT_EQ(parse_request_head(head).header[http::field::host], "[::1]:8000");
}

// The client's head for an upstream reply head `wire`, parsed as the relay
// parses it.
std::string client_head_for(std::string_view wire) {
  ReplyParser parser;
  net::beast::error_code ec;
  const std::size_t used = parser.put(net::asio::buffer(wire.data(), wire.size()), ec);
  EXPECT_FALSE(ec) << ec.message() << " in " << wire;
  EXPECT_TRUE(parser.is_header_done()) << wire;
  EXPECT_EQ(used, wire.size());
  std::string head = "stale";
  write_client_head(head, parser);
  return head;
}

TEST(ClientHead, KeepsTheReplysStatusAndEndToEndFieldsOnly) {
  EXPECT_EQ(client_head_for("HTTP/1.1 429 Slow Down\r\n"
                            "Content-Type: text/event-stream\r\n"
                            "Connection: keep-alive, X-Upstream-Hop\r\n"
                            "X-Upstream-Hop: 1\r\n"
                            "Transfer-Encoding: chunked\r\n"
                            "Keep-Alive: timeout=5\r\n"
                            "retry-after: 3\r\n\r\n"),
            "HTTP/1.1 429 Slow Down\r\nContent-Type: text/event-stream\r\nretry-after: 3\r\n");
  EXPECT_EQ(client_head_for("HTTP/1.1 200 OK\r\nContent-Length: 12\r\nX-Kept: 1\r\n\r\n"),
            "HTTP/1.1 200 OK\r\nX-Kept: 1\r\n")
      << "the exchange writes the framing";
  EXPECT_EQ(client_head_for("HTTP/1.1 200 OK\r\n"
                            "Connection: X-First\r\n"
                            "X-First: 1\r\n"
                            "X-Second: 2\r\n"
                            "Connection: x-second\r\n"
                            "X-Kept: 3\r\n"
                            "Content-Length: 0\r\n\r\n"),
            "HTTP/1.1 200 OK\r\nX-Kept: 3\r\n")
      << "every Connection field counts";
  EXPECT_EQ(client_head_for("HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n"), "HTTP/1.1 200 OK\r\n")
      << "no reason sent: the standard one";
}

// A value folded over several lines (obs-fold, RFC 9112 §5.2) is forwarded
// with each fold as a space. Beast unfolds it into a buffer of its own that
// lives only while it parses, shared by every folded field: the parser
// copies each such value (before, the fields read freed stack, and each
// showed the last folded value's bytes).
TEST(ClientHead, FoldedValuesAreRelayedUnfoldedEachItsOwn) {
  const std::string long_value(2000, 'L');
  EXPECT_EQ(client_head_for("HTTP/1.1 200 OK\r\n"
                            "X-Fold-A: AAAAAAAAAAAAAAAA\r\n AAAA\r\n"
                            "X-Plain: p\r\n"
                            "X-Fold-B: BB\r\n\tB\r\n"
                            "X-Fold-C: " +
                            long_value + "\r\n " + long_value + "\r\n\r\n"),
            "HTTP/1.1 200 OK\r\nX-Fold-A: AAAAAAAAAAAAAAAA AAAA\r\nX-Plain: p\r\n"
            "X-Fold-B: BB B\r\nX-Fold-C: " +
                long_value + " " + long_value + "\r\n");
}

// The reply's body as the relay decodes it: into a buffer of its own, as
// much as fits per pass, whatever the framing.
TEST(ReplyParser, DecodesTheBodyIntoTheGivenBufferAsMuchAsFits) {
  const std::string chunked =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n";
  const std::string sized = "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world";
  for (const std::string& wire : {chunked, sized}) {
    SCOPED_TRACE(wire);
    ReplyParser parser;
    net::beast::error_code ec;
    std::string_view rest = wire;
    rest.remove_prefix(parser.put(net::asio::buffer(rest.data(), rest.size()), ec));
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_TRUE(parser.is_header_done());
    EXPECT_EQ(parser.status(), 200u);
    std::string body;
    for (int pass = 0; pass < 20 && !parser.is_done(); ++pass) {
      char piece[4];
      parser.body_buffer(piece, sizeof piece);
      const std::size_t used = parser.put(net::asio::buffer(rest.data(), rest.size()), ec);
      ASSERT_TRUE(!ec || ec == http::error::need_buffer) << ec.message();
      rest.remove_prefix(used);
      body.append(piece, sizeof piece - parser.body_room());
    }
    EXPECT_TRUE(parser.is_done());
    EXPECT_EQ(body, "hello world");
    EXPECT_TRUE(rest.empty()) << rest;
  }
}

}  // namespace
}  // namespace lmwarden::proxy
