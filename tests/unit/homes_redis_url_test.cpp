#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "homes/home_store.h"

namespace lmwarden::homes {
namespace {

RedisAddress parsed(std::string_view url) {
  auto address = parse_redis_url(url);
  EXPECT_TRUE(address.has_value()) << url << ": " << (address ? "" : address.error());
  return address ? *address : RedisAddress{};
}

std::string error_of(std::string_view url) {
  auto address = parse_redis_url(url);
  EXPECT_FALSE(address.has_value()) << url << " was accepted";
  return address ? std::string() : address.error();
}

TEST(ParseRedisUrl, HostAlone) {
  EXPECT_EQ(parsed("redis://cache.internal"), (RedisAddress{.host = "cache.internal"}));
  EXPECT_EQ(parsed("redis://10.0.0.7/"), (RedisAddress{.host = "10.0.0.7"}));
}

TEST(ParseRedisUrl, PortAndDatabase) {
  EXPECT_EQ(parsed("redis://cache:6380"), (RedisAddress{.host = "cache", .port = 6380}));
  EXPECT_EQ(parsed("redis://cache:6380/3"),
            (RedisAddress{.host = "cache", .port = 6380, .database = 3}));
  EXPECT_EQ(parsed("redis://cache/15"), (RedisAddress{.host = "cache", .database = 15}));
  EXPECT_EQ(parsed("redis://cache:1/0"), (RedisAddress{.host = "cache", .port = 1}));
  EXPECT_EQ(parsed("redis://cache:65535").port, 65535);
}

TEST(ParseRedisUrl, PasswordAlone) {
  EXPECT_EQ(parsed("redis://:s3cret@cache:6379/2"),
            (RedisAddress{.host = "cache", .database = 2, .password = "s3cret"}));
  // Without a colon, as redis-cli reads it, the whole user info is the password.
  EXPECT_EQ(parsed("redis://s3cret@cache").password, "s3cret");
  EXPECT_EQ(parsed("redis://s3cret@cache").username, "");
}

TEST(ParseRedisUrl, UserAndPassword) {
  EXPECT_EQ(
      parsed("redis://warden:s3cret@cache/1"),
      (RedisAddress{.host = "cache", .database = 1, .username = "warden", .password = "s3cret"}));
}

TEST(ParseRedisUrl, UserInfoIsPercentDecoded) {
  const RedisAddress a = parsed("redis://war%64en:p%40ss%3Aw%2Frd@cache");
  EXPECT_EQ(a.username, "warden");
  EXPECT_EQ(a.password, "p@ss:w/rd");
}

TEST(ParseRedisUrl, UnescapedAtAndSlashStayInThePassword) {
  const RedisAddress a = parsed("redis://:p@ss/w@cache:6390/4");
  EXPECT_EQ(a.password, "p@ss/w");
  EXPECT_EQ(a.host, "cache");
  EXPECT_EQ(a.port, 6390);
  EXPECT_EQ(a.database, 4);
}

TEST(ParseRedisUrl, Ipv6InBrackets) {
  EXPECT_EQ(parsed("redis://[::1]:6379"), (RedisAddress{.host = "::1"}));
  EXPECT_EQ(parsed("redis://[fd00::7]/2"), (RedisAddress{.host = "fd00::7", .database = 2}));
  EXPECT_EQ(parsed("redis://:pw@[::1]:7000/1"),
            (RedisAddress{.host = "::1", .port = 7000, .database = 1, .password = "pw"}));
}

TEST(ParseRedisUrl, SchemeIsCaseInsensitive) {
  EXPECT_EQ(parsed("REDIS://cache").host, "cache");
}

TEST(ParseRedisUrl, RedissIsTls) {
  EXPECT_EQ(parsed("rediss://cache:6380"),
            (RedisAddress{.host = "cache", .port = 6380, .tls = true}));
  EXPECT_EQ(
      parsed("REDISS://u:pw@[::1]/3"),
      (RedisAddress{.host = "::1", .database = 3, .username = "u", .password = "pw", .tls = true}));
  EXPECT_FALSE(parsed("redis://cache").tls);
  EXPECT_EQ(describe(parsed("rediss://:pw@cache:6380/2")), "rediss://cache:6380/2");
}

TEST(ParseRedisUrl, OtherSchemesAreNamed) {
  EXPECT_NE(error_of("http://cache:6379").find("not http://"), std::string::npos);
  EXPECT_NE(error_of("cache:6379").find("redis://"), std::string::npos);
  EXPECT_NE(error_of("unix:///run/redis.sock").find("not supported"), std::string::npos);
  error_of("");
}

TEST(ParseRedisUrl, EmptyHost) {
  EXPECT_NE(error_of("redis://").find("no host"), std::string::npos);
  EXPECT_NE(error_of("redis://:6379").find("no host"), std::string::npos);
  EXPECT_NE(error_of("redis://:pw@/0").find("no host"), std::string::npos);
  EXPECT_NE(error_of("redis://[]:6379").find("no host"), std::string::npos);
}

TEST(ParseRedisUrl, PortOutOfRangeOrNotANumber) {
  for (std::string_view url : {"redis://cache:0", "redis://cache:65536", "redis://cache:",
                               "redis://cache:-1", "redis://cache:+80", "redis://cache:63 79",
                               "redis://cache:6379x", "redis://cache:99999999999999999999999"}) {
    EXPECT_NE(error_of(url).find("port"), std::string::npos) << url;
  }
}

TEST(ParseRedisUrl, DatabaseNotAWholeNumber) {
  for (std::string_view url :
       {"redis://cache/-1", "redis://cache/x", "redis://cache/1.5", "redis://cache/3/",
        "redis://cache/3/4", "redis://cache/ 3", "redis://cache/2147483648"}) {
    EXPECT_NE(error_of(url).find("database"), std::string::npos) << url;
  }
}

TEST(ParseRedisUrl, TrailingJunk) {
  // A query or fragment is named as such, not taken for part of the port.
  for (std::string_view url : {"redis://cache?timeout=1", "redis://cache#x",
                               "redis://u:p?w@127.0.0.1:6379?db=1", "rediss://[::1]:6380#tls"})
    EXPECT_EQ(error_of(url),
              "the redis URL has a ?query or #fragment, which the warden does not read: the "
              "database goes in the path (redis://HOST:6379/1)")
        << url;
  error_of("redis://cache name");
  error_of("redis://[::1]x:6379");
  error_of("redis://[::1");
  error_of("redis://cache:6379/0?db=1");
}

TEST(ParseRedisUrl, BareIpv6NeedsBrackets) {
  EXPECT_NE(error_of("redis://::1:6379").find("brackets"), std::string::npos);
}

// "user:" leaves the password to password_env (the configuration requires
// one or the other); "word@" alone is a password, as redis-cli reads it.
TEST(ParseRedisUrl, AUserWithoutAPasswordKeepsTheUser) {
  const auto a = parse_redis_url("redis://warden:@cache");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->username, "warden");
  EXPECT_EQ(a->password, "");
  const auto b = parse_redis_url("redis://s3cret@cache");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->username, "");
  EXPECT_EQ(b->password, "s3cret");
}

