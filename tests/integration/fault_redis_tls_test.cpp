// `lmwarden serve` with shared homes in a Redis over TLS that it reaches by
// an address its certificate does not name (a tunnel, a private endpoint):
// `tls_server_name` names the host the certificate is for.
#include <gtest/gtest.h>

#include <string>

#include "fake_vllm.h"
#include "http_test_client.h"
#include "metric_probe.h"
#include "redis_server.h"
#include "serve_process.h"
#include "test_certificates.h"

namespace lmwarden::testing {
namespace {

TEST(SharedHomesTls, ARedisWhoseCertificateNamesAnotherHostIsUsedWithTlsServerName) {
  FakeVllm fake{1};
  fake.set_engine(0, 0, 0, 0, 0, 0);
  TestCertificates certs;
  RedisServer redis{RedisServerOptions{.tls = RedisServerTls{.cert_file = certs.crt("elsewhere"),
                                                             .key_file = certs.key("elsewhere"),
                                                             .ca_file = certs.crt("ca")}}};
  const auto shared = [&](const std::string& name_line) {
    return "shared_homes:\n  redis: rediss://127.0.0.1:" + std::to_string(redis.tls_port()) +
           "\n  timeout: 1s\n  tls_ca_file: " + certs.crt("ca") + "\n" + name_line;
  };
  const auto turn = [&](ServeProcess& serve) {
    const auto reply = http_request(serve.port(), http::verb::post, "/v1/chat/completions",
                                    chat_body(false), {{"session-id", "conv-1"}});
    EXPECT_EQ(reply.status, 200u) << reply.body;
  };
  {
    ServeProcess serve{serve_yaml(fake.port(), 1, "", shared(""))};
    turn(serve);
    EXPECT_TRUE(eventually([&] {
      return serve.log().find(
                 "it does not name 127.0.0.1; it names redis.elsewhere.invalid "
                 "(where the URL reaches Redis by another name or address, set "
                 "shared_homes.tls_server_name to one the certificate carries)") !=
             std::string::npos;
    })) << serve.log();
    EXPECT_EQ(metric(serve.port(), "lmwarden_shared_homes_connected"), 0);
  }
  ServeProcess serve{
      serve_yaml(fake.port(), 1, "", shared("  tls_server_name: redis.elsewhere.invalid\n"))};
  turn(serve);
  EXPECT_TRUE(eventually([&] {
    return metric(serve.port(), "lmwarden_shared_homes_connected") == 1;
  })) << serve.log();
  // The line is written after the metric says connected: waited for too.
  EXPECT_TRUE(eventually([&] {
    return serve.log().find(
               "shared homes: connected to rediss://127.0.0.1:" + std::to_string(redis.tls_port()) +
               "/0 (its certificate checked for redis.elsewhere.invalid)") != std::string::npos;
  })) << serve.log();
  EXPECT_TRUE(eventually([&] { return redis.command({"DBSIZE"}) != ":0"; }))
      << "the conversation's home written over TLS";
}

}  // namespace
}  // namespace lmwarden::testing
