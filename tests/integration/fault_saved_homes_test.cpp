// `lmwarden serve` with `saved_homes`, restarted as an operator restarts it:
// the conversations it had placed go back to their replicas after the
// restart, though another replica is less loaded by then; the file is
// written every interval while serving, a failed write is counted and said
// once, and a file that cannot be used is named and replaced.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "fake_vllm.h"
#include "http_test_client.h"
#include "metric_probe.h"
#include "scratch.h"
#include "serve_process.h"

namespace lmwarden::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string saved_homes(const std::string& path, const std::string& interval = "1h") {
  return "saved_homes:\n  path: " + path + "\n  interval: " + interval + "\n";
}

// One request of conversation `id` (Codex's session-id header); the rank it
// reached.
int turn(std::uint16_t port, FakeVllm& fake, const std::string& id) {
  const auto reply = http_request(port, http::verb::post, "/v1/chat/completions", chat_body(false),
                                  {{"session-id", id}});
  EXPECT_EQ(reply.status, 200u) << reply.body;
  return fake.seen().back().rank;
}

json read_json(const std::string& path) {
  std::ifstream in{path};
  return json::parse(in);
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(SavedHomes, ARestartSendsEachConversationBackToItsReplica) {
  FakeVllm fake{2};
  for (int rank = 0; rank < 2; ++rank) fake.set_engine(rank, 0, 0, 0, 0, 0);
  TempDir dir;
  const std::string file = dir.file("homes.json");
  const std::string yaml = serve_yaml(fake.port(), 2, "", saved_homes(file));
  std::map<std::string, int> homes;
  {
    ServeProcess serve{yaml};
    EXPECT_TRUE(eventually([&] {
      return serve.log().find("saved homes: " + file + " is not there yet (a first start)") !=
             std::string::npos;
    })) << serve.log();
    for (int i = 0; i < 8; ++i) {
      const std::string id = "conv-" + std::to_string(i);
      homes[id] = turn(serve.port(), fake, id);
    }
    ASSERT_GT(std::ranges::count_if(homes, [](const auto& h) { return h.second == 0; }), 0)
        << "the first placements spread over both ranks";
    ::kill(serve.pid(), SIGTERM);
    const auto status = exit_status(serve.process(), std::chrono::seconds(10));
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(WEXITSTATUS(*status), 0);
    EXPECT_NE(
        serve.log().find("saved homes: 8 conversations and 0 stored responses written to " + file),
        std::string::npos)
        << serve.log();
  }
  const json saved = read_json(file);
  EXPECT_EQ(saved["lmwarden_saved_homes"], 1);
  ASSERT_EQ(saved["models"].size(), 1u);
  EXPECT_EQ(saved["models"][0]["name"], "m");
  EXPECT_EQ(saved["models"][0]["servers"][0], "http://127.0.0.1:" + std::to_string(fake.port()));
  EXPECT_EQ(saved["models"][0]["conversations"].size(), 8u);
  for (const auto& entry : fs::directory_iterator(fs::path(file).parent_path()))
    EXPECT_TRUE(entry.path().filename() == "homes.json" ||
                entry.path().filename() == "homes.json.lock")
        << "nothing left beside the file but its lock: " << entry.path();

  // Rank 0 is busy now: a conversation placed afresh goes to rank 1.
  fake.set_engine(0, 12, 6, 0.9, 0, 0);
  ServeProcess serve{yaml};
  EXPECT_TRUE(eventually([&] {
    return serve.log().find(
               "saved homes: model m: 8 conversations and 0 stored responses are "
               "back on their servers and ranks") != std::string::npos;
  })) << serve.log();
  ASSERT_TRUE(eventually([&] { return serve.card()["replicas"][0]["running"] == 12; }))
      << serve.card().dump();
  EXPECT_EQ(serve.card()["conversations"], 8);
  EXPECT_EQ(turn(serve.port(), fake, "a-new-one"), 1) << "placed by load";
  for (const auto& [id, rank] : homes) EXPECT_EQ(turn(serve.port(), fake, id), rank) << id;
  EXPECT_EQ(metric(serve.port(), "lmwarden_requests_total", {{"route", "sticky"}}), 8);
  EXPECT_EQ(metric(serve.port(), "lmwarden_requests_total", {{"route", "new"}}), 1);
}

// Its log goes to stdout. Once nothing reads that (`lmwarden serve | tee
// log`, and a Ctrl-C that ended tee first), a reload and a stop still run
// their course: the log lines they write fail, rather than SIGPIPE ending the
// process before its drain with its homes unsaved.
TEST(SavedHomes, AWardenWhoseOutputNoOneReadsStillReloadsStopsAndSavesItsHomes) {
  FakeVllm fake{2};
  TempDir dir;
  const std::string file = dir.file("homes.json");
  const std::string config = dir.file("lmwarden.yaml");
  std::ofstream(config) << serve_yaml(fake.port(), 2, "", saved_homes(file));
  SimProcess serve{{"serve", "--config", config}};
  for (int i = 0; i < 3; ++i) turn(serve.port(), fake, "conv-" + std::to_string(i));
  serve.stop_reading_output();
  serve.signal(SIGHUP);  // logs that it reloaded (or why not)
  ASSERT_EQ(http_request(serve.port(), http::verb::get, "/health").status, 200u);
  ASSERT_TRUE(eventually([&] {
    return http_request(serve.port(), http::verb::get, "/metrics")
               .body.find("lmwarden_config_reloads_total{result=\"applied\"} 1") !=
           std::string::npos;
  }));
  EXPECT_TRUE(serve.running());
  serve.signal(SIGTERM);
  const auto status = exit_status(serve, std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status)) << "ended by signal " << WTERMSIG(*status);
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_EQ(read_json(file)["models"][0]["conversations"].size(), 3u);
}

