// The server's Request and the parser that fills it: the header as received
// (order, spelling, duplicates), lookups, keep-alive, a chunked body, and a
// request object reused across a connection's requests.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/request_reader.h"

namespace lmwarden::net {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

struct Capture {
  std::string method;
  std::string target;
  Fields fields;
};

// A request captured from a real client (../shared/fixtures/clients).
Capture load_capture(const std::string& name) {
  const std::string path = std::string(LMWARDEN_FIXTURES) + "/clients/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  const auto json = nlohmann::json::parse(in);
  Capture capture{json.at("method"), json.at("path"), {}};
  for (const auto& pair : json.at("headers")) capture.fields.emplace_back(pair.at(0), pair.at(1));
  return capture;
}

std::string wire_head(const Capture& c) {
  std::string head = c.method + " " + c.target + " HTTP/1.1\r\n";
  for (const auto& [name, value] : c.fields) head += name + ": " + value + "\r\n";
  return head + "\r\n";
}

// Parses `bytes` into `request` (cleared first); the parser's error, if any.
beast::error_code parse_into(Request& request, std::string_view bytes, bool whole = true) {
  request.clear();
  RequestParser parser{request};
  parser.eager(true);
  beast::error_code ec;
  const std::size_t used = parser.put(asio::buffer(bytes.data(), bytes.size()), ec);
  if (!ec && whole) {
    EXPECT_TRUE(parser.is_done()) << bytes;
    EXPECT_EQ(used, bytes.size());
  }
  return ec;
}

Fields fields_of(const Request& request) {
  Fields out;
  for (const auto& f : request) out.emplace_back(f.name_string(), f.value());
  return out;
}

TEST(Request, HoldsARealClaudeCodeHeaderAsReceived) {
  const Capture claude = load_capture("claude-code-2.1.332_messages_turn2.json");
  Request request;
  // The header alone: its Content-Length announces a body not given here.
  ASSERT_FALSE(parse_into(request, wire_head(claude), /*whole=*/false));
  EXPECT_EQ(request.method(), http::verb::post);
  EXPECT_EQ(request.method_string(), "POST");
  EXPECT_EQ(request.target(), "/v1/messages?beta=true");
  EXPECT_EQ(request.version(), 11u);
  EXPECT_EQ(fields_of(request), claude.fields);  // order and spelling kept
  EXPECT_EQ(request["x-claude-code-session-id"], "5506220c-1ac0-498d-ad24-592ac04efcdd");
  EXPECT_EQ(request[http::field::content_type], "application/json");
  EXPECT_EQ(request["CONTENT-TYPE"], "application/json");  // a known name, any case
  EXPECT_EQ(request[http::field::host], "127.0.0.1:18080");
  EXPECT_TRUE(request.keep_alive());
}

TEST(Request, AReusedRequestHoldsOnlyTheLatestRequest) {
  const Capture claude = load_capture("claude-code-2.1.332_messages_turn2.json");
  const Capture codex = load_capture("codex-0.171.0_responses_tool-followup.json");
  Request request;
  ASSERT_FALSE(parse_into(request, wire_head(claude), false));
  ASSERT_FALSE(parse_into(request, wire_head(codex), false));
  EXPECT_EQ(request.target(), codex.target);
  EXPECT_EQ(fields_of(request), codex.fields);
  EXPECT_FALSE(request.find("X-Claude-Code-Session-Id"));
  EXPECT_EQ(request["Session-Id"], "01a22a54-fd9d-7df1-9e18-855eab7ea70c");

  ASSERT_FALSE(parse_into(request, "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"));
  EXPECT_EQ(request.method(), http::verb::get);
  EXPECT_EQ(request.target(), "/health");
  EXPECT_EQ(fields_of(request), (Fields{{"Host", "a"}}));
  EXPECT_TRUE(request.body().empty());
}

TEST(Request, CopiesAndMovesKeepTheirFields) {
  Request request;
  ASSERT_FALSE(parse_into(request, "POST /v1/x HTTP/1.1\r\nA: 1\r\nX-Long: " +
                                       std::string(3000, 'v') + "\r\nContent-Length: 2\r\n\r\nhi"));
  const Request copy = request;
  Request moved = std::move(request);
  request.clear();
  ASSERT_FALSE(parse_into(request, "GET /other HTTP/1.1\r\nB: 2\r\n\r\n"));
  for (const Request* r : {&copy, const_cast<const Request*>(&moved)}) {
    EXPECT_EQ(r->target(), "/v1/x");
    EXPECT_EQ(r->field_count(), 3u);
    EXPECT_EQ((*r)["a"], "1");
    EXPECT_EQ((*r)["x-long"], std::string(3000, 'v'));
    EXPECT_EQ(r->body().view(), "hi");
  }
}

TEST(Request, KeepsDuplicatesInOrderAndTellsAbsentFromEmpty) {
  Request request;
  ASSERT_FALSE(parse_into(request,
                          "GET / HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1\r\nX-Empty:\r\n"
                          "x-forwarded-for: 2.2.2.2\r\n\r\n"));
  EXPECT_EQ(request["X-Forwarded-For"], "1.1.1.1");  // the first
  EXPECT_EQ(fields_of(request)[2], (std::pair<std::string, std::string>{"x-forwarded-for", "2.2.2.2"}));
  ASSERT_TRUE(request.find("x-empty"));
  EXPECT_EQ(*request.find("x-empty"), "");
  EXPECT_FALSE(request.find("x-missing"));
  EXPECT_FALSE(request.find(http::field::authorization));
  EXPECT_EQ(request[http::field::authorization], "");
}

TEST(Request, KeepAliveFollowsTheVersionAndEveryConnectionField) {
  const auto keep_alive = [](std::string_view head) {
    Request request;
    EXPECT_FALSE(parse_into(request, head)) << head;
    return request.keep_alive();
  };
  EXPECT_TRUE(keep_alive("GET / HTTP/1.1\r\n\r\n"));
  EXPECT_FALSE(keep_alive("GET / HTTP/1.1\r\nConnection: close\r\n\r\n"));
  EXPECT_FALSE(keep_alive("GET / HTTP/1.1\r\nConnection: Upgrade, CLOSE\r\n\r\n"));
  EXPECT_FALSE(keep_alive("GET / HTTP/1.1\r\nConnection: x-trace\r\nConnection: close\r\n\r\n"));
  EXPECT_FALSE(keep_alive("GET / HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(keep_alive("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
  EXPECT_FALSE(keep_alive("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"));
}

TEST(Request, AChunkedBodyIsDecodedIntoTheBody) {
  Request request;
  ASSERT_FALSE(parse_into(request,
                          "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "5\r\n{\"a\":\r\n3\r\n1}\n\r\n0\r\n\r\n"));
  EXPECT_EQ(request.body().view(), "{\"a\":1}\n");
}

// What the server reads past the parser: the length a head declared,
// known as soon as the head is parsed (the body not yet given to the parser).
TEST(RequestParser, TellsTheDeclaredLengthOnceTheHeadIsParsed) {
  const auto declared = [](std::string_view head) {
    Request request;
    RequestParser parser{request};
    beast::error_code ec;
    parser.put(asio::buffer(head.data(), head.size()), ec);
    EXPECT_FALSE(ec) << head;
    EXPECT_TRUE(parser.is_header_done()) << head;
    return parser.declared_length();
  };
  EXPECT_EQ(declared("POST / HTTP/1.1\r\nContent-Length: 102400\r\n\r\n"), 102400u);
  EXPECT_EQ(declared("POST / HTTP/1.1\r\nContent-Length: 7, 7\r\n\r\n"), 7u);
  EXPECT_EQ(declared("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 0u);
  EXPECT_EQ(declared("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            RequestParser::kNoDeclaredLength);
  EXPECT_EQ(declared("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), RequestParser::kNoDeclaredLength);
}

TEST(RequestParser, AnAbsoluteFormTargetIsTakenInItsOriginForm) {
  // RFC 9112 3.2.2: a server accepts the absolute form (a client that takes
  // the warden for an HTTP proxy sends it); the warden routes by the path.
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"http://127.0.0.1:8080/v1/chat/completions", "/v1/chat/completions"},
      {"HTTP://gpu-box/v1/messages?beta=true", "/v1/messages?beta=true"},
      {"https://[::1]:8443/health", "/health"},
      {"http://warden", "/"},
      {"http://warden?x=1", "/?x=1"},
      {"/v1/models", "/v1/models"},                // origin form: as it is
      {"*", "*"},                                  // asterisk form: as it is
      {"http:///v1/models", "http:///v1/models"},  // no authority: left for a 404
      {"httpx://a/b", "httpx://a/b"},
  };
  for (const auto& [sent, taken] : cases) {
    Request request;
    const std::string head = "GET " + std::string(sent) + " HTTP/1.1\r\nHost: h\r\n\r\n";
    ASSERT_FALSE(parse_into(request, head)) << sent;
    EXPECT_EQ(request.target(), taken) << sent;
    EXPECT_EQ(request["host"], "h") << sent;  // the fields are parsed on as before
  }
}

TEST(Request, AnUnknownMethodKeepsItsSpelling) {
  Request request;
  ASSERT_FALSE(parse_into(request, "BREW /pot HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(request.method(), http::verb::unknown);
  EXPECT_EQ(request.method_string(), "BREW");
}

TEST(Request, ABuiltRequestReadsLikeAParsedOne) {
  Request request{http::verb::patch, "/api/models/m"};
  request.insert("Authorization", "Bearer t");
  request.insert("X-Custom", "1");
  request.body().assign("{}");
  EXPECT_EQ(request.method_string(), "PATCH");
  EXPECT_EQ(request[http::field::authorization], "Bearer t");
  EXPECT_EQ(request["x-custom"], "1");
  EXPECT_EQ((*request.begin()).name(), http::field::authorization);
  EXPECT_EQ((*std::next(request.begin())).name(), http::field::unknown);
}

TEST(Request, ClearingGivesBackALargeBodyAndKeepsASmallOne) {
  Request request;
  request.body().assign(std::string(Request::kKeptBodyBytes * 2, 'x'));
  request.clear();
  EXPECT_TRUE(request.body().empty());
  EXPECT_LE(request.body().capacity(), Request::kKeptBodyBytes);
  request.body().assign(std::string(1000, 'x'));
  const std::size_t kept = request.body().capacity();
  request.clear();
  EXPECT_TRUE(request.body().empty());
  EXPECT_EQ(request.body().capacity(), kept);
}


// Whether the kBodyPadding bytes after the body are readable zeros.
bool padded_with_zeros(const Body& body) {
  if (body.capacity() < body.size() + kBodyPadding) return false;
  for (std::size_t i = 0; i < kBodyPadding; ++i)
    if (body.data()[body.size() + i] != 0) return false;
  return true;
}

TEST(Body, SizingForAReadKeepsWhatItHeldAndPadsWithZeros) {
  Body body;
  EXPECT_EQ(body.capacity(), 0u);  // nothing readable past an empty body's ""
  EXPECT_EQ(body.view(), "");
  body.assign("{\"model\":\"m\"}");
  EXPECT_TRUE(padded_with_zeros(body));
  body.resize_for_overwrite(5);
  EXPECT_EQ(body.view(), "{\"mod");
  EXPECT_TRUE(padded_with_zeros(body));
  body.resize_for_overwrite(200);  // grows: the first bytes move with it
  EXPECT_EQ(body.view().substr(0, 5), "{\"mod");
  EXPECT_EQ(body.size(), 200u);
  EXPECT_TRUE(padded_with_zeros(body));
}

TEST(Body, AppendsAcrossGrowthAndCopiesAndMovesWhole) {
  Body body;
  std::string expected;
  for (int i = 0; i < 500; ++i) {
    const std::string piece = std::to_string(i) + ",";
    body.append(piece);
    expected += piece;
    ASSERT_TRUE(padded_with_zeros(body)) << i;
  }
  EXPECT_EQ(body.view(), expected);
  Body copy = body;
  Body moved = std::move(body);
  EXPECT_EQ(copy.view(), expected);
  EXPECT_EQ(moved.view(), expected);
  EXPECT_NE(copy.data(), moved.data());
  copy = moved;
  EXPECT_EQ(copy.view(), expected);
  moved.clear();
  EXPECT_TRUE(moved.empty());
  EXPECT_TRUE(padded_with_zeros(moved));
  EXPECT_EQ(copy.view(), expected);
}

}  // namespace
}  // namespace lmwarden::net
