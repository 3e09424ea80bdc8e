// A backend named by host name whose DNS server is slow or does not answer:
// the connect timeout bounds the name lookup as it bounds the connect, rather
// than the resolver's own timeout (seconds times its attempts) holding each
// request; a lookup answered after its caller gave up is kept for the next;
// and a stop does not wait for a lookup. The same for the shared homes'
// Redis named by host name. The warden runs as a process of its
// own in a mount namespace of its own, where /etc/resolv.conf names a
// loopback address on which this test reads the queries and answers them
// late or never.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "fake_vllm.h"
#include "metric_probe.h"
#include "redis_server.h"
#include "scratch.h"
#include "serve_process.h"
#include "sim_test_client.h"

namespace lmwarden::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kUnshare = "/usr/bin/unshare";
constexpr const char* kServerAddress = "127.0.0.2";
constexpr const char* kBackendName = "backend.lmwarden-test.example";
constexpr const char* kRedisName = "redis.lmwarden-test.example";

// A DNS server on port 53 of 127.0.0.2 that reads every query and answers
// each `delay` later (127.0.0.1 for an A query, no address for the others),
// or never. Needs root (a port below 1024); unusable() says why when it is.
class FakeDnsServer {
 public:
  explicit FakeDnsServer(std::optional<milliseconds> delay)
      : delay_(delay), fd_(::socket(AF_INET, SOCK_DGRAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(53);
    ::inet_pton(AF_INET, kServerAddress, &a.sin_addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      unusable_ = std::string("cannot bind ") + kServerAddress + ":53/udp: " + std::strerror(errno);
      return;
    }
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeDnsServer() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& unusable() const { return unusable_; }
  int queries() const { return queries_; }
  int answered() const { return answered_; }

 private:
  struct Pending {
    Clock::time_point due;
    std::string reply;
    sockaddr_in from;
  };

  void serve() {
    std::vector<Pending> pending;
    while (!stopping_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 5) == 1) {
        char query[512];
        sockaddr_in from{};
        socklen_t from_size = sizeof from;
        const ssize_t n =
            ::recvfrom(fd_, query, sizeof query, 0, reinterpret_cast<sockaddr*>(&from), &from_size);
        if (n > 12) {
          ++queries_;
          if (delay_)
            pending.push_back({Clock::now() + *delay_, reply_to({query, std::size_t(n)}), from});
        }
      }
      for (auto it = pending.begin(); it != pending.end();) {
        if (Clock::now() < it->due) {
          ++it;
          continue;
        }
        ::sendto(fd_, it->reply.data(), it->reply.size(), 0,
                 reinterpret_cast<const sockaddr*>(&it->from), sizeof it->from);
        ++answered_;
        it = pending.erase(it);
      }
    }
  }

  // The query's header and question, as a reply: 127.0.0.1 for an A query,
  // none for another type (such as AAAA).
  static std::string reply_to(std::string_view query) {
    std::size_t end = 12;
    while (end < query.size() && query[end] != 0) end += 1 + static_cast<unsigned char>(query[end]);
    end += 1 + 4;  // the root label, QTYPE and QCLASS
    if (end > query.size()) return {};
    const bool a_query = query[end - 4] == 0 && query[end - 3] == 1;
    std::string reply(query.substr(0, end));
    reply[2] = static_cast<char>(0x81);  // a response, recursion desired
    reply[3] = static_cast<char>(0x80);  // recursion available, no error
    const char counts[] = {0, 1, 0, static_cast<char>(a_query ? 1 : 0), 0, 0, 0, 0};
    reply.replace(4, 8, counts, 8);
    if (a_query) {
      // The question's name (a pointer to offset 12), A, IN, TTL 60 s, 4 bytes.
      const unsigned char answer[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1};
      reply.append(reinterpret_cast<const char*>(answer), sizeof answer);
    }
    return reply;
  }

  std::optional<milliseconds> delay_;
  int fd_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> queries_{0};
  std::atomic<int> answered_{0};
  std::string unusable_;
};

