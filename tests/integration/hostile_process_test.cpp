// Hostile clients against a real `lmwarden serve` child process: running out
// of file descriptors (the process gets a low RLIMIT_NOFILE), and credentials
// that must never reach its logs even at --log-level trace.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fake_vllm.h"
#include "hostile_client.h"
#include "http_test_client.h"
#include "scratch.h"

namespace lmwarden::testing {
namespace {

std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

// CPU seconds (user + system) the process has used so far.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::vector<std::string> f{std::istream_iterator<std::string>(fields), std::istream_iterator<std::string>()};
  if (f.size() < 13) return 0;
  return static_cast<double>(std::stoull(f[11]) + std::stoull(f[12])) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// One request on a fresh connection; nullopt when no reply came in time.
std::optional<HttpResponse> ask(std::uint16_t port, const std::string& bytes,
                                     std::chrono::milliseconds timeout = 5s) {
  RawClient c{port};
  if (!c.send(bytes)) return std::nullopt;
  return c.read_response(timeout);
}

std::string get_request(std::string_view target) {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
}

int total_in_flight(std::uint16_t port) {
  auto r = ask(port, get_request("/api/models"));
  if (!r || r->status != 200) return -1;
  int n = 0;
  const auto models = nlohmann::json::parse(r->body);
  for (const auto& m : models["models"]) n += m["in_flight"].get<int>();
  return n;
}

TEST(HostileProcess, AcceptUnderDescriptorExhaustionNeitherCrashesNorSpins) {
#if defined(__SANITIZE_ADDRESS__)
  // UBSan's vptr check probes memory through a pipe; with no descriptor left
  // it cannot, and reports a bad vptr on the next unseen virtual call (no
  // suppression applies to an unreadable object). So this runs in the tsan
  // and release builds, not under ASan + UBSan.
  GTEST_SKIP() << "descriptor exhaustion trips UBSan's own vptr probe";
#endif
  FakeVllm backend{2};
  // Engine samples on /metrics, so that the scraper finds the server healthy
  // again once it can open sockets.
  backend.set_engine(0, 0, 0, 0.1, 10, 5);
  backend.set_engine(1, 0, 0, 0.1, 10, 5);
  TempDir dir{"lmwarden-hostile"};
  const std::string config = write_file(dir.file("lmwarden.yaml"),
                                        "listen: 127.0.0.1:0\nthreads: 2\ntimeouts:\n  client_read: 30s\n"
                                        "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:" +
                                            std::to_string(backend.port()) + "\n        data_parallel_size: 2\n");
  constexpr rlim_t kFds = 64;
  SimProcess warden{{"serve", "--config", config},
                    {.output_file = dir.file("warden.log"),
                     .max_open_files = kFds}};
  ASSERT_EQ(ask(warden.port(), get_request("/health")).value_or(HttpResponse{}).status, 200);

  // Far more connections than the warden has descriptors: the first few are
  // accepted and held (the read timeout is long), the rest wait in the backlog.
  std::vector<std::unique_ptr<RawClient>> hogs;
  for (int i = 0; i < 4 * static_cast<int>(kFds); ++i) hogs.push_back(std::make_unique<RawClient>(warden.port()));
  ASSERT_TRUE(eventually([&] { return warden.output().find("accept failed") != std::string::npos; }, 10s))
      << "the warden never ran out of descriptors; log:\n" << warden.output();

  // Out of descriptors, it backs off instead of retrying accept in a tight loop.
  const double cpu_before = cpu_seconds(warden.pid());
  std::this_thread::sleep_for(2s);
  const double cpu_used = cpu_seconds(warden.pid()) - cpu_before;
  EXPECT_LT(cpu_used, 0.5) << "the warden burned " << cpu_used << " s of CPU in 2 s while out of descriptors";
  ASSERT_TRUE(warden.running()) << warden.output();

  // Once the hogs go, it answers again, forwarded requests included.
  hogs.clear();
  EXPECT_TRUE(eventually(
      [&] {
        auto r = ask(warden.port(), get_request("/health"), 1s);
        return r && r->status == 200;
      },
      15s));
  EXPECT_TRUE(eventually(
      [&] {
        auto r = ask(warden.port(), chat_request("after"), 2s);
        return r && r->status == 200;
      },
      15s))
      << warden.output().substr(0, 4000);
  EXPECT_TRUE(eventually([&] { return total_in_flight(warden.port()) == 0; }));
  ASSERT_TRUE(warden.running());
  const int status = warden.terminate();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exit status " << status;
}

// An open-file limit that max_connections may outgrow is said at start (the
// soft limit is first raised to the hard one; here both are 200).
TEST(HostileProcess, ADescriptorLimitTooLowForMaxConnectionsIsSaidAtStart) {
  TempDir dir{"lmwarden-hostile"};
  const std::string config = write_file(dir.file("lmwarden.yaml"),
                                        "listen: 127.0.0.1:0\nlimits:\n  max_connections: 1000\n"
                                        "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:" +
                                            std::to_string(closed_port()) + "\n");
  SimProcess warden{{"serve", "--config", config},
                    {.output_file = dir.file("warden.log"), .max_open_files = 200}};
  EXPECT_TRUE(eventually([&] {
    return warden.output().find("open-file limit 200 is below the 2064 that limits.max_connections 1000") !=
           std::string::npos;
  }, 5s)) << warden.output();
  EXPECT_EQ(ask(warden.port(), get_request("/health")).value_or(HttpResponse{}).status, 200);

  // --check says it as one of its notes, not as a log line.
  const std::string out = dir.file("check.out");
  const int status = std::system(("ulimit -n 200 && timeout 20 " + std::string(LMWARDEN_BINARY) +
                                  " serve --check --config " + config + " >" + out + " 2>&1")
                                     .c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::ifstream in(out);
  const std::string said{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_NE(said.find("\nnote: open-file limit 200 is below the 2064 that limits.max_connections "
                      "1000 may need"),
            std::string::npos)
      << said;
}

// The process's virtual memory size (VmSize), in bytes.
std::size_t virtual_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmSize:")) return std::stoull(line.substr(7)) * 1024;
  return 0;
}

// A client may declare a body as large as max_body_bytes and send none of
// it. The warden's storage for a body grows with the bytes that came, so
// forty such connections hold a few MiB, not forty times 32 MiB of address
// space (which a host with strict overcommit would refuse).
TEST(HostileProcess, ADeclaredBodyTakesMemoryOnlyAsItsBytesCome) {
  FakeVllm backend{1};
  TempDir dir{"lmwarden-hostile"};
  const std::string config = write_file(dir.file("lmwarden.yaml"),
                                        "listen: 127.0.0.1:0\nthreads: 1\ntimeouts:\n  client_read: 30s\n"
                                        "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:" +
                                            std::to_string(backend.port()) + "\n");
  SimProcess warden{{"serve", "--config", config}, {.output_file = dir.file("warden.log")}};
  ASSERT_EQ(ask(warden.port(), get_request("/health")).value_or(HttpResponse{}).status, 200);
  const std::size_t before = virtual_bytes(warden.pid());

  constexpr int kHogs = 40;
  std::vector<std::unique_ptr<RawClient>> hogs;
  for (int i = 0; i < kHogs; ++i) {
    hogs.push_back(std::make_unique<RawClient>(warden.port()));
    ASSERT_TRUE(hogs.back()->send(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 33554432\r\n\r\n{\"model\":\"m\""));
  }
  // Answered after the hogs' headers were read (one thread, in order), then a
  // pause for good measure.
  ASSERT_EQ(ask(warden.port(), get_request("/health")).value_or(HttpResponse{}).status, 200);
  std::this_thread::sleep_for(300ms);
  const std::size_t grown = virtual_bytes(warden.pid()) - before;
  EXPECT_LT(grown, std::size_t{400} << 20)
      << kHogs << " connections that declared 32 MiB bodies grew the warden by " << (grown >> 20) << " MiB";

  // A body past the storage given ahead of its bytes (3 MiB) arrives whole.
  const std::string body = R"({"model":"m","stream":false,"messages":[{"role":"user","content":")" +
                           std::string(3u << 20, 'a') + R"("}]})";
  const auto r = ask(warden.port(), chat_request("large", "", body), 20s);
  ASSERT_TRUE(r.has_value()) << warden.output().substr(0, 4000);
  EXPECT_EQ(r->status, 200) << r->body;
  ASSERT_FALSE(backend.seen().empty());
  EXPECT_TRUE(backend.seen().back().body == body) << "the 3 MiB body reached the backend changed";
  hogs.clear();
  ASSERT_TRUE(warden.running()) << warden.output();
}

