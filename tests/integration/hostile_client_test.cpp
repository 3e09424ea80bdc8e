// Hostile clients against an in-process warden over real sockets (slow ones:
// hostile_slow_client_test.cpp): oversized requests, ambiguous framing
// (request smuggling), header injection, broken chunked bodies, pipelining,
// floods of idle connections and path traversal on the dashboard. Each test checks what the client
// receives, what reached the backend (byte for byte, through RawBackend), and that the warden
// answers the next honest request with nothing left in flight.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <memory>
#include <string>
#include <vector>

#include "hostile_client_fixture.h"

namespace lmwarden::testing {
namespace {

// A CR not followed by LF, or an LF not preceded by CR.
bool has_bare_cr_or_lf(std::string_view head) {
  for (std::size_t i = 0; i < head.size(); ++i) {
    if (head[i] == '\r' && (i + 1 >= head.size() || head[i + 1] != '\n')) return true;
    if (head[i] == '\n' && (i == 0 || head[i - 1] != '\r')) return true;
  }
  return false;
}

bool is_client_error(int status) { return status == 400 || status == 404; }

// ------------------------------------------------------------ oversized requests

TEST_F(HostileClient, OversizedHeaderIs431) {
  expect_refused(chat_request("big", "X-Big: " + std::string(16 * 1024, 'a') + "\r\n"), 431, 3s,
                 "request header too large: the limit is 8 KiB");
  std::string many;
  for (int i = 0; i < 400; ++i) many += "X-Many-" + std::to_string(i) + ": 0123456789abcdef\r\n";
  expect_refused(chat_request("many", many), 431);
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

TEST_F(HostileClient, OversizedBodyIs413BeforeItIsSent) {
  // Declared too large: refused on the header alone; the body never needs sending.
  expect_refused(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: big\r\nContent-Length: 10485760\r\n\r\n",
      413, 3s, "request body too large: the limit is 64 KiB");
  // Chunked, growing past the limit.
  std::string chunked =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: bigchunks\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i) chunked += "1000\r\n" + std::string(0x1000, 'a') + "\r\n";
  chunked += "0\r\n\r\n";
  expect_refused(chunked, 413, 3s, "request body too large: the limit is 64 KiB");
  // A huge chunk size.
  expect_refused(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: hugechunk\r\nTransfer-Encoding: chunked\r\n\r\n"
      "7fffffff\r\nabc",
      413);
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

// ------------------------------------------------------------ request smuggling

TEST_F(HostileClient, ContentLengthWithTransferEncodingIs400AndSmugglesNothing) {
  const std::string smuggled =
      "GET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: smuggled\r\n\r\n";
  // CL.TE: a front end reading Content-Length would pass the smuggled request on as body.
  const std::string chunk_end = "0\r\n\r\n";
  expect_refused("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: clte\r\n"
                 "Content-Length: " + std::to_string(chunk_end.size() + smuggled.size()) +
                     "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk_end + smuggled,
                 400);
  // TE.CL, header order reversed.
  const std::string body = std::string(kChat);
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size());
  expect_refused("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: tecl\r\n"
                 "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n" + std::string(size) + "\r\n" +
                     body + "\r\n0\r\n\r\n" + smuggled,
                 400);
  // Obfuscated Transfer-Encoding next to a Content-Length.
  expect_refused("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: teobf\r\n"
                 "Content-Length: 5\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" + smuggled,
                 400);
  // Two Transfer-Encoding fields whose last coding is not chunked.
  expect_refused("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: tete\r\n"
                 "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n" + smuggled,
                 400);
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

TEST_F(HostileClient, ConflictingContentLengthsAre400) {
  const std::string smuggled = "GET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: smuggled\r\n\r\n";
  const std::string body = std::string(kChat) + smuggled;
  expect_refused("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: clcl\r\n"
                 "Content-Length: " + std::to_string(kChat.size()) + "\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body,
                 400);
  expect_refused("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: cllist\r\n"
                 "Content-Length: " + std::to_string(kChat.size()) + ", " + std::to_string(body.size()) +
                     "\r\n\r\n" + body,
                 400);
  expect_refused("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: clneg\r\n"
                 "Content-Length: -1\r\n\r\n" + body,
                 400);
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

// A Transfer-Encoding whose last coding is not chunked leaves the body's
// length unknown (RFC 9112 6.3): Beast would read no body at all, and the
// body would be served as the next request. Refused, whatever comes after.
TEST_F(HostileClient, TransferEncodingNotEndingInChunkedIs400AndSmugglesNothing) {
  const std::string smuggled = chat_request("smuggled");
  for (const std::string coding : {"identity", "gzip", "xchunked", "chunked, identity", "chunked, chunked"}) {
    SCOPED_TRACE(coding);
    expect_refused("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: te\r\n"
                   "Transfer-Encoding: " + coding + "\r\n\r\n" + smuggled,
                   400);
  }
  // chunked last, after a coding the warden does not decode: 501.
  expect_refused("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: tegz\r\n"
                 "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + smuggled,
                 501);
  // HTTP/1.0 has no Transfer-Encoding: its framing is faulty (RFC 9112 6.1).
  expect_refused("POST /v1/chat/completions HTTP/1.0\r\nHost: 127.0.0.1\r\nx-tag: te10\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
                 400);
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

TEST_F(HostileClient, HostMustBeThereOnceInHttp11) {
  const std::string body(kChat);
  const std::string rest = "x-tag: host\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  expect_refused("POST /v1/chat/completions HTTP/1.1\r\n" + rest, 400);
  expect_refused("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nHost: b\r\n" + rest, 400);
  // HTTP/1.0 did not require it.
  RawClient c{port()};
  ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.0\r\nx-tag: after-10\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body));
  auto r = c.read_response(5s);
  ASSERT_TRUE(r) << c.unread().substr(0, 200);
  EXPECT_EQ(r->status, 200) << r->body;
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

// Errors found while reading the header answer in the dialect of the route
// the request line named.
TEST_F(HostileClient, HeaderErrorsAnswerInTheRoutesDialect) {
  RawClient c{port()};
  c.send("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Note: a\x01b\r\nContent-Length: 2\r\n\r\n{}");
  auto r = c.read_response(3s);
  ASSERT_TRUE(r) << c.unread().substr(0, 200);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find(R"("type":"error")"), std::string::npos) << r->body;
  RawClient t{port()};
  t.send("POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n"
         "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  r = t.read_response(3s);
  ASSERT_TRUE(r) << t.unread().substr(0, 200);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find(R"("type":"error")"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("Transfer-Encoding"), std::string::npos) << r->body;
  expect_still_serving();
}

// ------------------------------------------------------------ header injection

// A control character in a header value must either be refused or reach the
// backend inside that one header, never as a header line of its own.
TEST_F(HostileClient, ControlCharactersInHeaderValuesNeverBecomeHeaders) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bare-cr", std::string("X-Note: a\rInjected: cr\r\n")},
      {"bare-lf", std::string("X-Note: a\nInjected: lf\r\n")},
      {"nul", std::string("X-Note: a\0Injected: nul\r\n", 25)},
      {"session-cr", std::string("session-id: s\rX-data-parallel-rank: 1\r\n")},
  };
  int refused = 0;
  for (const auto& [name, header] : cases) {
    SCOPED_TRACE(name);
    RawClient c{port()};
    c.send(chat_request("inj-" + name, header));
    auto r = c.read_response(3s);
    ASSERT_TRUE(r) << "no reply; got: " << c.unread().substr(0, 200);
    if (r->status == 400) {
      ++refused;
      EXPECT_TRUE(c.wait_closed(3s));
    } else {
      EXPECT_EQ(r->status, 200) << r->body;
    }
  }
  for (const auto& req : backend_.requests()) {
    const std::string low = lower_ascii(req);
    EXPECT_EQ(low.find("\r\ninjected:"), std::string::npos) << "a header was injected upstream:\n" << req;
    EXPECT_EQ(low.find('\0'), std::string::npos) << "NUL forwarded upstream:\n" << req;
    EXPECT_FALSE(has_bare_cr_or_lf(req.substr(0, req.find("\r\n\r\n"))))
        << "a bare CR or LF forwarded upstream:\n" << req;
  }
  // The CRLF in the target stays percent-encoded: no header line from it either.
  RawClient t{port()};
  ASSERT_TRUE(t.send("POST /v1/chat/completions?x=%0d%0aInjected:%20target HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "x-tag: inj-target\r\nContent-Length: " + std::to_string(kChat.size()) + "\r\n\r\n" +
                     std::string(kChat)));
  auto r = t.read_response(3s);
  ASSERT_TRUE(r);
  for (const auto& req : backend_.requests())
    EXPECT_EQ(lower_ascii(req).find("\r\ninjected:"), std::string::npos) << req;
  std::printf("[ info ] %d of %zu control-character cases refused with 400\n", refused, cases.size());
  expect_still_serving();
}

// ------------------------------------------------------------ chunked bodies

TEST_F(HostileClient, InvalidChunkedBodiesAre400) {
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: badchunk\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not hex", "zz\r\nabc\r\n0\r\n\r\n"},
      {"chunk longer than its size", "2\r\nabc\r\n0\r\n\r\n"},
      {"no CRLF after data", "3\r\nabcXY0\r\n\r\n"},
      {"negative size", "-3\r\nabc\r\n0\r\n\r\n"},
      {"size with spaces", "3 3\r\nabc\r\n0\r\n\r\n"},
  };
  for (const auto& [name, body] : cases) {
    SCOPED_TRACE(name);
    RawClient c{port()};
    c.send(head + body);
    auto r = c.read_response(3s);
    ASSERT_TRUE(r) << "no reply; got: " << c.unread().substr(0, 200);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_TRUE(c.wait_closed(3s));
  }
  // Bare LF line ends: never a complete chunk, so it is refused or times out.
  {
    RawClient c{port()};
    c.send(head + "3\nabc\n0\n\n");
    auto r = c.read_response(3s);
    ASSERT_TRUE(r) << "no reply; got: " << c.unread().substr(0, 200);
    EXPECT_TRUE(r->status == 400 || r->status == 408) << r->status;
    EXPECT_TRUE(c.wait_closed(3s));
  }
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

// Beast bounds a chunked body's data (max_body_bytes) but not a chunk's size
// line, its extensions or the trailer: those are bounded by the header limit
// (8 KiB here), so memory cannot grow while the client keeps sending.
TEST_F(HostileClient, ChunkSizeLinesAndTrailersAreBounded) {
  const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: longchunk\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n";
  const std::string filler(256 * 1024, 'a');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"extension", "5;ext=" + filler},
      {"leading zeros", std::string(256 * 1024, '0')},
      {"trailer", "0\r\nX-Trailer: " + filler},
  };
  for (const auto& [name, body] : cases) {
    SCOPED_TRACE(name);
    RawClient c{port()};
    c.send(head + body);  // the warden may refuse while this is still being sent
    auto r = c.read_response(3s);
    ASSERT_TRUE(r) << "no reply; got: " << c.unread().substr(0, 200);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find("too long"), std::string::npos) << r->body;
    EXPECT_TRUE(c.wait_closed(3s));
  }
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