TEST(SavedHomes, WrittenEveryIntervalAFailedWriteIsCountedAndSaidOnceAndAReloadMovesIt) {
  FakeVllm fake{1};
  fake.set_engine(0, 0, 0, 0, 0, 0);
  TempDir dir;
  const std::string file = dir.file("homes.json");
  ServeProcess serve{serve_yaml(fake.port(), 1, "", saved_homes(file, "1s"))};
  const auto written = [&](const std::string& result) {
    return metric(serve.port(), "lmwarden_saved_homes_writes_total", {{"result", result}});
  };
  turn(serve.port(), fake, "alpha");
  ASSERT_TRUE(eventually([&] {
    return fs::exists(file) && read_json(file)["models"][0]["conversations"].size() == 1;
  })) << serve.log();
  EXPECT_GE(written("written"), 1);
  EXPECT_EQ(written("failed"), 0);
  EXPECT_GT(metric(serve.port(), "lmwarden_saved_homes_last_write_timestamp_seconds"), 1.7e9);

  // Its name taken by a directory: each write fails, and the log says so once.
  fs::remove(file);
  fs::create_directory(file);
  ASSERT_TRUE(eventually([&] { return written("failed") >= 3; }, std::chrono::seconds(10)))
      << serve.log();
  const std::string failure =
      "saved homes: cannot rename a new file over " + file + ": Is a directory";
  EXPECT_EQ(count(serve.log(), failure), 1u) << serve.log();
  fs::remove(file);
  EXPECT_TRUE(eventually([&] {
    return serve.log().find("saved homes: " + file + " written again") != std::string::npos;
  })) << serve.log();

  // A reload names another file: the next write goes there.
  const std::string moved = dir.file("moved.json");
  serve.write_config(serve_yaml(fake.port(), 1, "", saved_homes(moved, "1s")));
  ::kill(serve.pid(), SIGHUP);
  EXPECT_TRUE(eventually([&] {
    return serve.log().find("reload: saved_homes: homes are written to " + moved +
                            " every 1 s from now (" + file +
                            " keeps the homes of its last write)") != std::string::npos;
  })) << serve.log();
  turn(serve.port(), fake, "beta");
  EXPECT_TRUE(eventually([&] {
    return fs::exists(moved) && read_json(moved)["models"][0]["conversations"].size() == 2;
  })) << serve.log();
}

// A file the warden cannot use (cut short, a newer warden's, written by
// hand) is moved aside, not overwritten, and the warden starts without it.
TEST(SavedHomes, AFileThatCannotBeUsedIsNamedAndMovedAside) {
  FakeVllm fake{1};
  fake.set_engine(0, 0, 0, 0, 0, 0);
  TempDir dir;
  const std::string file = dir.file("homes.json");
  const std::string cut = R"({"lmwarden_saved_homes": 1, "saved_at_unix_ms": 0, "models": [{)";
  std::ofstream(file) << cut;
  ServeProcess serve{serve_yaml(fake.port(), 1, "", saved_homes(file))};
  EXPECT_TRUE(eventually([&] {
    return serve.log().find("saved homes: " + file + " is not usable (not JSON: ") !=
               std::string::npos &&
           serve.log().find("moved to " + file + ".unusable, and starting without it") !=
               std::string::npos;
  })) << serve.log();
  std::ifstream aside(file + ".unusable");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(aside), {}), cut);
  turn(serve.port(), fake, "alpha");
  ::kill(serve.pid(), SIGTERM);
  ASSERT_TRUE(exit_status(serve.process(), std::chrono::seconds(10)).has_value());
  EXPECT_EQ(read_json(file)["models"][0]["conversations"].size(), 1u);
}