TEST(HostileProcess, CredentialsNeverReachTheLogs) {
  FakeVllm backend{2};
  backend.set_engine(0, 0, 0, 0.1, 10, 5);  // healthy to the scraper for the whole test
  backend.set_engine(1, 0, 0, 0.1, 10, 5);
  TempDir dir{"lmwarden-hostile"};
  const std::string config = write_file(
      dir.file("lmwarden.yaml"),
      "listen: 127.0.0.1:0\nthreads: 2\nadmin_token_env: HOSTILE_ADMIN_TOKEN\n"
      "limits:\n  max_header_bytes: 8KiB\ntimeouts:\n  connect: 1s\n  client_read: 2s\n"
      "models:\n"
      "  - name: m\n    api_keys_env: [HOSTILE_CLIENT_KEY]\n    backends:\n      - url: http://127.0.0.1:" +
          std::to_string(backend.port()) + "\n        data_parallel_size: 2\n"
          "  - name: gone\n    backends:\n      - url: http://127.0.0.1:" + std::to_string(closed_port()) + "\n");
  SimProcess warden{{"serve", "--config", config, "--log-level", "trace"},
                    {.output_file = dir.file("warden.log"),
                     .env = {{"HOSTILE_CLIENT_KEY", "s3cr3t-XYZ"}, {"HOSTILE_ADMIN_TOKEN", "admin-token-1"}}}};
  const std::uint16_t port = warden.port();
  const std::string both = "Authorization: Bearer s3cr3t-XYZ\r\nx-api-key: s3cr3t-ABC\r\n";
  const std::string good = "Authorization: Bearer s3cr3t-XYZ\r\n";
  const std::string session = "session-id: s3cr3t-SESSION\r\nX-Claude-Code-Session-Id: s3cr3t-CLAUDE\r\n";

  struct Case {
    std::string name;
    std::string bytes;
    int status;  // 0: any
  };
  const std::string streamed = R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})";
  const std::string gone = R"({"model":"gone","stream":false,"messages":[{"role":"user","content":"hi"}]})";
  const std::vector<Case> cases = {
      {"accepted key", chat_request("ok", good + session), 200},
      {"accepted key, streamed", chat_request("ok-stream", good + session, streamed), 200},
      {"scheme in lower case",
       chat_request("lower", "Authorization: bearer s3cr3t-XYZ\r\n" + session), 200},
      {"good bearer, wrong x-api-key", chat_request("either", both + session), 200},
      {"wrong x-api-key", chat_request("wrong", "x-api-key: s3cr3t-ABC\r\n" + session), 401},
      {"wrong bearer", chat_request("wrong-bearer", "Authorization: Bearer s3cr3t-ABC\r\n"), 401},
      {"backend down", chat_request("gone", both + session, gone), 0},
      {"backend 500", chat_request("fail", good + "x-fake-status: 500\r\n" + session), 0},
      {"malformed JSON", chat_request("bad-json", both, R"({"model":"m",)"), 400},
      {"unknown model", chat_request("unknown", both, R"({"model":"nope"})"), 404},
      {"pinned out of range", chat_request("rank", good + "X-data-parallel-rank: 9\r\n"), 400},
      {"oversized header", chat_request("big", both + "X-Big: " + std::string(9000, 'a') + "\r\n"),
       431},
      {"CL and TE",
       "POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\n" + both +
           "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
       400},
      {"admin PATCH, wrong token",
       "PATCH /api/models/m HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer s3cr3t-XYZ\r\n"
       "Content-Length: 18\r\n\r\n{\"affinity\":false}",
       403},
      {"anthropic route",
       "POST /v1/messages HTTP/1.1\r\nHost: h\r\nx-api-key: s3cr3t-ABC\r\n"
       "anthropic-version: 2023-06-01\r\nContent-Length: 13\r\n\r\n{\"model\":\"m\"}",
       401},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = ask(port, c.bytes);
    ASSERT_TRUE(r) << "no reply";
    if (c.status != 0) {
      EXPECT_EQ(r->status, c.status) << r->body;
    } else {
      EXPECT_GE(r->status, 500) << r->body;
    }
  }
  // A client that goes away mid-stream, credentials and all.
  {
    RawClient c{port};
    ASSERT_TRUE(c.send(chat_request("held", good + session + "x-fake-hold: 1\r\n", streamed)));
    ASSERT_TRUE(eventually([&] { return backend.held_total() == 1; }));
  }
  EXPECT_TRUE(eventually([&] { return total_in_flight(port) == 0; }));
  // The client's key went upstream unchanged (no upstream key is configured):
  // it is forwarded, only never logged.
  ASSERT_FALSE(backend.seen().empty());

  warden.terminate();
  const std::string log = warden.output();
  EXPECT_NE(log.find("req="), std::string::npos) << "expected request lines at trace level; log:\n" << log;
  EXPECT_NE(log.find("client went away"), std::string::npos) << log;
  EXPECT_EQ(log.find("s3cr3t"), std::string::npos) << "a credential or session id reached the log:\n" << log;
  EXPECT_EQ(log.find("admin-token-1"), std::string::npos) << log;
}

}  // namespace
}  // namespace lmwarden::testing