// "Expect: 100-continue" is matched whatever its case (RFC 9110: case-insensitive).
TEST_F(HostileClient, ExpectContinueInAnyCase) {
  const std::string body(kChat);
  RawClient c{port()};
  ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: after-expect\r\n"
                     "Expect: 100-Continue\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n"));
  EXPECT_TRUE(c.wait_for("HTTP/1.1 100 Continue\r\n\r\n", 3s)) << c.unread();
  ASSERT_TRUE(c.send(body));
  auto r = c.read_response(5s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

// A chunked body's trailer fields come after the checks the header gets (API
// key, refused fields, session id, rank): they are dropped, neither forwarded
// nor read as header fields.
TEST_F(HostileClient, ValidChunkedBodyIsForwardedWithContentLengthOnlyAndNoTrailer) {
  const std::string body(kChat);
  const std::string a = body.substr(0, 10), b = body.substr(10);
  char sa[16], sb[16];
  std::snprintf(sa, sizeof sa, "%zx", a.size());
  std::snprintf(sb, sizeof sb, "%zx;ext=1", b.size());
  RawClient c{port()};
  ASSERT_TRUE(
      c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: after-chunked\r\n"
             "Transfer-Encoding: chunked\r\n\r\n" +
             std::string(sa) + "\r\n" + a + "\r\n" + std::string(sb) + "\r\n" + b + "\r\n0\r\n" +
             "X-data-parallel-rank: 3\r\nX-Trailer-Tag: seen\r\n\r\n"));
  auto r = c.read_response(5s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto seen = backend_.requests();
  ASSERT_EQ(seen.size(), 1u);
  const std::string head = seen[0].substr(0, seen[0].find("\r\n\r\n"));
  EXPECT_EQ(raw_header(head, "transfer-encoding"), std::nullopt) << head;
  // The trailer's fields are dropped: neither forwarded nor read as the rank.
  EXPECT_EQ(raw_header(head, "x-trailer-tag"), std::nullopt) << head;
  EXPECT_NE(raw_header(head, "x-data-parallel-rank"), "3") << head;
  EXPECT_EQ(raw_header(head, "content-length"), std::to_string(body.size())) << head;
  EXPECT_EQ(seen[0].substr(seen[0].find("\r\n\r\n") + 4), body);
  expect_still_serving();
}

// Many trailer fields, then one that does not parse: a 400 in the route's
// dialect. Before trailer fields were dropped (they come after the header's
// checks: ValidChunkedBody… above), they were added to the request's store,
// which could move, and this 400 read the target from where it had been.
TEST_F(HostileClient, ABadTrailerFieldAfterManyIs400InTheRoutesDialect) {
  const std::string body(kChat);
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size());
  const std::string chunked = std::string(size) + "\r\n" + body + "\r\n0\r\n";
  std::string trailer;
  for (int i = 0; i < 64; ++i) trailer += "X-Trailer-" + std::to_string(i) + ": some value\r\n";
  RawClient c{port()};
  c.send(
      "POST /v1/messages?beta=true HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: badtrailer\r\n"
      "Transfer-Encoding: chunked\r\n\r\n" +
      chunked + trailer + "not a field\r\n\r\n");
  auto r = c.read_response(3s);
  ASSERT_TRUE(r) << "no reply; got: " << c.unread().substr(0, 200);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("\"type\":\"error\""), std::string::npos)
      << "Anthropic's shape: " << r->body;
  EXPECT_TRUE(c.wait_closed(3s));
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

