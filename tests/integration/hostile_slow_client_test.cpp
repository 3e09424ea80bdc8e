// Slow clients against an in-process warden over real sockets: headers and
// bodies dribbled in, kept-alive and silent connections, each held to
// client_read or client_idle, and the warden still serving after.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "hostile_client_fixture.h"

namespace lmwarden::testing {
namespace {

// ------------------------------------------------------------ slow clients

// One header byte every 100 ms (for up to 5 s): never a whole header, always
// some progress. Returns the reply the server sent meanwhile, if any.
std::optional<HttpResponse> dribble_header_bytes(RawClient& c) {
  std::optional<HttpResponse> r;
  for (int i = 0; i < 50 && !r; ++i) {
    if (!c.send("X")) break;
    r = c.read_response(100ms);
  }
  if (!r) r = c.read_response(1s);
  return r;
}

TEST_F(HostileClient, SlowHeadersAre408AfterTheReadTimeout) {
  RawClient c{port()};
  ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  const auto started = std::chrono::steady_clock::now();
  std::optional<HttpResponse> r = dribble_header_bytes(c);
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_TRUE(r) << "no 408; got: " << c.unread().substr(0, 200);
  EXPECT_EQ(r->status, 408);
  EXPECT_TRUE(c.wait_closed(3s));
  EXPECT_LT(took, 3s) << "a dribbling client was held past the 500 ms read timeout";
  expect_still_serving();
  EXPECT_EQ(backend_.requests().size(), 1u);
}

TEST_F(HostileClient, DribblingAfterTheRefusalDoesNotHoldTheConnection) {
  RawClient c{port()};
  ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "));
  const auto started = std::chrono::steady_clock::now();
  // Keep sending a byte every 50 ms, through the 408 and the lingering close.
  while (!c.closed() && std::chrono::steady_clock::now() - started < 8s) {
    c.send("x");
    c.wait_closed(50ms);
  }
  EXPECT_TRUE(c.closed());
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
  auto r = c.read_response(0ms);
  ASSERT_TRUE(r) << c.unread().substr(0, 200);
  EXPECT_EQ(r->status, 408);
  expect_still_serving();
}

TEST_F(HostileClient, SlowHeadersOnAKeptAliveConnectionAre408Too) {
  RawClient c{port()};
  ASSERT_TRUE(c.send(chat_request("after-first")));
  auto first = c.read_response(5s);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  // Idle a while (within keep-alive), then dribble the next request.
  std::this_thread::sleep_for(700ms);
  EXPECT_FALSE(c.wait_closed(0ms))
      << "an idle kept-alive connection was closed at the read timeout";
  ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\n"));
  const auto started = std::chrono::steady_clock::now();
  std::optional<HttpResponse> r = dribble_header_bytes(c);
  ASSERT_TRUE(r) << "no 408; got: " << c.unread().substr(0, 200);
  EXPECT_EQ(r->status, 408);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
  expect_still_serving();
}

// A kept-alive connection waits client_idle for its next request, not
// client_read: here a wait far longer than client_read is kept, then closed.
// The times count from before the request was sent: the warden's idle clock
// starts when it has sent the reply, before this client reads it, perhaps
// long before on a busy machine.
TEST_F(HostileClient, KeptAliveConnectionIsClosedAtClientIdle) {
  warden_.reset();
  start({.client_read = "200ms", .client_idle = "1200ms"});
  RawClient c{port()};
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_TRUE(c.send(chat_request("after-idle")));
  ASSERT_TRUE(c.read_response(5s));
  // Open still 800 ms from the sending, which client_idle cannot have ended;
  // client_read would have, whenever the reply came within 600 ms.
  const auto open_until = sent + 800ms;
  EXPECT_FALSE(c.wait_closed(std::chrono::duration_cast<std::chrono::milliseconds>(
      open_until - std::chrono::steady_clock::now())))
      << "closed at client_read, not client_idle";
  EXPECT_TRUE(c.wait_closed(5s));
  EXPECT_GE(std::chrono::steady_clock::now() - sent, 1s);
  EXPECT_TRUE(c.unread().empty()) << c.unread();
  expect_still_serving();
}

TEST_F(HostileClient, SilentConnectionIsClosedAfterTheReadTimeout) {
  RawClient c{port()};
  const auto started = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.wait_closed(5s));
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_GE(took, 400ms);
  EXPECT_LT(took, 3s);
  EXPECT_TRUE(c.unread().empty()) << "nothing was asked, nothing should be answered";
  expect_still_serving();
}

TEST_F(HostileClient, SlowBodyIs408AndNeverForwarded) {
  RawClient c{port()};
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-tag: slow\r\nContent-Length: "
      "200\r\n\r\n";
  ASSERT_TRUE(c.send(head + std::string(kChat.substr(0, 20))));
  auto r = c.read_response(3s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);
  EXPECT_TRUE(c.wait_closed(3s));
  expect_still_serving();
  expect_backend_saw_nothing_else();
}

}  // namespace
}  // namespace lmwarden::testing