// A config error is printed and logged: the password must not go with it,
// wherever the mistake is (and wherever a misplaced password landed).
TEST(ParseRedisUrl, ErrorsNeverRepeatThePassword) {
  const std::string password = "Hunter2Secret";
  for (const std::string& url :
       {"rediss://:" + password + "@cache:0", "http://warden:" + password + "@cache",
        "redis://:" + password + "@cache:0", "redis://:" + password + "@cache/x",
        "redis://warden:" + password + "@", "redis://:" + password + "@cache?x",
        "redis://:" + password,        // "@host" forgotten: no host
        "redis://warden:" + password,  // the same: the password reads as a port
        "redis://cache/" + password,   // or as a database
        "redis://warden:" + password + "@[::1", ":" + password + "@cache://"}) {
    const std::string error = error_of(url);
    EXPECT_FALSE(error.empty()) << url;
    EXPECT_EQ(error.find(password), std::string::npos) << url << " -> " << error;
  }
}

TEST(DescribeRedisAddress, HostPortDatabaseWithoutCredentials) {
  EXPECT_EQ(describe(RedisAddress{}), "redis://127.0.0.1:6379/0");
  EXPECT_EQ(describe(RedisAddress{.host = "cache",
                                  .port = 6380,
                                  .database = 3,
                                  .username = "warden",
                                  .password = "s3cret"}),
            "redis://cache:6380/3");
  EXPECT_EQ(describe(RedisAddress{.host = "::1", .port = 7000}), "redis://[::1]:7000/0");
}

TEST(DescribeRedisAddress, ParsesBackToTheSameAddress) {
  const RedisAddress a{.host = "fd00::7", .port = 6390, .database = 9};
  EXPECT_EQ(parsed(describe(a)), a);
}

}  // namespace
}  // namespace lmwarden::homes
