// The configuration file as a whole: YAML that does not parse (named where a
// person would look, not where yaml-cpp gives up), a second document, tabs,
// and a path that is missing, a directory, or a device without end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "config/config_loader.h"
#include "config_test_util.h"

namespace lmwarden::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ConfigErrors, InvalidYamlSyntax) {
  EXPECT_THAT(error_of("models: [\n  {name: m\n"), HasSubstr("lmwarden.yaml:"));
  EXPECT_THAT(error_of("models: [\n  {name: m\n"), HasSubstr("invalid YAML"));
}

// yaml-cpp reads a quoted string left open on the last line as if it were
// closed at the end of the line; earlier in the file, or inside a [ ] or
// { } flow, its error comes lines later (or past the end), about a mapping.
// All name the line where the quote opens.
TEST(ConfigErrors, AQuotedStringLeftOpenIsNamedWhereItOpens) {
  const std::string unclosed =
      "invalid YAML: a quoted string opens on this line and does not close on it: is its "
      "closing quote missing?";
  EXPECT_EQ(error_of(std::string(kMinimal) + "admin_token: \"sekret\n"),
            "lmwarden.yaml:6: " + unclosed);
  EXPECT_EQ(error_of(std::string(kMinimal) + "access_log: 'log.jsonl\n"),
            "lmwarden.yaml:6: " + unclosed);
  // With no newline at the end, or a byte-order mark at the start.
  EXPECT_EQ(error_of(std::string(kMinimal) + "admin_token: \"sekret"),
            "lmwarden.yaml:6: " + unclosed + " (illegal EOF in scalar)");
  EXPECT_EQ(error_of("\xEF\xBB\xBF" + std::string(kMinimal) + "admin_token: \"sekret\n"),
            "lmwarden.yaml:6: " + unclosed);
  const std::string early =
      "admin_token: \"sekret\n" + std::string(kMinimal) + "  - name: \"m2\"\n";
  EXPECT_THAT(error_of(early), ::testing::StartsWith("lmwarden.yaml:1: " + unclosed +
                                                     " (the parser read on to line 7: "));
  const std::string in_flow = R"(models:
  - name: m
    aliases: ["a", "b]
    backends:
      - url: http://127.0.0.1:8000
)";
  EXPECT_THAT(error_of(in_flow), ::testing::StartsWith("lmwarden.yaml:3: " + unclosed));
  EXPECT_THAT(error_of("models: [{name: m, backends: [{url: \"http://h:1}]}]\n"),
              ::testing::StartsWith("lmwarden.yaml:1: " + unclosed));
  // Quotes closed, escaped or doubled, in plain text and in comments, are no
  // such thing; nor is a string over several lines that closes.
  EXPECT_TRUE(load_config_string(
      std::string(kMinimal) +
          "admin_token: \"a \\\" b # c\"  # it's \"\naccess_log: '/var/log/it''s.jsonl'\n",
      "lmwarden.yaml"));
  EXPECT_TRUE(load_config_string(
      R"(models:
  - name: m
    aliases: ["it's", 'say "hi', x "y, "two
      lines"]
    backends:
      - url: "http://127.0.0.1:8000"
)",
      "lmwarden.yaml"));
  // A parse error with every quote closed has no hint.
  EXPECT_THAT(error_of("models: [\n  {name: \"m\"\n"), Not(HasSubstr("closing quote")));
}

// yaml-cpp reads the first document of a file; a second after `---` would be
// left unread without a word.
TEST(ConfigErrors, ASecondDocumentIsRefused) {
  EXPECT_EQ(error_of("listen: 127.0.0.1:8080\n---" + std::string(kMinimal)),
            "lmwarden.yaml:3: invalid YAML: a second document (after a `---` line) begins here; "
            "the file must hold one");
  EXPECT_TRUE(load_config_string("---" + std::string(kMinimal) + "---\n", "lmwarden.yaml"));
  EXPECT_TRUE(load_config_string("# a comment\n---" + std::string(kMinimal) + "...\n# end\n",
                                 "lmwarden.yaml"));
  EXPECT_EQ(error_of(std::string(kMinimal) + "...\n--- {listen: 127.0.0.1:1}\n"),
            "lmwarden.yaml:7: invalid YAML: a second document (after a `---` line) begins here; "
            "the file must hold one");
  // Found by the config fuzzer: yaml-cpp's LoadAll never returns on this
  // text (its Load does), so documents are not counted with it.
  const std::string stalls =
      ",,,,,,,models:\n` - name!!str   mscked_env:tt\xb3\xb3\xb3\xb3"
      "\xb3\xb3\xb3\xb3p\xff\xff\xff\xff\xff\xff\xff%.0.1%:9000\n";
  EXPECT_FALSE(load_config_string(stalls, "lmwarden.yaml"));
}

// A tab pressed for indentation: yaml-cpp's words ("illegal block entry")
// do not say what to change.
TEST(ConfigErrors, ATabInTheIndentationIsNamed) {
  EXPECT_EQ(error_of("listen: 127.0.0.1:8080\nmodels:\n\t- name: m\n"),
            "lmwarden.yaml:3: invalid YAML: a tab in the indentation; YAML indents with spaces "
            "only (illegal block entry)");
  EXPECT_EQ(error_of("models:\n  - name: m\n \tbackends: [\"http://127.0.0.1:9000\"]\n"),
            "lmwarden.yaml:3: invalid YAML: a tab in the indentation; YAML indents with spaces "
            "only (illegal tab when looking for indentation)");
  // Tabs after the indentation, or on a line of only a comment, are no cause.
  EXPECT_TRUE(load_config_string(
      "listen:\t127.0.0.1:8080  # \there\n\t# note\n" + std::string(kMinimal), "lmwarden.yaml"));
  EXPECT_THAT(error_of("models: [\n  {name:\t\"m\"\n"), Not(HasSubstr("tab")));
}

TEST(ConfigErrors, MissingFile) {
  auto result = load_config_file("/nonexistent/lmwarden.yaml");
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message(),
            "/nonexistent/lmwarden.yaml: cannot open: No such file or directory");
}

TEST(ConfigErrors, ADirectoryIsNotAnEmptyFile) {
  const std::string dir = ::testing::TempDir();  // a directory that exists
  auto result = load_config_file(dir);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message(), dir + ": cannot open: it is a directory");
}

// A device that never ends, or a file far larger than any configuration,
// is refused once past the bound, not read until memory runs out.
TEST(ConfigErrors, AFileWithoutEndOrOfGigabytesIsRefusedAtTheBound) {
  const std::string too_large =
      "is larger than 4 MiB, where a configuration takes a few KiB: is it the right file?";
  auto endless = load_config_file("/dev/zero");
  ASSERT_FALSE(endless);
  EXPECT_EQ(endless.error().message(), "/dev/zero: " + too_large);

  const std::string path = ::testing::TempDir() + "lmwarden-large.yaml";
  std::string comments;
  while (comments.size() <= kMaxConfigBytes) comments += "# a comment line of some length\n";
  std::ofstream(path) << "models:\n  - name: m\n    backends: [{url: http://127.0.0.1:8000}]\n"
                      << comments;
  auto large = load_config_file(path);
  ASSERT_FALSE(large);
  EXPECT_EQ(large.error().message(), path + ": " + too_large);
  // At the bound it is read.
  comments.resize(kMaxConfigBytes - 100);
  comments.back() = '\n';
  std::ofstream(path) << "models:\n  - name: m\n    backends: [{url: http://127.0.0.1:8000}]\n"
                      << comments;
  EXPECT_TRUE(load_config_file(path)) << "a file under the bound";
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace lmwarden::config
