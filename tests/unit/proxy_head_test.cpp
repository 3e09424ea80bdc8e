// The request head the relay writes for an upstream server, and the reply head
// it writes for the client: both are written as bytes, field by field, so
// these tests read them back with Beast's parser.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>
#include <utility>
#include <vector>

#include "config/config_loader.h"
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
  request.body() = std::move(body);
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
  for (const auto& f : parsed.header)
    parsed.fields.emplace_back(std::string(f.name_string()), std::string(f.value()));
  return parsed;
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
  std::string head;
  write_upstream_head(head, request, backend("http://127.0.0.1:8000"), -1, "127.0.0.1");
  EXPECT_THAT(parse_request_head(head).fields,
              testing::ElementsAre(testing::Pair("X-Kept", "3"),
                                   testing::Pair("X-Forwarded-For", "127.0.0.1"),
                                   testing::Pair("Host", "127.0.0.1:8000"),
                                   testing::Pair("Content-Length", "2")));
}

TEST(UpstreamHead, ABackendWithItsOwnKeyReplacesTheClientsCredentials) {
  ::setenv("LMWARDEN_TEST_UPSTREAM_KEY", "sk-upstream", 1);
  auto with_key = backend("http://127.0.0.1:8000");
  with_key.api_key_env = "LMWARDEN_TEST_UPSTREAM_KEY";
  const auto request = client_request(http::verb::post, "/v1/messages",
                                      {{"authorization", "Bearer client"}, {"X-API-Key", "client-key"}},
                                      "{}");
  std::string head;
  write_upstream_head(head, request, with_key, -1, "");
  const auto parsed = parse_request_head(head);
  EXPECT_EQ(parsed.header.count(http::field::authorization), 1u);
  EXPECT_EQ(parsed.header[http::field::authorization], "Bearer sk-upstream");
  EXPECT_EQ(parsed.header.count("x-api-key"), 0u);
  ::unsetenv("LMWARDEN_TEST_UPSTREAM_KEY");
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

TEST(ClientHead, KeepsTheReplysStatusAndEndToEndFieldsOnly) {
  http::response_header<> reply;
  reply.result(429);
  reply.reason("Slow Down");
  reply.insert("Content-Type", "text/event-stream");
  reply.insert("Connection", "keep-alive, X-Upstream-Hop");
  reply.insert("X-Upstream-Hop", "1");
  reply.insert("Transfer-Encoding", "chunked");
  reply.insert("Keep-Alive", "timeout=5");
  reply.insert("Content-Length", "12");
  reply.insert("retry-after", "3");
  std::string head = "stale";
  write_client_head(head, reply);
  EXPECT_EQ(head, "HTTP/1.1 429 Slow Down\r\nContent-Type: text/event-stream\r\nretry-after: 3\r\n");

  http::response_header<> two_lists;
  two_lists.result(http::status::ok);
  two_lists.insert("Connection", "X-First");
  two_lists.insert("X-First", "1");
  two_lists.insert("X-Second", "2");
  two_lists.insert("Connection", "x-second");
  two_lists.insert("X-Kept", "3");
  write_client_head(head, two_lists);
  EXPECT_EQ(head, "HTTP/1.1 200 OK\r\nX-Kept: 3\r\n") << "every Connection field counts";

  http::response_header<> plain;
  plain.result(http::status::ok);
  write_client_head(head, plain);
  EXPECT_EQ(head, "HTTP/1.1 200 OK\r\n") << "no reason sent: the standard one";
}

}  // namespace
}  // namespace lmwarden::proxy