// ------------------------------------------------------------ pipelining

TEST_F(HostileClient, PipelinedRequestsAreAnsweredInOrder) {
  RawClient c{port()};
  ASSERT_TRUE(c.send(chat_request("after-p1") + "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" +
                     chat_request("after-p2") + "GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" +
                     chat_request("after-p3", "Connection: close\r\n")));
  std::vector<HttpResponse> replies;
  for (int i = 0; i < 5; ++i) {
    auto r = c.read_response(5s);
    ASSERT_TRUE(r) << "reply " << i << " missing; got: " << c.unread().substr(0, 200);
    replies.push_back(*r);
  }
  EXPECT_EQ(replies[0].status, 200);
  EXPECT_EQ(replies[0].body, R"({"tag":"after-p1"})");
  EXPECT_EQ(replies[1].status, 200);
  EXPECT_NE(replies[1].body.find("ok"), std::string::npos) << replies[1].body;
  EXPECT_EQ(replies[2].status, 200);
  EXPECT_EQ(replies[2].body, R"({"tag":"after-p2"})");
  EXPECT_EQ(replies[3].status, 404);
  EXPECT_EQ(replies[4].status, 200);
  EXPECT_EQ(replies[4].body, R"({"tag":"after-p3"})");
  EXPECT_TRUE(c.wait_closed(3s)) << "Connection: close on the last request was not honoured";
  EXPECT_TRUE(c.unread().empty());
  EXPECT_EQ(backend_.requests().size(), 3u);
  expect_still_serving();
}

