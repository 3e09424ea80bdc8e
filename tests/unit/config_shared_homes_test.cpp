// The shared_homes section: Redis shared by several wardens (DESIGN §10).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "config_test_util.h"
#include "homes/home_store.h"

namespace lmwarden::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ConfigSharedHomes, AbsentByDefault) {
  EXPECT_FALSE(load_ok(kMinimal).shared_homes.has_value());
}

TEST(ConfigSharedHomes, TheUrlAloneTakesTheDefaults) {
  const Config c =
      load_ok("shared_homes:\n  redis: redis://10.0.0.5:6379\n" + std::string(kMinimal));
  ASSERT_TRUE(c.shared_homes);
  EXPECT_EQ(c.shared_homes->redis, "redis://10.0.0.5:6379");
  EXPECT_EQ(c.shared_homes->key_prefix, "lmwarden:");
  EXPECT_EQ(c.shared_homes->timeout, Millis{50});
  EXPECT_FALSE(c.shared_homes->password_env);
}

TEST(ConfigSharedHomes, EveryKey) {
  ::setenv("LMWARDEN_TEST_REDIS_PASSWORD", "s3cret", 1);
  const Config c = load_ok(R"(shared_homes:
  redis: redis://redis.internal:6380/4
  password_env: LMWARDEN_TEST_REDIS_PASSWORD
  key_prefix: "fleet-a/"
  timeout: 200ms
)" + std::string(kMinimal));
  ::unsetenv("LMWARDEN_TEST_REDIS_PASSWORD");
  ASSERT_TRUE(c.shared_homes);
  EXPECT_EQ(c.shared_homes->redis, "redis://redis.internal:6380/4");
  EXPECT_EQ(c.shared_homes->password_env, "LMWARDEN_TEST_REDIS_PASSWORD");
  EXPECT_EQ(c.shared_homes->password, "s3cret");
  EXPECT_EQ(c.shared_homes->key_prefix, "fleet-a/");
  EXPECT_EQ(c.shared_homes->timeout, Millis{200});
}

TEST(ConfigSharedHomes, MistakesAreNamedByKey) {
  EXPECT_EQ(error_of("shared_homes:\n  key_prefix: x\n" + std::string(kMinimal)),
            "lmwarden.yaml:2: shared_homes.redis: is required: the Redis the wardens share, "
            "e.g. redis://127.0.0.1:6379");
  EXPECT_THAT(error_of("shared_homes:\n  redis: http://10.0.0.5:6379\n" + std::string(kMinimal)),
              HasSubstr("lmwarden.yaml:2: shared_homes.redis: "));
  EXPECT_THAT(error_of("shared_homes:\n  redis: redis://10.0.0.5:6379\n  timeout: 0ms\n" +
                       std::string(kMinimal)),
              HasSubstr("lmwarden.yaml:3: shared_homes.timeout: "));
  EXPECT_THAT(error_of("shared_homes:\n  redis: redis://10.0.0.5:6379\n  timout: 1s\n" +
                       std::string(kMinimal)),
              HasSubstr("shared_homes.timout: unknown key (did you mean \"timeout\"?)"));
  const std::string scalar =
      error_of("shared_homes: redis://:hunter2@10.0.0.5:6379\n" + std::string(kMinimal));
  EXPECT_THAT(scalar, HasSubstr("lmwarden.yaml:1: shared_homes: must be a mapping of keys"));
  EXPECT_THAT(scalar, Not(HasSubstr("hunter2")));
  ::unsetenv("LMWARDEN_TEST_UNSET");
  EXPECT_EQ(error_of("shared_homes:\n  redis: redis://h:1\n  password_env: LMWARDEN_TEST_UNSET\n" +
                     std::string(kMinimal)),
            "lmwarden.yaml:3: shared_homes.password_env: the environment variable "
            "LMWARDEN_TEST_UNSET is not set: Redis would be sent an empty password");
}

// An ACL user whose password is in the environment: "USER:" in the URL,
// password_env beside it. Without password_env the user has no password.
TEST(ConfigSharedHomes, AUserInTheUrlTakesThePasswordFromTheEnvironment) {
  ::setenv("LMWARDEN_TEST_REDIS_PASSWORD", "s3cret", 1);
  const Config c = load_ok(
      "shared_homes:\n  redis: redis://warden:@h:1\n"
      "  password_env: LMWARDEN_TEST_REDIS_PASSWORD\n" +
      std::string(kMinimal));
  ::unsetenv("LMWARDEN_TEST_REDIS_PASSWORD");
  ASSERT_TRUE(c.shared_homes);
  EXPECT_EQ(c.shared_homes->password, "s3cret");
  EXPECT_EQ(homes::parse_redis_url(c.shared_homes->redis)->username, "warden");
  EXPECT_EQ(error_of("shared_homes:\n  redis: redis://warden:@h:1\n" + std::string(kMinimal)),
            "lmwarden.yaml:2: shared_homes.redis: the redis URL names a user but no password: "
            "write it after the ':' (redis://USER:PASSWORD@HOST), or name the variable that "
            "holds it in shared_homes.password_env (redis://USER:@HOST)");
}

