// The saved_homes section: the file that keeps conversation homes across a
// restart (proxy/home_saver.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "config_test_util.h"

namespace lmwarden::config {
namespace {

namespace fs = std::filesystem;

// A scratch directory for the file, removed afterwards.
class ConfigSavedHomes : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / ("lmwarden-config-saved-homes-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string with(const std::string& section) const { return section + std::string(kMinimal); }

  fs::path dir_;
};

TEST_F(ConfigSavedHomes, AbsentByDefault) {
  EXPECT_FALSE(load_ok(kMinimal).saved_homes.has_value());
}

TEST_F(ConfigSavedHomes, ThePathAloneTakesTheDefaultInterval) {
  const Config c = load_ok(with("saved_homes:\n  path: " + path("homes.json") + "\n"));
  ASSERT_TRUE(c.saved_homes);
  EXPECT_EQ(c.saved_homes->path, path("homes.json"));
  EXPECT_EQ(c.saved_homes->interval, Millis{60'000});
  EXPECT_FALSE(fs::exists(path("homes.json"))) << "not created by loading the configuration";
}

TEST_F(ConfigSavedHomes, EveryKey) {
  std::ofstream(path("homes.json")) << "an earlier run's file\n";  // replaced, so taken
  const Config c =
      load_ok(with("saved_homes:\n  path: " + path("homes.json") + "\n  interval: 15s\n"));
  ASSERT_TRUE(c.saved_homes);
  EXPECT_EQ(c.saved_homes->interval, Millis{15'000});
}

TEST_F(ConfigSavedHomes, MistakesAreNamedByKey) {
  EXPECT_EQ(error_of(with("saved_homes:\n  interval: 1m\n")),
            "lmwarden.yaml:2: saved_homes.path: is required: the file the homes are kept in, e.g. "
            "/var/lib/lmwarden/homes.json");
  EXPECT_EQ(error_of(with("saved_homes: " + path("homes.json") + "\n")),
            "lmwarden.yaml:1: saved_homes: must be a mapping of keys, e.g. \"path: "
            "/var/lib/lmwarden/homes.json\" on the next line, indented; got \"" +
                path("homes.json") + "\"");
  EXPECT_EQ(error_of(with("saved_homes:\n  path: homes.json\n")),
            "lmwarden.yaml:2: saved_homes.path: must be an absolute path, got \"homes.json\"");
  EXPECT_EQ(error_of(with("saved_homes:\n  path: " + path("no-such-dir/homes.json") + "\n")),
            "lmwarden.yaml:2: saved_homes.path: cannot create files in " + path("no-such-dir") +
                ": No such file or directory");
  fs::create_directories(path("a-directory"));
  EXPECT_EQ(error_of(with("saved_homes:\n  path: " + path("a-directory") + "\n")),
            "lmwarden.yaml:2: saved_homes.path: " + path("a-directory") + " is not a file");
  EXPECT_EQ(error_of(with("saved_homes:\n  path: " + path("") + "\n")),
            "lmwarden.yaml:2: saved_homes.path: " + path("") + " is not a file");
  // Under a plain file, which access(2) would call a permission matter.
  std::ofstream(path("plain")) << "";
  EXPECT_EQ(error_of(with("saved_homes:\n  path: " + path("plain/homes.json") + "\n")),
            "lmwarden.yaml:2: saved_homes.path: cannot create files in " + path("plain") +
                ": Not a directory");
  EXPECT_EQ(error_of(with("saved_homes:\n  path: " + path("h.json") + "\n  interval: 500ms\n")),
            "lmwarden.yaml:3: saved_homes.interval: must be at least 1s, got \"500ms\"");
  EXPECT_EQ(error_of(with("saved_homes:\n  path: " + path("h.json") + "\n  every: 1m\n"))
                .rfind("lmwarden.yaml:3: saved_homes.every: unknown key", 0),
            0u);
  EXPECT_EQ(error_of("access_log: " + path("log.json") +
                     "\nsaved_homes:\n  path: " + path("log.json") + "\n" + std::string(kMinimal)),
            "lmwarden.yaml:3: saved_homes.path: is the access_log's file: give each its own");
}

// The file is replaced whole at each write: never one the warden has another
// use for, however the path to it is written.
TEST_F(ConfigSavedHomes, TheAccessLogOrTheConfigurationFileUnderAnotherNameIsRefused) {
  fs::create_directories(path("logs"));
  const std::string log = path("logs/access.log");
  std::ofstream{log} << "";  // there, as the warden's first start leaves it
  const auto refused = [&](const std::string& homes) {
    return error_of("access_log: " + log + "\nsaved_homes:\n  path: " + homes + "\n" +
                    std::string(kMinimal));
  };
  const std::string message =
      "lmwarden.yaml:3: saved_homes.path: is the access_log's file: give each its own";
  EXPECT_EQ(refused(path("logs/../logs/access.log")), message);
  EXPECT_EQ(refused("/" + log), message);
  fs::create_symlink(log, path("link.log"));
  EXPECT_EQ(refused(path("link.log")), message);
  fs::create_hard_link(log, path("hard.log"));
  EXPECT_EQ(refused(path("hard.log")), message);

  // The configuration file itself, as SIGHUP rereads it.
  const std::string config = path("lmwarden.yaml");
  std::ofstream(config) << "saved_homes:\n  path: " << path("./lmwarden.yaml") << "\n" << kMinimal;
  const auto loaded = load_config_file(config);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().message(),
            config + ":2: saved_homes.path: is this configuration file: name a file of its own");

  // Nor the access log, which would append its lines to it: the next
  // reload, and the next start, would refuse the file.
  std::ofstream(config) << "access_log: " << path("logs/../lmwarden.yaml") << "\n" << kMinimal;
  const auto appended = load_config_file(config);
  ASSERT_FALSE(appended);
  EXPECT_EQ(appended.error().message(), config +
                                            ":1: access_log: " + path("logs/../lmwarden.yaml") +
                                            " is this configuration file: name a file of its own");
}

// The warden's lock (PATH.lock) and the name an unusable file is moved to
// (PATH.unusable) would take over a file of those names.
TEST_F(ConfigSavedHomes, TheNamesUsedBesideTheFileAreNotTheAccessLogNorTheConfigurationFile) {
  const std::string homes = path("homes.json");
  const std::pair<std::string, std::string> names[] = {
      {".lock", "the warden's lock"}, {".unusable", "where an unusable file is moved"}};
  for (const auto& [beside, role] : names) {
    EXPECT_EQ(error_of("access_log: " + homes + beside + "\nsaved_homes:\n  path: " + homes + "\n" +
                       std::string(kMinimal)),
              "lmwarden.yaml:3: saved_homes.path: " + homes + beside + ", " + role +
                  " beside it, is the access_log's file: give each its own");
    const std::string config = homes + beside;
    std::ofstream(config) << "saved_homes:\n  path: " << homes << "\n" << kMinimal;
    const auto loaded = load_config_file(config);
    ASSERT_FALSE(loaded);
    EXPECT_EQ(loaded.error().message(), config + ":2: saved_homes.path: " + config + ", " + role +
                                            " beside it, is this configuration file: name a "
                                            "file of its own");
    fs::remove(config);
  }
  const std::string fine =
      "access_log: " + path("homes.json.log") + "\nsaved_homes:\n  path: " + homes + "\n";
  EXPECT_TRUE(load_config_string(fine + std::string(kMinimal), "lmwarden.yaml"))
      << "another name beside it";
}

// A path that is itself one of those names (another homes file's lock, say)
// would have the warden move that file aside as unusable.
TEST_F(ConfigSavedHomes, ANameTheWardenGivesBesideAHomesFileIsNotAHomesFile) {
  for (const std::string name :
       {"homes.json.lock", "homes.json.unusable", "homes.json.tmp.Ab12Cd"}) {
    EXPECT_EQ(
        error_of(with("saved_homes:\n  path: " + path(name) + "\n")),
        "lmwarden.yaml:2: saved_homes.path: " + path(name) +
            " is a name the warden gives beside a homes file (its lock, a file moved aside, a "
            "write under way): name the homes file itself");
  }
  EXPECT_TRUE(load_config_string(with("saved_homes:\n  path: " + path("locks.json") + "\n"),
                                 "lmwarden.yaml"));
}

// A lock file that is there but that the warden could not lock is said at
// load (and so by serve --check), not only when the warden starts.
TEST_F(ConfigSavedHomes, ALockFileThatIsThereMustBeAFile) {
  const std::string homes = path("homes.json");
  const std::string yaml = with("saved_homes:\n  path: " + homes + "\n");
  fs::create_directory(homes + ".lock");
  EXPECT_EQ(error_of(yaml), "lmwarden.yaml:2: saved_homes.path: " + homes +
                                ".lock, the warden's lock beside it, is not a file: remove it");
  fs::remove(homes + ".lock");
  fs::create_symlink(path("elsewhere"), homes + ".lock");
  EXPECT_EQ(error_of(yaml), "lmwarden.yaml:2: saved_homes.path: " + homes +
                                ".lock, the warden's lock beside it, is a symbolic link: remove it "
                                "(the warden makes its lock itself)");
  fs::remove(homes + ".lock");
  std::ofstream(homes + ".lock") << "4242\n";
  EXPECT_TRUE(load_config_string(yaml, "lmwarden.yaml")) << "a lock file left by a warden gone";
}

}  // namespace
}  // namespace lmwarden::config
