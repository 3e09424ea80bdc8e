// The homes file (saved_homes): its format read back as written, what a bad
// file is refused for, and a restart's models taking back the homes whose
// server and rank they still have (proxy/saved_homes.h, proxy/home_saver.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/hash.h"
#include "config/config_loader.h"
#include "proxy/home_saver.h"
#include "proxy/saved_homes.h"
#include "proxy/warden.h"

namespace lmwarden::proxy {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

SavedHomes sample() {
  SavedHomes homes;
  homes.saved_at_unix_ms = 1'764'950'000'123;
  SavedModel m;
  m.name = "qwen \"coder\" ✓";
  m.servers = {"http://10.0.0.1:8000", "http://[::1]:8001/v"};
  m.conversations = {{.key = 0xffff'ffff'ffff'ffffULL, .server = 1, .rank = 3, .idle_ms = 90'000},
                     {.key = 0x1, .server = 0, .rank = 0, .idle_ms = 0}};
  m.responses = {{.key = 0x0123'4567'89ab'cdefULL, .server = 0, .rank = 1, .idle_ms = 5}};
  homes.models.push_back(m);
  SavedModel empty;
  empty.name = "idle";
  homes.models.push_back(empty);
  return homes;
}

TEST(SavedHomesFile, ReadsBackWhatItWrites) {
  const SavedHomes homes = sample();
  const std::string text = format_saved_homes(homes);
  const auto back = parse_saved_homes(text);
  ASSERT_TRUE(back) << back.error() << "\n" << text;
  EXPECT_EQ(back->saved_at_unix_ms, homes.saved_at_unix_ms);
  ASSERT_EQ(back->models.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back->models[i].name, homes.models[i].name);
    EXPECT_EQ(back->models[i].servers, homes.models[i].servers);
    EXPECT_EQ(back->models[i].conversations, homes.models[i].conversations);
    EXPECT_EQ(back->models[i].responses, homes.models[i].responses);
  }
  // One home per line, its key in 16 hex digits: greppable, and never the id.
  EXPECT_NE(text.find("\n    [\"ffffffffffffffff\", 1, 3, 90000]"), std::string::npos) << text;
  EXPECT_NE(text.find("\n    [\"0000000000000001\", 0, 0, 0]"), std::string::npos) << text;
  EXPECT_TRUE(parse_saved_homes(format_saved_homes(SavedHomes{})));
}

TEST(SavedHomesFile, ABadFileIsRefusedWithWhatIsWrong) {
  const std::string good = format_saved_homes(sample());
  const auto refused = [](const std::string& text) {
    const auto r = parse_saved_homes(text);
    return r ? std::string("(read)") : r.error();
  };
  EXPECT_EQ(refused(good.substr(0, good.size() / 2)).rfind("not JSON: ", 0), 0u);
  EXPECT_EQ(refused("[]"), "not a JSON object");
  EXPECT_EQ(refused(R"({"models": []})"),
            "not a file of saved homes (no \"lmwarden_saved_homes\")");
  EXPECT_EQ(refused(R"({"lmwarden_saved_homes": 2, "saved_at_unix_ms": 0, "models": []})"),
            "version 2 of the format; this warden reads version 1");
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const std::size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  EXPECT_EQ(refused(with("[\"ffffffffffffffff\", 1,", "[\"ffffffffffffffff\", 2,")),
            "models[0] (qwen \"coder\" ✓): conversations[0]: the server must be an index into "
            "\"servers\" (0 to 1)");
  EXPECT_EQ(refused(with("\"0000000000000001\"", "\"000000000000000g\"")),
            "models[0] (qwen \"coder\" ✓): conversations[1]: the key must be a string of 16 hex "
            "digits");
  EXPECT_EQ(refused(with("\"0000000000000001\"", "1")),
            "models[0] (qwen \"coder\" ✓): conversations[1]: the key must be a string of 16 hex "
            "digits");
  EXPECT_EQ(refused(with(", 5]", ", -5]")),
            "models[0] (qwen \"coder\" ✓): responses[0]: the idle time must be a whole number of "
            "milliseconds from 0 to 1000000000000000");
  EXPECT_EQ(refused(with(", 5]", ", 9223372036854775807]")),
            "models[0] (qwen \"coder\" ✓): responses[0]: the idle time must be a whole number of "
            "milliseconds from 0 to 1000000000000000");
  EXPECT_EQ(
      refused(with(", 3, 90000]", ", 1024, 90000]")),
      "models[0] (qwen \"coder\" ✓): conversations[0]: the rank must be a whole number from 0 "
      "to 1023");
  EXPECT_EQ(refused(with("\"lmwarden_saved_homes\": 1", "\"lmwarden_saved_homes\": \"1\"")),
            "\"lmwarden_saved_homes\" must be the format's version, a whole number");
  EXPECT_EQ(refused(with("1764950000123", "9223372036854775807")),
            "\"saved_at_unix_ms\" must be a whole number of milliseconds from 0 to 32503680000000");
  EXPECT_EQ(refused(with(", 5]", "]")),
            "models[0] (qwen \"coder\" ✓): responses[0]: must be [key, server, rank, idle ms]");
  EXPECT_EQ(refused(with("\"responses\"", "\"answers\"")),
            "models[0] (qwen \"coder\" ✓): \"responses\" is missing");
  EXPECT_EQ(refused(with("\"name\": \"idle\"", "\"name\": 7")),
            "models[1]: \"name\" must be a non-empty string");
}

config::Config fleet(const std::string& backends, const std::string& model_extra = "") {
  auto loaded = config::load_config_string(
      "models:\n  - name: m\n    aliases: [old-m]\n    session_ttl: 10m\n" + model_extra +
          "    backends:\n" + backends,
      "test.yaml");
  EXPECT_TRUE(loaded) << loaded.error().message();
  return std::move(loaded).value();
}

core::Identity session(const std::string& id) {
  return {.kind = core::IdentityKind::kSession, .session_hash = stable_hash(id)};
}

TEST(SavedHomesRestore, HomesOnAServerAndRankStillThereGoBackTheOthersAreNamed) {
  // Now: server b (2 ranks), then a; the file was written when a came first.
  const auto set = make_model_set(fleet("      - url: http://10.0.0.2:8000\n"
                                        "        data_parallel_size: 2\n"
                                        "      - url: http://10.0.0.1:8000\n"),
                                  nullptr);
  SavedHomes homes;
  homes.saved_at_unix_ms = 1'000'000'000'000;
  SavedModel saved;
  saved.name = "m";
  saved.servers = {"http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.9:8000"};
  const auto key = [](const std::string& id) { return stable_hash(id); };
  saved.conversations = {
      {.key = key("stale"), .server = 0, .rank = 0, .idle_ms = 9 * 60'000},  // 11 min with the gap
      {.key = key("on-a"), .server = 0, .rank = 0, .idle_ms = 60'000},
      {.key = key("on-a-too"), .server = 0, .rank = 0, .idle_ms = 60'000},
      {.key = key("on-b1"), .server = 1, .rank = 1, .idle_ms = 1'000},
      {.key = key("on-b2-gone"), .server = 1, .rank = 2, .idle_ms = 1'000},  // b has 2 ranks now
      {.key = key("on-gone"), .server = 2, .rank = 0, .idle_ms = 1'000},
  };
  saved.responses = {{.key = key("resp"), .server = 1, .rank = 0, .idle_ms = 0}};
  homes.models.push_back(saved);
  SavedModel other;
  other.name = "retired";
  other.servers = {"http://10.0.0.1:8000"};
  other.conversations = {{.key = 1, .server = 0, .rank = 0, .idle_ms = 0}};
  homes.models.push_back(other);

  // Started two minutes after the write.
  const auto wall = std::chrono::system_clock::time_point{milliseconds{homes.saved_at_unix_ms}} +
                    std::chrono::minutes(2);
  const core::TimePoint now = std::chrono::steady_clock::now();
  const auto lines = restore_homes(homes, *set, wall, now);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "model m: 3 conversations and 1 stored responses are back on their servers and ranks; "
            "2 conversations on servers or ranks it no longer has are placed again at their next "
            "request, and 0 stored responses there are forgotten; 1 idle past session_ttl are "
            "forgotten");
  EXPECT_EQ(lines[1],
            "model retired is not configured: its 1 conversations and 0 stored responses are "
            "forgotten");

  ModelState& m = *set->models[0];
  std::lock_guard lock{m.mutex};
  EXPECT_EQ(m.router.home_of(key("on-b1"), now), 1);
  EXPECT_FALSE(m.router.home_of(key("on-b2-gone"), now));
  EXPECT_FALSE(m.router.home_of(key("on-gone"), now));
  EXPECT_FALSE(m.router.home_of(key("stale"), now));
  EXPECT_TRUE(m.router.holds_response(key("resp"), now));
  // The idle time counts the gap since the write: each on a had been idle 3
  // minutes, so it is forgotten 7 minutes from now, not 9 (home_of touches:
  // one key each).
  EXPECT_EQ(m.router.home_of(key("on-a"), now + std::chrono::minutes(6)), 2)
      << "server a is the third replica now";
  EXPECT_FALSE(m.router.home_of(key("on-a-too"), now + std::chrono::minutes(8)));
}

TEST(SavedHomesRestore, ASnapshotNamesEachHomeByServerAndRankAndLeavesOutTheIdle) {
  const auto set = make_model_set(fleet("      - url: http://10.0.0.1:8000\n"
                                        "      - url: http://10.0.0.2:8000\n"
                                        "        data_parallel_size: 2\n"),
                                  nullptr);
  ModelState& m = *set->models[0];
  const core::TimePoint t0 = std::chrono::steady_clock::now();
  std::vector<int> homes;
  {
    std::lock_guard lock{m.mutex};
    for (int i = 0; i < 6; ++i) {
      const auto d = m.router.route(session("c" + std::to_string(i)), t0 + seconds(i));
      ASSERT_TRUE(d.ok());
      m.router.finish(d, t0 + seconds(i));
      homes.push_back(d.replica);
    }
  }
  // Ten minutes after the first: c0 is past the TTL, the others not. One
  // wall time for the write and the read back, so that c1, idle 599.5 s of
  // the 600 s session_ttl, is not aged by the time the test takes between.
  const core::TimePoint now = t0 + std::chrono::minutes(10) + milliseconds(500);
  const auto wall = std::chrono::system_clock::now();
  const SavedHomes saved = snapshot_homes(*set, wall, now);
  ASSERT_EQ(saved.models.size(), 1u);
  const SavedModel& s = saved.models[0];
  EXPECT_EQ(s.servers, (std::vector<std::string>{"http://10.0.0.1:8000", "http://10.0.0.2:8000"}));
  ASSERT_EQ(s.conversations.size(), 5u) << "c0 is idle past session_ttl";
  for (std::size_t i = 0; i < 5; ++i) {
    const SavedHome& h = s.conversations[i];  // least recently used first: c1 … c5
    EXPECT_EQ(h.key, stable_hash("c" + std::to_string(i + 1)));
    const int replica = homes[i + 1];
    EXPECT_EQ(h.server, replica == 0 ? 0 : 1);
    EXPECT_EQ(h.rank, replica == 0 ? 0 : replica - 1);
    EXPECT_EQ(h.idle_ms, (600 - static_cast<std::int64_t>(i + 1)) * 1000 + 500);
  }

  // Read back into a fresh set, at once: every one back where it was.
  const auto again = make_model_set(set->config, nullptr);
  const auto lines =
      restore_homes(*parse_saved_homes(format_saved_homes(saved)), *again, wall, now);
  EXPECT_EQ(lines.at(0),
            "model m: 5 conversations and 0 stored responses are back on their servers and ranks");
  ModelState& fresh = *again->models[0];
  std::lock_guard lock{fresh.mutex};
  for (int i = 1; i < 6; ++i)
    EXPECT_EQ(fresh.router.home_of(stable_hash("c" + std::to_string(i)), now),
              homes[static_cast<std::size_t>(i)])
        << i;
}

TEST(SavedHomesRestore, AKeyOrAModelListedTwiceIsTakenOnceAtItsLatestUse) {
  const auto set = make_model_set(fleet("      - url: http://10.0.0.1:8000\n"
                                        "      - url: http://10.0.0.2:8000\n"),
                                  nullptr);
  SavedHomes homes;
  homes.saved_at_unix_ms = 0;
  const std::vector<std::string> servers = {"http://10.0.0.1:8000", "http://10.0.0.2:8000"};
  // "m" twice, and under its alias: "x" on server 0, then, used later, on server 1.
  homes.models.push_back({.name = "m",
                          .servers = servers,
                          .conversations = {{.key = 1, .server = 0, .idle_ms = 5'000},
                                            {.key = 2, .server = 0, .idle_ms = 4'000},
                                            {.key = 2, .server = 1, .idle_ms = 3'000}},
                          .responses = {}});
  homes.models.push_back({.name = "old-m",
                          .servers = servers,
                          .conversations = {{.key = 1, .server = 1, .idle_ms = 1'000}},
                          .responses = {}});
  homes.models.push_back({.name = "m",
                          .servers = servers,
                          .conversations = {{.key = 3, .server = 0, .idle_ms = 0}},
                          .responses = {}});
  const auto now = std::chrono::steady_clock::now();
  const auto lines = restore_homes(homes, *set, std::chrono::system_clock::time_point{}, now);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(
      lines[0],
      "model m (named m and old-m and m in the file): 3 conversations and 0 stored responses "
      "are back on their servers and ranks; 2 listed more than once were taken once, at their "
      "latest use");
  ModelState& m = *set->models[0];
  std::lock_guard lock{m.mutex};
  EXPECT_EQ(m.router.conversations(), 3u);
  EXPECT_EQ(m.router.home_of(1, now), 1) << "its latest use, under the alias";
  EXPECT_EQ(m.router.home_of(2, now), 1);
  EXPECT_EQ(m.router.home_of(3, now), 0);
}

TEST(SavedHomesFile, ALinkIsFollowedAndNoOtherFileIsTaken) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("lmwarden-saved-homes-" + std::to_string(::getpid()));
  fs::create_directories(dir / "real");
  fs::create_symlink(dir / "real" / "homes.json", dir / "homes.json");
  std::ofstream(dir / "homes.json.tmp") << "someone else's";
  const std::string file = file_behind((dir / "homes.json").string());
  EXPECT_EQ(file, (dir / "real" / "homes.json").string());
  EXPECT_EQ(replace_file(file, "first"), "");
  EXPECT_EQ(replace_file(file, "second"), "");
  EXPECT_TRUE(fs::is_symlink(dir / "homes.json")) << "the link is left as it is";
  std::ifstream in(dir / "real" / "homes.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "second");
  std::ifstream other(dir / "homes.json.tmp");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(other), {}), "someone else's");
  std::size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    files += entry.is_regular_file() && !entry.is_symlink();
  EXPECT_EQ(files, 2u) << "no file left beside it";
  EXPECT_EQ(
      replace_file((dir / "no-such-dir" / "homes.json").string(), "x")
          .rfind("cannot create a file beside " + (dir / "no-such-dir" / "homes.json").string() +
                     ": No such file or directory",
                 0),
      0u);
  fs::remove_all(dir);
}

TEST(SavedHomesRestore, WithAffinityOffNothingIsTaken) {
  const auto set = make_model_set(
      fleet("      - url: http://10.0.0.1:8000\n", "    affinity: false\n"), nullptr);
  SavedHomes homes;
  homes.saved_at_unix_ms = 0;
  homes.models.push_back({.name = "m",
                          .servers = {"http://10.0.0.1:8000"},
                          .conversations = {{.key = 7}},
                          .responses = {}});
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(restore_homes(homes, *set, std::chrono::system_clock::time_point{}, now).at(0),
            "model m: affinity is off, so its 1 saved conversations are not used");
  EXPECT_EQ(set->models[0]->router.conversations(), 0u);
}

}  // namespace
}  // namespace lmwarden::proxy