// rediss://: the PEM files, absolute and readable when the file is loaded
// (the test's own binary stands in for one: only readability is checked).
TEST(ConfigSharedHomes, TlsFilesGoWithARedissUrl) {
  const std::string readable = std::filesystem::canonical("/proc/self/exe").string();
  const Config c = load_ok(
      "shared_homes:\n  redis: rediss://redis.internal:6380\n"
      "  tls_ca_file: " +
      readable + "\n  tls_cert_file: " + readable + "\n  tls_key_file: " + readable + "\n" +
      std::string(kMinimal));
  ASSERT_TRUE(c.shared_homes);
  EXPECT_EQ(c.shared_homes->tls_ca_file, readable);
  EXPECT_EQ(c.shared_homes->tls_cert_file, readable);
  EXPECT_EQ(c.shared_homes->tls_key_file, readable);
  EXPECT_TRUE(load_ok("shared_homes:\n  redis: rediss://h\n" + std::string(kMinimal))
                  .shared_homes->tls_ca_file.empty());

  EXPECT_EQ(error_of("shared_homes:\n  redis: redis://h\n  tls_ca_file: " + readable + "\n" +
                     std::string(kMinimal)),
            "lmwarden.yaml:3: shared_homes.tls_ca_file: needs a rediss:// URL in "
            "shared_homes.redis (Redis over TLS)");
  EXPECT_EQ(error_of("shared_homes:\n  redis: rediss://h\n  tls_ca_file: ca.pem\n" +
                     std::string(kMinimal)),
            "lmwarden.yaml:3: shared_homes.tls_ca_file: must be an absolute path, got \"ca.pem\"");
  EXPECT_EQ(error_of("shared_homes:\n  redis: rediss://h\n  tls_ca_file: /nonexistent/ca.pem\n" +
                     std::string(kMinimal)),
            "lmwarden.yaml:3: shared_homes.tls_ca_file: cannot read /nonexistent/ca.pem: No such "
            "file or directory");
  EXPECT_EQ(
      error_of("shared_homes:\n  redis: rediss://h\n  tls_ca_file: /tmp\n" + std::string(kMinimal)),
      "lmwarden.yaml:3: shared_homes.tls_ca_file: /tmp is not a file");
  EXPECT_EQ(error_of("shared_homes:\n  redis: rediss://h\n  tls_key_file: " + readable + "\n" +
                     std::string(kMinimal)),
            "lmwarden.yaml:3: shared_homes.tls_key_file: set tls_cert_file and tls_key_file "
            "together: the warden's certificate and its key");
}

// The name Redis's certificate carries, for a URL that reaches it by
// another (an address, a tunnel).
TEST(ConfigSharedHomes, ATlsServerNameGoesWithARedissUrl) {
  const auto named = [](const std::string& name) {
    return "shared_homes:\n  redis: rediss://10.0.0.5\n  tls_server_name: " + name + "\n" +
           std::string(kMinimal);
  };
  EXPECT_EQ(load_ok(named("redis.internal")).shared_homes->tls_server_name, "redis.internal");
  EXPECT_EQ(load_ok(named("10.0.0.6")).shared_homes->tls_server_name, "10.0.0.6");
  EXPECT_EQ(load_ok(named("\"fd00::6\"")).shared_homes->tls_server_name, "fd00::6");
  EXPECT_TRUE(load_ok("shared_homes:\n  redis: rediss://h\n" + std::string(kMinimal))
                  .shared_homes->tls_server_name.empty());
  EXPECT_EQ(load_ok(named("redis.internal.")).shared_homes->tls_server_name, "redis.internal")
      << "a fully qualified name's final dot, which certificates never carry";
  const std::string bad_names[] = {"999.1.1.1",
                                   "123",
                                   "-bad.example",
                                   "bad-.example",
                                   "a..b",
                                   "redis_internal",
                                   std::string(64, 'a') + ".example"};
  for (const std::string& bad : bad_names) {
    EXPECT_THAT(error_of(named(bad)),
                HasSubstr("lmwarden.yaml:3: shared_homes.tls_server_name: must be a host name or "
                          "an IP address that Redis's certificate carries, e.g. redis.internal; "
                          "got \"" +
                          bad.substr(0, 40)))
        << bad;
  }
  EXPECT_EQ(error_of(named("\"redis internal\"")),
            "lmwarden.yaml:3: shared_homes.tls_server_name: must be a host name or an IP address "
            "that Redis's certificate carries, e.g. redis.internal; got \"redis internal\"");
  EXPECT_EQ(error_of(named("\"\"")),
            "lmwarden.yaml:3: shared_homes.tls_server_name: must be a non-empty string, got \"\"");
  EXPECT_EQ(error_of("shared_homes:\n  redis: redis://h\n  tls_server_name: redis.internal\n" +
                     std::string(kMinimal)),
            "lmwarden.yaml:3: shared_homes.tls_server_name: needs a rediss:// URL in "
            "shared_homes.redis (Redis over TLS)");
}

TEST(ConfigSharedHomes, ABadUrlsErrorNeverShowsItsPassword) {
  const std::string error =
      error_of("shared_homes:\n  redis: redis://:hunter2@10.0.0.5:99999\n" + std::string(kMinimal));
  EXPECT_THAT(error, HasSubstr("shared_homes.redis"));
  EXPECT_THAT(error, Not(HasSubstr("hunter2")));
}

}  // namespace
}  // namespace lmwarden::config