// A pipelined request after a refused one is never processed.
TEST_F(HostileClient, NothingAfterARefusalIsServed) {
  RawClient c{port()};
  c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab" +
         chat_request("smuggled"));
  auto r = c.read_response(3s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_TRUE(c.wait_closed(3s));
  EXPECT_TRUE(c.unread().empty()) << c.unread();
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

// ------------------------------------------------------------ HEAD and HTTP/1.0

// A HEAD is answered as its GET, header only: the next reply on the
// connection is not taken for its body.
TEST_F(HostileClient, HeadAnswersTheGetsHeaderWithoutABody) {
  for (const std::string path : {"/health", "/v1/models", "/metrics", "/", "/api/models"}) {
    SCOPED_TRACE(path);
    RawClient c{port()};
    ASSERT_TRUE(c.send("HEAD " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                       "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    auto head = c.read_response(3s, /*to_head=*/true);
    ASSERT_TRUE(head) << c.unread().substr(0, 200);
    auto get = c.read_response(3s);
    ASSERT_TRUE(get) << "the GET after the HEAD: " << c.unread().substr(0, 200);
    EXPECT_EQ(head->status, 200);
    EXPECT_EQ(get->status, 200);
    EXPECT_TRUE(get->body.size() > 0);
    EXPECT_EQ(head->headers["content-length"], std::to_string(get->body.size()));
    EXPECT_EQ(head->headers["content-type"], get->headers["content-type"]);
  }
  // A forwarded route takes POST only.
  RawClient c{port()};
  ASSERT_TRUE(c.send("HEAD /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  auto r = c.read_response(3s, /*to_head=*/true);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  r = c.read_response(3s);
  ASSERT_TRUE(r) << c.unread().substr(0, 200);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("ok"), std::string::npos) << r->body;
  // Refused while its header was read (no Host): the error's header alone.
  RawClient bad{port()};
  ASSERT_TRUE(bad.send("HEAD /health HTTP/1.1\r\n\r\n"));
  auto refused = bad.read_response(3s, /*to_head=*/true);
  ASSERT_TRUE(refused) << bad.unread().substr(0, 200);
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(refused->headers["content-length"], "0");
  EXPECT_TRUE(bad.wait_closed(3s));
  EXPECT_EQ(bad.unread(), "") << "no body after a HEAD's header";
  // Refused before its header was parsed at all (over max_header_bytes).
  RawClient big{port()};
  ASSERT_TRUE(big.send(
      "HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(16 * 1024, 'a') + "\r\n\r\n"));
  auto too_large = big.read_response(3s, /*to_head=*/true);
  ASSERT_TRUE(too_large) << big.unread().substr(0, 200);
  EXPECT_EQ(too_large->status, 431);
  EXPECT_TRUE(big.wait_closed(3s));
  EXPECT_EQ(big.unread(), "") << "no body after a HEAD's header";
  expect_backend_saw_nothing_else();
}

// An HTTP/1.0 client keeps its connection only when it asked to and was told so.
TEST_F(HostileClient, Http10KeepAliveIsSaidAloud) {
  RawClient c{port()};
  ASSERT_TRUE(c.send("GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  auto r = c.read_response(3s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(lower_ascii(r->headers["connection"]), "keep-alive");
  ASSERT_TRUE(c.send("GET /health HTTP/1.0\r\n\r\n"));
  r = c.read_response(3s);
  ASSERT_TRUE(r) << "the kept connection did not serve a second request";
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(lower_ascii(r->headers["connection"]), "keep-alive");
  EXPECT_TRUE(c.wait_closed(3s)) << "HTTP/1.0 without keep-alive: closed after the reply";
}

// ------------------------------------------------------------ idle floods

TEST_F(HostileClient, ThousandsOfIdleConnectionsHitTheLimitAndNothingBreaks) {
  // The read timeout is long here so that the idle connections stay.
  warden_.reset();
  start({.client_read = "30s", .max_connections = 100});
  rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  if (nofile.rlim_cur < 2500 && nofile.rlim_max >= 2500) {
    nofile.rlim_cur = std::min<rlim_t>(nofile.rlim_max, 4096);
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (nofile.rlim_cur < 2500) GTEST_SKIP() << "needs 2500 descriptors, has " << nofile.rlim_cur;

  constexpr int kIdle = 2000;
  std::vector<std::unique_ptr<RawClient>> idle;
  idle.reserve(kIdle);
  for (int i = 0; i < kIdle; ++i) idle.push_back(std::make_unique<RawClient>(port()));

  // The warden keeps 100 and closes the rest as it accepts them.
  auto count_open = [&] {
    int open = 0;
    for (auto& c : idle)
      if (!c->closed() && !c->wait_closed(0ms)) ++open;
    return open;
  };
  int open = 0;
  EXPECT_TRUE(eventually([&] { return (open = count_open()) <= 100; }, 15s)) << open << " still open";
  std::this_thread::sleep_for(200ms);
  open = count_open();
  EXPECT_EQ(open, 100) << "the limit should be used up, and not exceeded";

  // While full, a new connection is closed without a reply.
  {
    RawClient extra{port()};
    extra.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    EXPECT_TRUE(extra.wait_closed(5s));
    EXPECT_EQ(extra.unread(), "");
  }

  // Once the idle ones go, new connections are served again.
  idle.clear();
  EXPECT_TRUE(eventually(
      [&] {
        RawClient c{port()};
        if (!c.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")) return false;
        auto r = c.read_response(1s);
        return r && r->status == 200;
      },
      10s));
  expect_still_serving();
}

// ------------------------------------------------------------ path traversal

TEST_F(HostileClient, DashboardPathsNeverReachTheFilesystem) {
  const std::vector<std::string> targets = {
      "/../../../../etc/passwd",
      "/ui/../../../../etc/passwd",
      "/ui/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
      "/ui/..%2f..%2f..%2fetc%2fpasswd",
      "/ui/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
      "/assets/../../etc/passwd",
      "/ui//etc/passwd",
      "/ui/../src/proxy/warden.cpp",
      "/ui/..\\..\\..\\etc\\passwd",
      "/ui/index.html%00.png",
      "/ui/./index.html",
      "//etc/passwd",
      "/etc/passwd",
      "http://127.0.0.1/../../etc/passwd",
      "/ui/%252e%252e/etc/passwd",
      "/ui/....//....//etc/passwd",
  };
  for (const auto& target : targets) {
    SCOPED_TRACE(target);
    RawClient c{port()};
    ASSERT_TRUE(c.send("GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
    auto r = c.read_response(3s);
    ASSERT_TRUE(r) << c.unread().substr(0, 200);
    EXPECT_TRUE(is_client_error(r->status)) << r->status << " " << r->body.substr(0, 200);
    EXPECT_EQ(r->body.find("root:"), std::string::npos);
    EXPECT_EQ(r->body.find("#include"), std::string::npos);
  }
  // Paths under a page route are the page itself (history routing), not a file.
  RawClient c{port()};
  ASSERT_TRUE(c.send("GET /models/../../etc/passwd HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
  auto r = c.read_response(3s);
  ASSERT_TRUE(r);
  if (r->status == 200) {
    EXPECT_NE(r->body.find("<!doctype html"), std::string::npos) << r->body.substr(0, 200);
  }
  EXPECT_EQ(r->body.find("root:"), std::string::npos);
  expect_still_serving();
}

}  // namespace
}  // namespace lmwarden::testing
