// HomeStore over TLS (rediss://) against a real redis-server with a TLS
// port: Redis's certificate checked against the CA file and the URL's host,
// the warden's own certificate sent when Redis asks for one, and a TLS
// connection that idles kept.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <thread>

#include "home_store_support.h"
#include "homes/home_store.h"
#include "test_certificates.h"

namespace lmwarden::homes {
namespace {

using namespace testing_support;
using testing::RedisServer;
using testing::RedisServerOptions;
using testing::RedisServerTls;
using testing::TestCertificates;

class HomeStoreTls : public ::testing::Test {
 protected:
  // Started at the first call, with the server certificate `cert`.
  RedisServer& redis(bool auth_clients = false, const std::string& cert = "server") {
    if (!redis_)
      redis_ = std::make_unique<RedisServer>(
          RedisServerOptions{.tls = RedisServerTls{.cert_file = certs_.crt(cert),
                                                   .key_file = certs_.key(cert),
                                                   .ca_file = certs_.crt("ca"),
                                                   .auth_clients = auth_clients}});
    return *redis_;
  }

  HomeStoreOptions tls_options(const std::string& host = "127.0.0.1") {
    HomeStoreOptions options = options_for(redis().tls_port(), /*retry_after=*/60s);
    options.address.host = host;
    options.address.tls = true;
    options.tls.ca_file = certs_.crt("ca");
    return options;
  }

  // The reason the store logged for not connecting ("" when it connected).
  static std::string outage(const CapturedLog& log) {
    for (const auto& line : log.lines())
      if (line.find("cannot use") != std::string::npos) return line;
    return "";
  }

  // The outage a store with `options` logs, its lookup failing meanwhile.
  static std::string refused(const HomeStoreOptions& options) {
    CapturedLog log;
    {
      HomeStore store(options);
      EXPECT_EQ(lookup(store, "conv:1"), "failed");
      EXPECT_FALSE(store.stats().connected);
    }
    return outage(log);
  }

