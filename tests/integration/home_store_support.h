// What the HomeStore tests share (homes_store_test.cpp, homes_claims_test.cpp):
// store options for a local Redis, a lookup waited for, the logger's lines,
// and a fixture that runs a real redis-server on a free port.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "homes/home_store.h"
#include "redis_server.h"

namespace lmwarden::homes::testing_support {

using namespace std::chrono_literals;

// Generous where Redis is expected to answer: a sanitizer build on a busy
// machine can take tens of milliseconds.
inline HomeStoreOptions options_for(std::uint16_t port,
                                    std::chrono::milliseconds retry_after = 100ms) {
  return HomeStoreOptions{.address = {.host = "127.0.0.1", .port = port},
                          .timeout = 2000ms,
                          .retry_after = retry_after};
}

// "found:<value>", "absent" or "failed"; "no answer" past `wait`.
inline std::string lookup(HomeStore& store, const std::string& key,
                          std::chrono::milliseconds wait = 5s) {
  auto answer = std::make_shared<std::promise<Lookup>>();
  auto future = answer->get_future();
  store.get(key, [answer](Lookup l) { answer->set_value(std::move(l)); });
  if (future.wait_for(wait) != std::future_status::ready) return "no answer";
  const Lookup l = future.get();
  switch (l.status) {
    case LookupStatus::kFound:
      return "found:" + l.value;
    case LookupStatus::kAbsent:
      return "absent";
    case LookupStatus::kFailed:
      return "failed";
  }
  return "?";
}

// The default logger's lines, as "level message", while it lives.
class CapturedLog {
 public:
  CapturedLog()
      : previous_(spdlog::default_logger()),
        sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(200)) {
    sink_->set_pattern("%l %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink_));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }

  std::vector<std::string> lines() const { return sink_->last_formatted(); }
  std::size_t count(const std::string& text) const {
    std::size_t n = 0;
    for (const auto& line : lines()) n += line.find(text) != std::string::npos;
    return n;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

class HomeStoreTest : public ::testing::Test {
 protected:
  testing::RedisServer redis_;
};

}  // namespace lmwarden::homes::testing_support