// `lmwarden serve` in a mount namespace whose resolv.conf names the fake
// server (the resolver's own timeout 5 s, one try) and whose nsswitch.conf
// asks /etc/hosts, then DNS. Empty `skip` when it runs.
class WardenBehindFakeDns {
 public:
  explicit WardenBehindFakeDns(const std::string& yaml) {
    std::ofstream(dir_.file("resolv.conf"))
        << "nameserver " << kServerAddress << "\noptions timeout:5 attempts:1\n";
    std::ofstream(dir_.file("nsswitch.conf")) << "hosts: files dns\n";
    std::ofstream(dir_.file("lmwarden.yaml")) << yaml;
    const std::string mounts = "mount --bind '" + dir_.file("resolv.conf") +
                               "' /etc/resolv.conf && mount --bind '" + dir_.file("nsswitch.conf") +
                               "' /etc/nsswitch.conf";
    // Root without CAP_SYS_ADMIN (a container's default) binds port 53 but
    // cannot mount: said as a skip, not a failure.
    if (std::system((std::string(kUnshare) + " --mount sh -c \"" + mounts + "\"").c_str()) != 0) {
      skip = "cannot bind-mount files in a mount namespace of its own here";
      return;
    }
    const std::string serve = mounts + " && exec '" + LMWARDEN_BINARY + "' serve --config '" +
                              dir_.file("lmwarden.yaml") + "'";
    process.emplace(std::vector<std::string>{"--mount", "sh", "-c", serve},
                    ProcessOptions{.output_file = dir_.file("serve.log"), .binary = kUnshare});
  }

  std::string skip;
  std::optional<SimProcess> process;

 private:
  TempDir dir_{"lmwarden-lookup"};
};

// Why this host cannot run these tests; "" when it can.
std::string cannot_run_here() {
  if (::geteuid() != 0) return "needs root: a mount namespace and port 53";
  if (!std::filesystem::exists(kUnshare)) return std::string(kUnshare) + " (util-linux) is missing";
  return "";
}

std::string config(std::uint16_t backend_port) {
  return "listen: 127.0.0.1:0\nscrape_interval: 60s\nretries: 0\ntimeouts:\n  connect: 300ms\n"
         "models:\n  - name: m\n    backends:\n      - url: http://" +
         std::string(kBackendName) + ":" + std::to_string(backend_port) + "\n";
}

HttpReply chat(std::uint16_t port) {
  return http_request(port, http::verb::post, "/v1/chat/completions", chat_body(false),
                      {{"content-type", "application/json"}});
}

long long ms(Clock::duration d) {
  return std::chrono::duration_cast<milliseconds>(d).count();
}

// SIGTERM with nothing in flight: exit 0 within 3 s, where a lookup waited
// for would hold the process for the resolver's 5 s.
void expect_a_prompt_stop(SimProcess& serve) {
  const auto stopping = Clock::now();
  serve.signal(SIGTERM);
  const auto status = exit_status(serve, std::chrono::seconds(20));
  const auto stop_took = Clock::now() - stopping;
  ASSERT_TRUE(status) << serve.output();
  EXPECT_EQ(*status, 0) << serve.output();
  EXPECT_LT(stop_took, milliseconds(3000)) << ms(stop_took) << " ms";
}

TEST(FaultNameLookup, ALookupThatGetsNoAnswerEndsAtTheConnectTimeoutAndDelaysNoStop) {
  if (const auto why = cannot_run_here(); !why.empty()) GTEST_SKIP() << why;
  FakeDnsServer dns{std::nullopt};
  if (!dns.unusable().empty()) GTEST_SKIP() << dns.unusable();
  WardenBehindFakeDns warden{config(8000)};
  if (!warden.skip.empty()) GTEST_SKIP() << warden.skip;
  SimProcess& serve = *warden.process;

  const auto start = Clock::now();
  const HttpReply reply = chat(serve.port());
  const auto took = Clock::now() - start;
  EXPECT_EQ(reply.status, 502u) << reply.body;
  EXPECT_NE(reply.body.find(std::string("cannot connect to http://") + kBackendName +
                            ":8000: the name server gave no answer in time"),
            std::string::npos)
      << reply.body;
  // The lookup went to the silent server, and the request ended at the
  // connect timeout rather than at the resolver's 5 s.
  EXPECT_GE(dns.queries(), 1);
  EXPECT_LT(took, milliseconds(3000)) << ms(took) << " ms";
  // Counted as a failed connect; the server itself is not taken out for it.
  const std::string metrics = http_request(serve.port(), http::verb::get, "/metrics").body;
  EXPECT_NE(metrics.find("lmwarden_upstream_errors_total{model=\"m\",replica=\"0\","
                         "kind=\"connect\"} 1"),
            std::string::npos)
      << metrics;
  const auto card =
      nlohmann::json::parse(http_request(serve.port(), http::verb::get, "/api/models/m").body);
  EXPECT_TRUE(card["replicas"][0]["out_of_service"].is_null()) << card;

  // Nor does a stop wait for the lookup, still under way (Asio's resolver
  // joined its thread, in getaddrinfo, as its io_context shut down).
  expect_a_prompt_stop(serve);
}