  TestCertificates certs_;
  std::unique_ptr<RedisServer> redis_;
};

TEST_F(HomeStoreTls, ARedisOverTlsIsUsedLikeAPlainOne) {
  CapturedLog log;
  HomeStore store(tls_options());
  EXPECT_EQ(lookup(store, "conv:1"), "absent");
  store.put("conv:1", "0 http://a:1", 60s);
  EXPECT_EQ(lookup(store, "conv:1"), "found:0 http://a:1");
  EXPECT_TRUE(store.stats().connected);
  // What the store wrote over TLS is there for anyone.
  EXPECT_EQ(redis().command({"EXISTS", "conv:1"}), ":1");
  EXPECT_EQ(outage(log), "");
}

// A name the certificate carries (localhost) works as the address does.
TEST_F(HomeStoreTls, TheCertificateIsCheckedAgainstAHostName) {
  HomeStore store(tls_options("localhost"));
  EXPECT_EQ(lookup(store, "conv:1"), "absent");
  EXPECT_TRUE(store.stats().connected);
}

TEST_F(HomeStoreTls, ACertificateFromAnotherAuthorityIsRefused) {
  HomeStoreOptions options = tls_options();
  options.tls.ca_file = certs_.crt("other-ca");
  const std::string why = refused(options);
  EXPECT_NE(why.find("TLS: Redis's certificate is not trusted"), std::string::npos) << why;
}

// A certificate the CA signed, for another host: neither the address nor
// a name that reaches this Redis is in it.
TEST_F(HomeStoreTls, ACertificateForAnotherHostIsRefused) {
  redis(/*auth_clients=*/false, "elsewhere");
  for (const std::string host : {"127.0.0.1", "localhost"}) {
    const std::string why = refused(tls_options(host));
    EXPECT_NE(why.find("TLS: Redis's certificate is not trusted"), std::string::npos)
        << host << ": " << why;
    EXPECT_NE(why.find("mismatch"), std::string::npos) << host << ": " << why;
  }
}

// Reached by an address its certificate does not carry (a tunnel, a
// private endpoint): tls_server_name is the name checked, and sent as SNI.
TEST_F(HomeStoreTls, AServerNameIsCheckedInsteadOfTheUrlsHost) {
  redis(/*auth_clients=*/false, "elsewhere");
  HomeStoreOptions options = tls_options();
  options.tls.server_name = "redis.elsewhere.invalid";
  {
    HomeStore store(options);
    EXPECT_EQ(lookup(store, "conv:1"), "absent");
    EXPECT_TRUE(store.stats().connected);
  }
  options.tls.server_name = "redis.other.invalid";
  const std::string why = refused(options);
  EXPECT_NE(why.find("TLS: Redis's certificate is not trusted: hostname mismatch: it does not "
                     "name redis.other.invalid, shared_homes.tls_server_name; it names "
                     "redis.elsewhere.invalid)"),
            std::string::npos)
      << why;
  // Without the name, the URL's address is checked, and the log says how to
  // name the host instead.
  options.tls.server_name.clear();
  const std::string without = refused(options);
  EXPECT_NE(
      without.find("TLS: Redis's certificate is not trusted: IP address mismatch: it does not "
                   "name 127.0.0.1; it names redis.elsewhere.invalid (where the URL reaches "
                   "Redis by another name or address, set shared_homes.tls_server_name to "
                   "one the certificate carries)"),
      std::string::npos)
      << without;
}

TEST_F(HomeStoreTls, ARedisThatAsksForACertificateGetsTheWardens) {
  redis(/*auth_clients=*/true);
  EXPECT_NE(refused(tls_options()), "");
  HomeStoreOptions options = tls_options();
  options.tls.cert_file = certs_.crt("client");
  options.tls.key_file = certs_.key("client");
  HomeStore with(options);
  EXPECT_EQ(lookup(with, "conv:1"), "absent");
  EXPECT_TRUE(with.stats().connected);
}

TEST_F(HomeStoreTls, AMissingCaFileIsTheOutagesReason) {
  HomeStoreOptions options = tls_options();
  options.tls.ca_file = certs_.crt("none");
  const std::string why = refused(options);
  EXPECT_NE(why.find("cannot read tls_ca_file " + certs_.crt("none")), std::string::npos) << why;
}

// Plain RESP to the TLS port, and TLS to the plain one: no answer the store
// takes for Redis's, within the timeout.
TEST_F(HomeStoreTls, APlainClientAndATlsPortDoNotMix) {
  HomeStoreOptions plain = tls_options();
  plain.address.tls = false;
  plain.timeout = 300ms;
  HomeStoreOptions tls_to_plain = tls_options();
  tls_to_plain.address.port = redis().port();
  tls_to_plain.timeout = 300ms;
  for (const auto& options : {plain, tls_to_plain}) {
    HomeStore store(options);
    EXPECT_EQ(lookup(store, "conv:1"), "failed");
    EXPECT_FALSE(store.stats().connected);
  }
}

// An idle TLS connection is kept: the look at it every retry_after does not
// take it for one Redis closed. (The session tickets a TLS 1.3 server sends
// after the handshake are read with the PING's answer, at connect.)
TEST_F(HomeStoreTls, AnIdleTlsConnectionIsKept) {
  HomeStoreOptions options = tls_options();
  options.retry_after = 100ms;  // how often the idle connection is looked at
  HomeStore store(options);
  EXPECT_EQ(lookup(store, "conv:1"), "absent");
  const std::uint64_t connections = redis().stat("total_connections_received");
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(lookup(store, "conv:1"), "absent");
  // One more: the one that asks (each of the test's commands has its own).
  EXPECT_EQ(redis().stat("total_connections_received"), connections + 1);
}

// Redis closing the idle TLS connection (a restart) is noticed as for a
// plain one: the next lookup is answered by the new connection.
TEST_F(HomeStoreTls, ATlsConnectionRedisClosedIsOpenedAgain) {
  HomeStoreOptions options = tls_options();
  options.retry_after = 100ms;
  HomeStore store(options);
  EXPECT_EQ(lookup(store, "conv:1"), "absent");
  ASSERT_EQ(redis().command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}), ":1");
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(lookup(store, "conv:1"), "absent");
  EXPECT_EQ(store.stats().lookups_failed, 0u);
}

}  // namespace
}  // namespace lmwarden::homes
