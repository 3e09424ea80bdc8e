// The access log's line, as the file holds it once the log is closed: every
// field in the documented order, nulls where a request has no value, and
// strings that a JSON reader takes whatever bytes the client sent.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proxy/access_log.h"

namespace lmwarden::proxy {
namespace {

using nlohmann::ordered_json;
using namespace std::chrono_literals;

// A file of the test's own, removed afterwards.
class LogFile {
 public:
  LogFile()
      : path_(::testing::TempDir() + "lmwarden-access-" + std::to_string(::getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".log") {
    std::remove(path_.c_str());
  }
  ~LogFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

  // The lines written by `write` (the log is closed after it, which writes
  // what it buffered).
  template <class Write>
  std::vector<std::string> lines_of(Write write) const {
    {
      auto log = AccessLog::open(path_);
      EXPECT_NE(log, nullptr);
      if (!log) return {};
      write(*log);
    }
    std::ifstream in(path_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  std::string path_;
};

AccessRecord relayed() {
  AccessRecord r;
  r.received = std::chrono::steady_clock::now();
  r.request_id = "5c09e4d2-17";
  r.model = "qwen3-4b";
  r.conversation = 0x9f2c4a1e00000000ull;
  r.route = "sticky";
  r.replica = 2;
  r.rank = 1;
  r.server = "http://127.0.0.1:8000";
  r.attempts = 1;
  r.status = 200;
  r.outcome = "relayed";
  r.first_byte = r.received + 212400us;
  telemetry::RequestUsage usage;
  usage.prompt_tokens = 48211;
  usage.cached_tokens = 47104;
  usage.completion_tokens = 311;
  usage.cache_measured = true;
  r.usage = usage;
  r.body_bytes = 412'877;
  r.sent_bytes = 3'214;
  return r;
}

TEST(AccessLogLine, HasEveryFieldInTheDocumentedOrder) {
  LogFile file;
  const auto lines = file.lines_of([](AccessLog& log) {
    log.write(17, "127.0.0.1", "POST", "/v1/messages?beta=true",
              "claude-cli/2.1.332 (external, cli)", relayed());
  });
  ASSERT_EQ(lines.size(), 1u);
  const auto line = ordered_json::parse(lines[0]);
  std::vector<std::string> keys;
  for (const auto& [key, value] : line.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"time",          "id",
                                            "request_id",    "client",
                                            "method",        "target",
                                            "user_agent",    "model",
                                            "conversation",  "route",
                                            "replica",       "server",
                                            "rank",          "attempts",
                                            "status",        "outcome",
                                            "error",         "first_byte_ms",
                                            "duration_ms",   "body_bytes",
                                            "sent_bytes",    "prompt_tokens",
                                            "cached_tokens", "completion_tokens"}));
  EXPECT_EQ(line["id"], 17);
  EXPECT_EQ(line["request_id"], "5c09e4d2-17");
  EXPECT_EQ(line["client"], "127.0.0.1");
  EXPECT_EQ(line["target"], "/v1/messages?beta=true");
  EXPECT_EQ(line["user_agent"], "claude-cli/2.1.332 (external, cli)");
  EXPECT_EQ(line["model"], "qwen3-4b");
  EXPECT_EQ(line["conversation"], "9f2c4a1e");
  EXPECT_EQ(line["route"], "sticky");
  EXPECT_EQ(line["replica"], 2);
  EXPECT_EQ(line["server"], "http://127.0.0.1:8000");
  EXPECT_EQ(line["rank"], 1);
  EXPECT_EQ(line["status"], 200);
  EXPECT_EQ(line["outcome"], "relayed");
  EXPECT_TRUE(line["error"].is_null());
  EXPECT_DOUBLE_EQ(line["first_byte_ms"].get<double>(), 212.4);
  EXPECT_GE(line["duration_ms"].get<double>(), 0.0);
  EXPECT_EQ(line["prompt_tokens"], 48211);
  EXPECT_EQ(line["cached_tokens"], 47104);
  EXPECT_EQ(line["completion_tokens"], 311);
  EXPECT_EQ(line["body_bytes"], 412'877);
  EXPECT_EQ(line["sent_bytes"], 3'214);
}

TEST(AccessLogLine, ARequestRefusedBeforeRoutingHasNullsWhereItHasNoValue) {
  LogFile file;
  AccessRecord refused;
  refused.received = std::chrono::steady_clock::now();
  refused.status = 404;
  const auto lines = file.lines_of(
      [&](AccessLog& log) { log.write(3, "::1", "POST", "/v1/chat/completions", "", refused); });
  ASSERT_EQ(lines.size(), 1u);
  const auto line = ordered_json::parse(lines[0]);
  for (const char* key :
       {"user_agent", "model", "conversation", "route", "replica", "server", "rank", "error",
        "first_byte_ms", "prompt_tokens", "cached_tokens", "completion_tokens"})
    EXPECT_TRUE(line[key].is_null()) << key << ": " << line[key];
  EXPECT_EQ(line["attempts"], 0);
  EXPECT_EQ(line["outcome"], "refused");
  EXPECT_EQ(line["client"], "::1");
}

TEST(AccessLogLine, AnyBytesOfTheClientsAreEscapedOrReplacedNotAllowedToBreakTheLine) {
  LogFile file;
  AccessRecord record = relayed();
  record.model = "модель";  // UTF-8 is kept as it is
  record.error = "a\tb";
  const std::string target = "/v1/x?q=\"a\\b\"&c=\x01&d=\xff\xfe";
  const auto lines = file.lines_of([&](AccessLog& log) {
    log.write(1, "127.0.0.1", "POST", target, "agent \"x\"/1", record);
    log.write(2, "127.0.0.1", "POST", "/v1/plain", "", record);
  });
  ASSERT_EQ(lines.size(), 2u) << "a byte of the target ended a line early";
  const auto line = ordered_json::parse(lines[0]);
  EXPECT_EQ(line["target"], "/v1/x?q=\"a\\b\"&c=\x01&d=\xEF\xBF\xBD\xEF\xBF\xBD")
      << "bytes that are not UTF-8 become U+FFFD";
  EXPECT_EQ(line["model"], "модель");
  EXPECT_EQ(line["user_agent"], "agent \"x\"/1");
  EXPECT_EQ(line["error"], "a\tb");
  EXPECT_EQ(ordered_json::parse(lines[1])["target"], "/v1/plain");
}

TEST(AccessLogLine, ANewLogAppendsToWhatTheFileHeld) {
  LogFile file;
  file.lines_of(
      [](AccessLog& log) { log.write(1, "127.0.0.1", "GET", "/v1/models", "", relayed()); });
  const auto lines = file.lines_of(
      [](AccessLog& log) { log.write(2, "127.0.0.1", "GET", "/v1/models", "", relayed()); });
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(ordered_json::parse(lines[0])["id"], 1);
  EXPECT_EQ(ordered_json::parse(lines[1])["id"], 2);
}

TEST(AccessLogLine, LinesOfAWriteThatFailsAreCounted) {
  // /dev/full takes the open and refuses every write (ENOSPC), as a full disk.
  const std::uint64_t before = AccessLog::dropped_total(nullptr);
  {
    auto log = AccessLog::open("/dev/full");
    ASSERT_NE(log, nullptr);
    for (std::uint64_t id = 1; id <= 3; ++id)
      log->write(id, "127.0.0.1", "POST", "/v1/chat/completions", "", relayed());
  }  // closing writes what was buffered, and fails
  EXPECT_EQ(AccessLog::dropped_total(nullptr) - before, 3u);
}

TEST(AccessLogLine, WhenTheFileFallsBehindLinesAreDroppedAndEveryOneIsCounted) {
  // A FIFO that nobody reads until the end: the log's writer blocks once the
  // pipe is full, its buffer reaches its bound, and the lines after it are
  // dropped. Every line written is then either read from the FIFO or counted.
  const std::string fifo =
      ::testing::TempDir() + "lmwarden-access-fifo-" + std::to_string(::getpid());
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // lets the log's open go on
  ASSERT_GE(reader, 0);
  const std::uint64_t before = AccessLog::dropped_total(nullptr);
  constexpr std::uint64_t kLines = 20000;  // about 6.6 MB of lines, past the 4 MiB bound
  std::size_t read_lines = 0;
  std::thread drain;
  {
    auto log = AccessLog::open(fifo);
    ASSERT_NE(log, nullptr);
    for (std::uint64_t id = 1; id <= kLines; ++id)
      log->write(id, "127.0.0.1", "POST", "/v1/chat/completions", "", relayed());
    EXPECT_GT(AccessLog::dropped_total(log.get()) - before, 0u) << "no line was dropped";
    // Now read, so that the writer (and the log's close) can finish.
    ::fcntl(reader, F_SETFL, 0);
    drain = std::thread([&] {
      char buffer[65536];
      for (ssize_t n; (n = ::read(reader, buffer, sizeof buffer)) > 0;)
        read_lines += static_cast<std::size_t>(std::count(buffer, buffer + n, '\n'));
    });
  }  // the log's close writes what it buffered, then closes the FIFO: the reader sees its end
  drain.join();
  ::close(reader);
  std::remove(fifo.c_str());
  const std::uint64_t dropped = AccessLog::dropped_total(nullptr) - before;
  EXPECT_GT(read_lines, 0u);
  EXPECT_EQ(read_lines + dropped, kLines) << read_lines << " read, " << dropped << " dropped";
}

}  // namespace
}  // namespace lmwarden::proxy
