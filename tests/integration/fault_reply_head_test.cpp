// Reply headers a backend should not send, over real sockets: what the
// client gets instead, and that the warden goes on serving. (Other ways a
// backend fails: fault_backend_test.cpp.)
#include <gtest/gtest.h>

#include <string>

#include "bad_server.h"
#include "http_test_client.h"
#include "running_warden.h"

namespace lmwarden::testing {
namespace {

constexpr const char* kChat = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";

// One replica on a server that is no vLLM: probed once a minute, so that it
// stays in service for the test.
config::Config one_server(std::uint16_t port) {
  return make_config({{port, 1}}, std::nullopt, "scrape_interval: 60s\n");
}

HttpReply chat(std::uint16_t port) {
  return http_request(port, http::verb::post, "/v1/chat/completions", kChat,
                      {{"session-id", "head"}});
}

// The warden sends no Upgrade, so a 101 is no switch it asked for (RFC 9110
// §15.2.2): a bad reply, not relayed as if it were the reply.
TEST(FaultReplyHead, AnUnaskedSwitchOfProtocolsIs502) {
  BadServer server{BadServer::Behaviour::kReply,
                   "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\n\r\n"};
  RunningWarden warden{one_server(server.port())};
  const auto r = chat(warden.port());
  EXPECT_EQ(r.status, 502u) << r.body;
  EXPECT_NE(r.body.find("bad reply from"), std::string::npos) << r.body;
  EXPECT_EQ(warden.card()["in_flight"], 0);
}

// A 204 declares no length (RFC 9110 §8.6); one that does is relayed
// without it, and with its other fields.
TEST(FaultReplyHead, A204IsRelayedWithoutTheLengthItDeclared) {
  BadServer server{BadServer::Behaviour::kReply,
                   "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-Kept: 1\r\n\r\n"};
  RunningWarden warden{one_server(server.port())};
  const auto r = chat(warden.port());
  EXPECT_EQ(r.status, 204u) << r.body;
  EXPECT_EQ(r.headers.count("content-length"), 0u);
  EXPECT_EQ(r.headers.count("transfer-encoding"), 0u);
  ASSERT_EQ(r.headers.count("x-kept"), 1u);
  EXPECT_EQ(r.headers.find("x-kept")->second, "1");
  EXPECT_TRUE(r.body.empty()) << r.body;
}

// A body coded with something the relay does not undo (gzip), or framed two
// ways at once: a bad reply, not the coded bytes with nothing saying so.
TEST(FaultReplyHead, ATransferCodingOtherThanChunkedIs502) {
  const std::string cases[] = {
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhello",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\nhello",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n0\r\n\r\n",
  };
  for (const std::string& reply : cases) {
    SCOPED_TRACE(reply);
    BadServer server{BadServer::Behaviour::kReply, reply};
    RunningWarden warden{one_server(server.port())};
    const auto r = chat(warden.port());
    EXPECT_EQ(r.status, 502u) << r.body;
    EXPECT_NE(r.body.find("bad reply from"), std::string::npos) << r.body;
  }
  // Chunks alone are relayed.
  BadServer chunked{BadServer::Behaviour::kReply,
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"};
  RunningWarden warden{one_server(chunked.port())};
  const auto r = chat(warden.port());
  EXPECT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, "hello");
}

}  // namespace
}  // namespace lmwarden::testing
