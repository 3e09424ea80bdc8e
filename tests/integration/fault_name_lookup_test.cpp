// A backend named by host name whose DNS server does not answer: the
// connect timeout bounds the name lookup as it bounds the connect, rather
// than the resolver's own timeout (seconds times its attempts) holding each
// request. The warden runs as a process of its own in a mount namespace of
// its own, where /etc/resolv.conf names a loopback address on which this test
// reads the queries and answers none.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "scratch.h"
#include "serve_process.h"
#include "sim_test_client.h"

namespace lmwarden::testing {
namespace {

constexpr const char* kUnshare = "/usr/bin/unshare";
constexpr const char* kSilentServer = "127.0.0.2";

// A UDP socket on port 53 of `address` that reads what comes and answers
// nothing. Needs root (a port below 1024); unusable() says why when it is.
class SilentDnsServer {
 public:
  explicit SilentDnsServer(const char* address) : fd_(::socket(AF_INET, SOCK_DGRAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(53);
    ::inet_pton(AF_INET, address, &a.sin_addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      unusable_ = std::string("cannot bind ") + address + ":53/udp: " + std::strerror(errno);
  }
  ~SilentDnsServer() {
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& unusable() const { return unusable_; }
  // The queries that have come so far, read and dropped.
  int queries() {
    char datagram[512];
    while (::recv(fd_, datagram, sizeof datagram, MSG_DONTWAIT) >= 0) ++queries_;
    return queries_;
  }

 private:
  int fd_;
  int queries_ = 0;
  std::string unusable_;
};

TEST(FaultNameLookup, ALookupThatGetsNoAnswerEndsAtTheConnectTimeout) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: a mount namespace and port 53";
  if (!std::filesystem::exists(kUnshare)) GTEST_SKIP() << kUnshare << " (util-linux) is missing";
  SilentDnsServer dns{kSilentServer};
  if (!dns.unusable().empty()) GTEST_SKIP() << dns.unusable();

  TempDir dir{"lmwarden-lookup"};
  // The resolver's own timeout: 5 s per try, as glibc's default.
  std::ofstream(dir.file("resolv.conf"))
      << "nameserver " << kSilentServer << "\noptions timeout:5 attempts:1\n";
  std::ofstream(dir.file("lmwarden.yaml"))
      << "listen: 127.0.0.1:0\n"
         "scrape_interval: 60s\n"
         "retries: 0\n"
         "timeouts:\n  connect: 300ms\n"
         "models:\n  - name: m\n    backends:\n"
         "      - url: http://backend.lmwarden-test.example:8000\n";
  const std::string serve = std::string("mount --bind '") + dir.file("resolv.conf") +
                            "' /etc/resolv.conf && exec '" + LMWARDEN_BINARY +
                            "' serve --config '" + dir.file("lmwarden.yaml") + "'";
  SimProcess warden({"--mount", "sh", "-c", serve},
                    ProcessOptions{.output_file = dir.file("serve.log"), .binary = kUnshare});

  const auto start = std::chrono::steady_clock::now();
  const HttpReply reply = http_request(warden.port(), http::verb::post, "/v1/chat/completions",
                                       chat_body(false), {{"content-type", "application/json"}});
  const auto took = std::chrono::steady_clock::now() - start;

  EXPECT_EQ(reply.status, 502u) << reply.body;
  EXPECT_NE(reply.body.find("cannot connect to http://backend.lmwarden-test.example:8000"),
            std::string::npos)
      << reply.body;
  // The lookup went to the silent server, and the request ended at the
  // connect timeout rather than at the resolver's 5 s.
  EXPECT_GE(dns.queries(), 1);
  EXPECT_LT(took, std::chrono::milliseconds(3000))
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
  const std::string metrics = http_request(warden.port(), http::verb::get, "/metrics").body;
  EXPECT_NE(metrics.find("lmwarden_upstream_errors_total{model=\"m\",replica=\"0\","
                         "kind=\"connect_timeout\"} 1"),
            std::string::npos)
      << metrics;

  // Nor does a stop wait for the lookup, still under way (Asio's resolver
  // joins its thread, in getaddrinfo, as its io_context shuts down).
  const auto stopping = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(warden.pid(), SIGTERM), 0);
  const auto status = exit_status(warden, std::chrono::seconds(20));
  const auto stop_took = std::chrono::steady_clock::now() - stopping;
  ASSERT_TRUE(status) << warden.output();
  EXPECT_EQ(*status, 0) << warden.output();
  EXPECT_LT(stop_took, std::chrono::milliseconds(3000))
      << std::chrono::duration_cast<std::chrono::milliseconds>(stop_took).count() << " ms";
}

}  // namespace
}  // namespace lmwarden::testing