// Should the unusable file not move aside (here a directory holds its
// aside name), nothing is written over it; once the operator removes it,
// the writes go on.
TEST(SavedHomes, AFileThatCannotBeMovedAsideIsNotWrittenUntilItIsGone) {
  FakeVllm fake{1};
  fake.set_engine(0, 0, 0, 0, 0, 0);
  TempDir dir;
  const std::string file = dir.file("homes.json");
  std::ofstream(file) << "a newer warden's file";
  fs::create_directories(file + ".unusable/kept");
  ServeProcess serve{serve_yaml(fake.port(), 1, "", saved_homes(file, "1s"))};
  EXPECT_TRUE(eventually([&] {
    return serve.log().find("saved homes: " + file + " is not usable (not JSON: ") !=
               std::string::npos &&
           serve.log().find(
               "and cannot be moved aside (Is a directory); starting without it, and "
               "it is not written until it is moved or removed") != std::string::npos;
  })) << serve.log();
  turn(serve.port(), fake, "alpha");
  const auto failed = [&] {
    return metric(serve.port(), "lmwarden_saved_homes_writes_total", {{"result", "failed"}});
  };
  ASSERT_TRUE(eventually([&] { return failed() >= 2; })) << serve.log();
  std::ifstream kept(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "a newer warden's file");

  fs::remove(file);
  EXPECT_TRUE(eventually([&] {
    return fs::exists(file) && read_json(file)["models"][0]["conversations"].size() == 1;
  })) << serve.log();
}

// A start that fails (its port taken) has read the file but served nothing:
// the file is left as it was, not replaced with an empty table.
TEST(SavedHomes, AStartThatFailsLeavesTheFileAsItWas) {
  TempDir dir;
  const std::string file = dir.file("homes.json");
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const std::string before =
      R"({"lmwarden_saved_homes": 1, "saved_at_unix_ms": )" + std::to_string(now_ms) +
      R"(, "models": [{"name": "m", "servers": ["http://127.0.0.1:9"], "conversations": [["00000000000000aa", 0, 0, 5]],)"
      R"( "responses": []}]})";
  std::ofstream(file) << before;
  std::uint16_t taken = 0;
  const int listener = loopback_listener(1, taken);
  std::ofstream(dir.file("lmwarden.yaml"))
      << "listen: 127.0.0.1:" << taken << "\n"
      << saved_homes(file)
      << "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:9\n";
  const std::string command = "timeout 20 " + std::string(LMWARDEN_BINARY) + " serve --config " +
                              dir.file("lmwarden.yaml") + " >" + dir.file("out.log") + " 2>&1";
  const int status = std::system(command.c_str());
  ::close(listener);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream in(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), before);
  std::ifstream out(dir.file("out.log"));
  const std::string said{std::istreambuf_iterator<char>(out), {}};
  EXPECT_NE(said.find("model m: 1 conversations and 0 stored responses are back"),
            std::string::npos)
      << said;
}

