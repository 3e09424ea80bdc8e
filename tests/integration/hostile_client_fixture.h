// The fixture of the hostile-client tests (hostile_client_test.cpp,
// hostile_slow_client_test.cpp): an in-process warden in front of a
// RawBackend, with the limits a test asks for, and the checks they share.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "hostile_client.h"
#include "running_warden.h"

namespace lmwarden::testing {

struct Limits {
  std::string client_read = "500ms";
  std::string client_idle = "5m";
  int max_connections = 4096;
};

inline config::Config hostile_config(std::uint16_t backend_port, const Limits& limits = {}) {
  const std::string yaml =
      "listen: 127.0.0.1:0\n"
      "threads: 2\n"
      "retries: 0\n"
      "limits:\n"
      "  max_header_bytes: 8KiB\n"
      "  max_body_bytes: 64KiB\n"
      "  max_connections: " +
      std::to_string(limits.max_connections) +
      "\n"
      "timeouts:\n"
      "  connect: 2s\n"
      "  first_byte: 10s\n"
      "  idle: 10s\n"
      "  client_read: " +
      limits.client_read +
      "\n"
      "  client_idle: " +
      limits.client_idle +
      "\n"
      "models:\n"
      "  - name: m\n"
      "    backends:\n"
      "      - url: http://127.0.0.1:" +
      std::to_string(backend_port) +
      "\n"
      "        data_parallel_size: 2\n";
  auto cfg = config::load_config_string(yaml, "hostile.yaml");
  if (!cfg) throw std::runtime_error(cfg.error().message());
  return std::move(cfg).value();
}

class HostileClient : public ::testing::Test {
 protected:
  void start(const Limits& limits = {}) {
    warden_ = std::make_unique<RunningWarden>(hostile_config(backend_.port(), limits));
  }
  void SetUp() override { start(); }
  std::uint16_t port() const { return warden_->port(); }

  // The warden still answers an honest request, and nothing is left in flight.
  void expect_still_serving(const std::string& tag = "after") {
    RawClient c{port()};
    ASSERT_TRUE(c.send(chat_request(tag)));
    auto r = c.read_response(5s);
    ASSERT_TRUE(r) << "no reply to an honest request; got: " << c.unread().substr(0, 200);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, "{\"tag\":\"" + tag + "\"}");
    EXPECT_TRUE(eventually([&] { return warden_->card()["in_flight"] == 0; }))
        << warden_->card().dump();
  }

  // Sends `bytes`, expects one reply with `status` and then the connection closed.
  // `says`: words the reply's body must hold.
  void expect_refused(std::string_view bytes, int status, std::chrono::milliseconds within = 3s,
                      std::string_view says = {}) {
    RawClient c{port()};
    c.send(bytes);  // the warden may close while we are still sending
    auto r = c.read_response(within);
    ASSERT_TRUE(r) << "no reply; got: " << c.unread().substr(0, 200);
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_NE(r->body.find(says), std::string::npos) << r->body;
    EXPECT_TRUE(c.wait_closed(3s)) << "connection left open after a refusal";
    EXPECT_TRUE(c.unread().empty()) << "a second reply followed the refusal: " << c.unread();
  }

  // No request, or only the honest ones tagged `after*`, reached the backend.
  void expect_backend_saw_nothing_else() {
    for (const auto& req : backend_.requests()) {
      EXPECT_NE(raw_header(req, "x-tag").value_or("").rfind("after", 0), std::string::npos)
          << "unexpected request reached the backend:\n"
          << req;
    }
    EXPECT_EQ(backend_.badly_framed(), 0);
  }

  RawBackend backend_;
  std::unique_ptr<RunningWarden> warden_;
};

}  // namespace lmwarden::testing
