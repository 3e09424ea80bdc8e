// What the wardens write to Redis for each other: keys every warden computes
// alike, and values that name a replica by its server and rank.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/hash.h"
#include "config/config.h"
#include "config/config_loader.h"
#include "proxy/shared_homes.h"

namespace lmwarden::proxy {
namespace {

TEST(SharedHomesKeys, NameTheModelTheKindAndTheIdsStableHash) {
  const std::uint64_t h = stable_hash("0f8e7c4e-1d5a-4a33-9a8e-2f5b8c1d9e70");
  const std::string key = home_key("lmwarden:", "qwen3-4b", HomeKind::kConversation, h);
  ASSERT_EQ(key.size(), std::string("lmwarden:qwen3-4b:c:").size() + 16);
  EXPECT_TRUE(key.starts_with("lmwarden:qwen3-4b:c:"));
  EXPECT_EQ(std::strtoull(key.substr(20).c_str(), nullptr, 16), h);
  // Small hashes keep sixteen digits, so keys sort and read alike.
  EXPECT_EQ(home_key("p/", "m", HomeKind::kResponse, 0x2a), "p/m:r:000000000000002a");
  EXPECT_EQ(home_key("", "m", HomeKind::kConversation, ~0ull), "m:c:ffffffffffffffff");
}

TEST(SharedHomesValues, RoundTripTheServerAndRank) {
  const std::string value = home_value("http://10.0.0.7:8000/v1", 3);
  EXPECT_EQ(value, "3 http://10.0.0.7:8000/v1");
  const auto place = parse_home_value(value);
  ASSERT_TRUE(place);
  EXPECT_EQ(place->rank, 3);
  EXPECT_EQ(place->url, "http://10.0.0.7:8000/v1");
}

TEST(SharedHomesValues, NameAServerHoweverItsUrlIsWritten) {
  const auto name = [](std::string_view url) {
    auto backend = config::parse_backend_url(url);
    EXPECT_TRUE(backend) << url;
    return backend ? server_name(*backend) : std::string{};
  };
  EXPECT_EQ(name("http://127.0.0.1:8000"), "http://127.0.0.1:8000");
  EXPECT_EQ(name("http://127.0.0.1:8000/"), "http://127.0.0.1:8000");
  EXPECT_EQ(name("HTTP://127.0.0.1:8000"), "http://127.0.0.1:8000");
  EXPECT_EQ(name("http://vllm-a"), "http://vllm-a:80");
  EXPECT_EQ(name("http://[::1]:9000/v/"), "http://[::1]:9000/v");
}

TEST(SharedHomesValues, AnythingElseIsNoPlace) {
  for (const char* bad : {"", " ", "3", "3 ", " http://a", "-1 http://a", "x http://a",
                          "3x http://a", "99999999999 http://a"})
    EXPECT_FALSE(parse_home_value(bad)) << '"' << bad << '"';
}

TEST(SharedHomesOptions, TakeThePasswordFromItsVariableOverTheUrls) {
  config::SharedHomes config{.redis = "redis://:inurl@10.1.2.3:6380/2",
                             .password_env = "REDIS_PASSWORD",
                             .password = "fromenv",
                             .timeout = std::chrono::milliseconds(75)};
  const homes::HomeStoreOptions options = store_options(config);
  EXPECT_EQ(options.address.host, "10.1.2.3");
  EXPECT_EQ(options.address.port, 6380);
  EXPECT_EQ(options.address.database, 2);
  EXPECT_EQ(options.address.password, "fromenv");
  EXPECT_EQ(options.timeout, std::chrono::milliseconds(75));
  config.password_env.reset();
  EXPECT_EQ(store_options(config).address.password, "inurl");
}

}  // namespace
}  // namespace lmwarden::proxy