// Two wardens given one file would each overwrite the other's homes: the
// second does not start, and names the first. Files that writes cut short
// left beside the file are removed by the warden that takes it.
TEST(SavedHomes, ASecondWardenGivenTheSameFileDoesNotStart) {
  FakeVllm fake{1};
  fake.set_engine(0, 0, 0, 0, 0, 0);
  TempDir dir;
  const std::string file = dir.file("homes.json");
  for (const char* name :
       {"homes.json.tmp.AbC123", "homes.json.tmp.toolong1", "other.json.tmp.XyZ789"})
    std::ofstream(dir.file(name)) << "{";
  const std::string yaml = serve_yaml(fake.port(), 1, "", saved_homes(file));
  std::optional<ServeProcess> first{std::in_place, yaml};
  EXPECT_TRUE(eventually([&] {
    return first->log().find("saved homes: removed 1 file(s) beside " + file +
                             " that writes cut short left (homes.json.tmp.AbC123)") !=
           std::string::npos;
  })) << first->log();
  EXPECT_FALSE(fs::exists(dir.file("homes.json.tmp.AbC123")));
  EXPECT_TRUE(fs::exists(dir.file("homes.json.tmp.toolong1"))) << "not a name the warden gives";
  EXPECT_TRUE(fs::exists(dir.file("other.json.tmp.XyZ789"))) << "another file's";
  turn(first->port(), fake, "alpha");

  std::ofstream(dir.file("second.yaml")) << yaml;
  const std::string command = "timeout 20 " + std::string(LMWARDEN_BINARY) + " serve --config " +
                              dir.file("second.yaml") + " >" + dir.file("second.log") + " 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream out(dir.file("second.log"));
  const std::string said{std::istreambuf_iterator<char>(out), {}};
  EXPECT_NE(said.find("lmwarden: saved homes: " + file + " is kept by another warden (process " +
                      std::to_string(first->pid()) + ", which holds " + file +
                      ".lock): give each warden a file of its own"),
            std::string::npos)
      << said;

  // `serve --check` says what such a start would meet, and passes the file:
  // the warden a reload is meant for holds both the port and the file.
  const std::string check = "timeout 20 " + std::string(LMWARDEN_BINARY) + " serve --config " +
                            dir.file("second.yaml") +
                            " --check --listen 127.0.0.1:" + std::to_string(first->port()) + " >" +
                            dir.file("check.log") + " 2>&1";
  const int checked = std::system(check.c_str());
  ASSERT_TRUE(WIFEXITED(checked));
  EXPECT_EQ(WEXITSTATUS(checked), 0);
  std::ifstream check_out(dir.file("check.log"));
  const std::string noted{std::istreambuf_iterator<char>(check_out), {}};
  EXPECT_NE(noted.find("note: 127.0.0.1:" + std::to_string(first->port()) +
                       " is in use now: a start would fail until it is free"),
            std::string::npos)
      << noted;
  EXPECT_NE(noted.find("note: " + file + " is kept now by process " + std::to_string(first->pid()) +
                       ": a start would fail while it runs"),
            std::string::npos)
      << noted;

  // Once the first has stopped (its homes written), the file is free.
  ::kill(first->pid(), SIGTERM);
  ASSERT_TRUE(exit_status(first->process(), std::chrono::seconds(10)).has_value());
  first.reset();
  ASSERT_TRUE(fs::exists(file + ".lock")) << "the lock file stays";
  ASSERT_EQ(std::system(check.c_str()), 0);
  std::ifstream free_out(dir.file("check.log"));
  const std::string free_said{std::istreambuf_iterator<char>(free_out), {}};
  EXPECT_EQ(free_said.find("note:"), std::string::npos) << "nothing holds either: " << free_said;
  ServeProcess second{yaml};
  EXPECT_TRUE(eventually([&] {
    return second.log().find(
               "saved homes: model m: 1 conversations and 0 stored responses are back") !=
           std::string::npos;
  })) << second.log();
}

// A reload that names a file another warden keeps: the reload goes through,
// says so at once, and each write counts as failed until the file is free.
TEST(SavedHomes, AReloadToAFileAnotherWardenKeepsWritesOnceItIsFree) {
  FakeVllm fake{1};
  fake.set_engine(0, 0, 0, 0, 0, 0);
  TempDir dir;
  const std::string kept = dir.file("kept.json");
  const std::string own = dir.file("own.json");
  std::optional<ServeProcess> keeper{std::in_place,
                                     serve_yaml(fake.port(), 1, "", saved_homes(kept)), "-keeper"};
  ServeProcess serve{serve_yaml(fake.port(), 1, "", saved_homes(own, "1s"))};
  const auto written = [&](const std::string& result) {
    return metric(serve.port(), "lmwarden_saved_homes_writes_total", {{"result", result}});
  };
  turn(serve.port(), fake, "alpha");
  serve.write_config(serve_yaml(fake.port(), 1, "", saved_homes(kept, "1s")));
  ::kill(serve.pid(), SIGHUP);
  const std::string refused = "saved homes: " + kept + " is kept by another warden (process " +
                              std::to_string(keeper->pid()) + ", which holds " + kept +
                              ".lock): give each warden a file of its own; nothing is written "
                              "there meanwhile (tried again every 1 s)";
  EXPECT_TRUE(eventually([&] { return serve.log().find(refused) != std::string::npos; }))
      << serve.log();
  ASSERT_TRUE(eventually([&] { return written("failed") >= 2; }, std::chrono::seconds(10)))
      << serve.log();
  EXPECT_EQ(count(serve.log(), "is kept by another warden"), 1u) << "said once: " << serve.log();

  ::kill(keeper->pid(), SIGTERM);
  ASSERT_TRUE(exit_status(keeper->process(), std::chrono::seconds(10)).has_value());
  keeper.reset();
  EXPECT_TRUE(eventually([&] {
    return serve.log().find("saved homes: " + kept + " written again") != std::string::npos;
  })) << serve.log();
  EXPECT_TRUE(eventually([&] { return read_json(kept)["models"][0]["conversations"].size() == 1; }))
      << "the reloaded warden's own conversation";
}

}  // namespace
}  // namespace lmwarden::testing