// A DNS server slower than timeouts.connect: the first request, with no
// address known yet, fails at the connect timeout; the answer that comes
// after is kept, and the next requests use it at once.
TEST(FaultNameLookup, AnAnswerThatCameTooLateForOneRequestServesTheNext) {
  if (const auto why = cannot_run_here(); !why.empty()) GTEST_SKIP() << why;
  FakeDnsServer dns{milliseconds(1500)};
  if (!dns.unusable().empty()) GTEST_SKIP() << dns.unusable();
  FakeVllm backend{1};
  WardenBehindFakeDns warden{config(backend.port())};
  if (!warden.skip.empty()) GTEST_SKIP() << warden.skip;
  SimProcess& serve = *warden.process;

  EXPECT_EQ(chat(serve.port()).status, 502u);
  ASSERT_TRUE(eventually([&] { return dns.answered() >= 1; })) << "the late answer";
  // Served once the lookup thread has kept the answer (a request made before
  // that may fail at the connect timeout, as the first did).
  ASSERT_TRUE(eventually([&] { return chat(serve.port()).status == 200u; }))
      << "the late answer was not kept";
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    const HttpReply reply = chat(serve.port());
    EXPECT_EQ(reply.status, 200u) << reply.body;
    EXPECT_LT(Clock::now() - start, milliseconds(1000)) << "request " << i << " waited for DNS";
  }
  EXPECT_EQ(backend.seen().size(), 4u);
}

// Redis named by host name, behind the silent DNS server: the store's
// connect gives up at shared_homes.timeout, not at the resolver's 5 s; the
// requests are placed by this warden alone meanwhile; and a stop, which
// joins the store's thread, does not wait for the lookup.
TEST(FaultNameLookup, ARedisWhoseNameGetsNoAnswerHoldsNeitherTheStoreNorAStop) {
  if (const auto why = cannot_run_here(); !why.empty()) GTEST_SKIP() << why;
  FakeDnsServer dns{std::nullopt};
  if (!dns.unusable().empty()) GTEST_SKIP() << dns.unusable();
  FakeVllm backend{1};
  WardenBehindFakeDns warden{
      "listen: 127.0.0.1:0\nscrape_interval: 60s\nshared_homes:\n  redis: redis://" +
      std::string(kRedisName) +
      ":6379\n  timeout: 300ms\nmodels:\n  - name: m\n"
      "    backends:\n      - url: http://127.0.0.1:" +
      std::to_string(backend.port()) + "\n"};
  if (!warden.skip.empty()) GTEST_SKIP() << warden.skip;
  SimProcess& serve = *warden.process;

  // The store's first connect has asked the DNS server, which says nothing.
  ASSERT_TRUE(eventually([&] { return dns.queries() >= 1; })) << serve.output();
  const HttpReply reply =
      http_request(serve.port(), http::verb::post, "/v1/chat/completions", chat_body(false),
                   {{"content-type", "application/json"}, {"session-id", "s-1"}});
  EXPECT_EQ(reply.status, 200u) << reply.body;

  // Stopped while that lookup is under way: the store's thread gives up on
  // it at the timeout, where the resolver would take 5 s.
  expect_a_prompt_stop(serve);
  EXPECT_NE(serve.output().find("shared homes: cannot use redis://" + std::string(kRedisName) +
                                ":6379/0 (the name server gave no answer in time)"),
            std::string::npos)
      << serve.output();
}

// Redis named by host name, behind a DNS server slower than
// shared_homes.timeout: the first connect gives up on the lookup, which goes
// on; the next, a retry_after later, waits for that same lookup rather than
// starting one of its own (which would be as late), and connects.
TEST(FaultNameLookup, ARedisNameAnsweredAfterItsConnectGaveUpServesTheNextConnect) {
  if (const auto why = cannot_run_here(); !why.empty()) GTEST_SKIP() << why;
  FakeDnsServer dns{milliseconds(1500)};
  if (!dns.unusable().empty()) GTEST_SKIP() << dns.unusable();
  RedisServer redis;
  FakeVllm backend{1};
  WardenBehindFakeDns warden{
      "listen: 127.0.0.1:0\nscrape_interval: 60s\nshared_homes:\n  redis: redis://" +
      std::string(kRedisName) + ":" + std::to_string(redis.port()) +
      "\n  timeout: 300ms\nmodels:\n  - name: m\n    backends:\n      - url: "
      "http://127.0.0.1:" +
      std::to_string(backend.port()) + "\n"};
  if (!warden.skip.empty()) GTEST_SKIP() << warden.skip;
  SimProcess& serve = *warden.process;

  ASSERT_TRUE(eventually([&] {
    return metric(serve.port(), "lmwarden_shared_homes_connected") == 1;
  })) << serve.output();
  const std::string log = serve.output();
  EXPECT_NE(log.find("(the name server gave no answer in time)"), std::string::npos) << log;
  EXPECT_NE(log.find("answers again"), std::string::npos) << log;
}

}  // namespace
}  // namespace lmwarden::testing
