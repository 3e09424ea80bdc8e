// HomeStore against a real redis-server on 127.0.0.1, and against a socket
// that takes connections but never answers (a stalled Redis).
#include <gtest/gtest.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "home_store_support.h"
#include "homes/home_store.h"
#include "redis_server.h"
#include "scratch.h"
#include "silent_redis.h"

namespace lmwarden::homes {
namespace {

using namespace std::chrono_literals;
using testing::RedisServer;
using testing::RedisServerOptions;
using Clock = std::chrono::steady_clock;
using namespace testing_support;

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit = 5s) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

std::chrono::milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

using testing::SilentRedis;

TEST_F(HomeStoreTest, PutThenGetFindsTheValue) {
  HomeStore store(options_for(redis_.port()));
  store.put("conv:1", "replica-b", 60s);
  EXPECT_EQ(lookup(store, "conv:1"), "found:replica-b");
  const HomeStoreStats stats = store.stats();
  EXPECT_EQ(stats.writes_sent, 1u);
  EXPECT_EQ(stats.lookups_found, 1u);
  EXPECT_EQ(stats.lookups_failed, 0u);
  EXPECT_TRUE(stats.connected);
}

TEST_F(HomeStoreTest, UnknownKeyIsAbsent) {
  HomeStore store(options_for(redis_.port()));
  EXPECT_EQ(lookup(store, "conv:nobody"), "absent");
  EXPECT_EQ(store.stats().lookups_absent, 1u);
  EXPECT_EQ(store.stats().lookups_found, 0u);
}

TEST_F(HomeStoreTest, KeysAndValuesAreBinarySafe) {
  HomeStore store(options_for(redis_.port()));
  std::string value = "two words\r\n*1\r\n$3\r\nGET ";
  for (int c = 0; c < 256; ++c) value += static_cast<char>(c);
  const std::string key = std::string("conv with spaces\0and a nul", 26);
  store.put(key, value, 60s);
  EXPECT_EQ(lookup(store, key), "found:" + value);
  EXPECT_EQ(lookup(store, "conv with spaces"), "absent");
}

TEST_F(HomeStoreTest, TtlIsSetInMilliseconds) {
  HomeStore store(options_for(redis_.port()));
  store.put("conv:ttl", "a", 30'000ms);
  ASSERT_EQ(lookup(store, "conv:ttl"), "found:a");
  const long long pttl = std::stoll(redis_.command({"PTTL", "conv:ttl"}).substr(1));
  EXPECT_GT(pttl, 25'000);
  EXPECT_LE(pttl, 30'000);
}

TEST_F(HomeStoreTest, ValueExpiresAfterItsTtl) {
  HomeStore store(options_for(redis_.port()));
  store.put("conv:short", "a", 100ms);
  EXPECT_EQ(lookup(store, "conv:short"), "found:a");
  EXPECT_TRUE(eventually([&] { return lookup(store, "conv:short") == "absent"; }, 3s));
}

// PX 0 is an error to Redis; a TTL rounded down to nothing still writes.
TEST_F(HomeStoreTest, ZeroTtlStillWrites) {
  HomeStore store(options_for(redis_.port()));
  store.put("conv:zero", "a", 0ms);
  ASSERT_TRUE(
      eventually([&] { return store.stats().writes_sent + store.stats().writes_failed > 0; }));
  EXPECT_EQ(store.stats().writes_sent, 1u);
  EXPECT_EQ(store.stats().writes_failed, 0u);
}

// WRONGTYPE says the command was wrong, not the connection: the next
// lookup goes out at once, though a broken connection would wait a minute.
TEST_F(HomeStoreTest, ErrorReplyFailsOnlyThatCommand) {
  ASSERT_EQ(redis_.command({"RPUSH", "conv:list", "x"}), ":1");
  HomeStore store(options_for(redis_.port(), /*retry_after=*/60s));
  store.put("conv:ok", "b", 60s);
  EXPECT_EQ(lookup(store, "conv:list"), "failed");  // WRONGTYPE
  EXPECT_EQ(lookup(store, "conv:ok"), "found:b");
  EXPECT_TRUE(store.stats().connected);
  EXPECT_EQ(store.stats().lookups_failed, 1u);
  EXPECT_EQ(store.stats().lookups_found, 1u);
}

TEST(HomeStoreUnreachable, ClosedPortFailsLookupsAtOnce) {
  HomeStore store(options_for(testing::closed_port(), /*retry_after=*/60s));
  const auto start = Clock::now();
  EXPECT_EQ(lookup(store, "conv:1"), "failed");
  EXPECT_EQ(lookup(store, "conv:2"), "failed");
  EXPECT_LT(since(start), 500ms);
  store.put("conv:3", "a", 60s);
  ASSERT_TRUE(eventually([&] { return store.stats().writes_failed == 1; }));
  const HomeStoreStats stats = store.stats();
  EXPECT_EQ(stats.lookups_failed, 2u);
  EXPECT_EQ(stats.writes_sent, 0u);
  EXPECT_FALSE(stats.connected);
}

// A connection that served, then answered late (Redis paused): what was
// asked fails, and the store connects again at once rather than after
// retry_after (a minute here). That connection's PING unanswered, the gate
// closes as for any failed connect.
TEST(HomeStoreUnreachable, ALateReplyConnectsAgainAtOnce) {
  SilentRedis silent;
  HomeStoreOptions options = options_for(silent.port(), /*retry_after=*/60s);
  options.timeout = 100ms;
  CapturedLog log;
  {
    HomeStore store(options);
    ASSERT_TRUE(silent.answer_ping());
    ASSERT_TRUE(eventually([&] { return store.stats().connected; }));
    EXPECT_EQ(lookup(store, "conv:1"), "failed");
    EXPECT_TRUE(eventually([&] { return silent.connections() == 2; }, 2s));
    EXPECT_EQ(lookup(store, "conv:2"), "failed");  // the second connect failed: gated
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(silent.connections(), 2u);
  }
  EXPECT_EQ(log.count("answered late (no answer within 100 ms)"), 1u);
  EXPECT_EQ(log.count("cannot use"), 1u);
}

// A real Redis stalled by DEBUG SLEEP for longer than the timeout, but less
// than two: the lookup made during the stall fails, and the next one, made
// at once, is answered, though retry_after is a minute. A stall of 2 s and a
// timeout of 1.2 s: the lookup fails if it starts within 0.8 s of the stall
// (time for a busy machine to see it begin), and the connection the store
// opens again at once, its PING sent at least 1.2 s into the stall, is
// answered within its own timeout.
TEST(HomeStoreStall, ARedisThatPausesIsUsedAgainAtOnce) {
  RedisServer redis{RedisServerOptions{.debug_command = true}};
  HomeStoreOptions options = options_for(redis.port(), /*retry_after=*/60s);
  options.timeout = 1200ms;
  HomeStore store(options);
  store.put("conv:1", "a", 60s);
  ASSERT_EQ(lookup(store, "conv:1"), "found:a");
  auto sleeping = std::async(std::launch::async, [&] {
    return redis.command({"DEBUG", "SLEEP", "2"}, /*wait=*/5s);
  });
  // Under way once Redis stops answering (on a busy machine the thread that
  // sends it can start late, and a lookup made first would be answered).
  ASSERT_TRUE(eventually([&] { return !testing::redis_answers_within(redis.port(), 50ms); }, 2s));
  EXPECT_EQ(lookup(store, "conv:1"), "failed");
  EXPECT_EQ(sleeping.get(), "+OK");
  EXPECT_EQ(lookup(store, "conv:1"), "found:a");
  EXPECT_TRUE(store.stats().connected);
  EXPECT_EQ(store.stats().lookups_failed, 1u);
}

// After a timeout no connection is tried within retry_after: the lookups
// behind it fail without waiting for one. The timeout is long, so that the
// bound on the five lookups (1 s, room for a slow machine) stays well below
// what a single connection tried would cost.
TEST(HomeStoreUnreachable, NoNewConnectionWithinRetryAfter) {
  SilentRedis silent;
  HomeStoreOptions options = options_for(silent.port(), /*retry_after=*/60s);
  options.timeout = 2s;
  HomeStore store(options);
  EXPECT_EQ(lookup(store, "conv:1"), "failed");
  const auto start = Clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(lookup(store, "conv:2"), "failed");
  EXPECT_LT(since(start), 1s);
  EXPECT_EQ(silent.connections(), 1u);
  EXPECT_FALSE(store.stats().connected);
}

TEST(HomeStoreUnreachable, SilentServerFailsAfterTheTimeout) {
  SilentRedis silent;
  HomeStoreOptions options = options_for(silent.port());
  options.timeout = 300ms;
  HomeStore store(options);
  ASSERT_TRUE(silent.answer_ping());  // connected, then silent
  ASSERT_TRUE(eventually([&] { return store.stats().connected; }));
  const auto start = Clock::now();
  EXPECT_EQ(lookup(store, "conv:1"), "failed");
  EXPECT_GE(since(start), 250ms);
  EXPECT_LT(since(start), 2000ms);
  EXPECT_EQ(store.stats().lookups_failed, 1u);
}

// A listener that accepts and never answers (a Redis stopped with SIGSTOP,
// or not Redis at all) is never taken for a Redis that answers: the
// connection counts only after a PING's reply.
TEST(HomeStoreUnreachable, ASilentServerIsNeverCountedConnected) {
  SilentRedis silent;
  HomeStoreOptions options = options_for(silent.port());
  options.timeout = 30ms;
  HomeStore store(options);
  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(store.stats().connected) << "sample " << i;
    std::this_thread::sleep_for(20ms);
  }
}

// Nothing asked of the store, Redis goes away: `connected` says so within
// about retry_after, not only at the next request.
TEST_F(HomeStoreTest, AnIdleStoreSeesRedisGo) {
  HomeStore store(options_for(redis_.port(), /*retry_after=*/100ms));
  ASSERT_EQ(lookup(store, "conv:1"), "absent");
  ASSERT_TRUE(store.stats().connected);
  redis_.stop();
  EXPECT_TRUE(eventually([&] { return !store.stats().connected; }));
  EXPECT_EQ(store.stats().lookups_failed, 0u);
}

TEST_F(HomeStoreTest, RestartedRedisIsUsedAgainAfterRetryAfter) {
  HomeStore store(options_for(redis_.port(), /*retry_after=*/100ms));
  store.put("conv:1", "a", 60s);
  ASSERT_EQ(lookup(store, "conv:1"), "found:a");

  redis_.stop();
  EXPECT_EQ(lookup(store, "conv:1"), "failed");
  EXPECT_FALSE(store.stats().connected);

  redis_.start();
  EXPECT_TRUE(eventually([&] { return store.stats().connected; }));
  store.put("conv:2", "b", 60s);
  EXPECT_EQ(lookup(store, "conv:2"), "found:b");
}

// Redis restarted while the store idled: the connection it closed is found
// before it is used and opened again at once, so no lookup fails for it and
// the retry gate (a minute here) never closes.
TEST_F(HomeStoreTest, ARedisRestartedWhileIdleIsUsedAtOnce) {
  HomeStore store(options_for(redis_.port(), /*retry_after=*/60s));
  ASSERT_EQ(lookup(store, "conv:1"), "absent");
  redis_.stop();
  redis_.start();
  store.put("conv:2", "b", 60s);
  EXPECT_EQ(lookup(store, "conv:2"), "found:b");
  EXPECT_EQ(store.stats().lookups_failed, 0u);
  EXPECT_EQ(store.stats().writes_failed, 0u);
  EXPECT_TRUE(store.stats().connected);
}

// hiredis writes with write(2): a big write to a connection Redis closed
// would raise SIGPIPE, and its default action would end this process.
TEST_F(HomeStoreTest, WritingToAClosedConnectionDoesNotKillTheProcess) {
  HomeStore store(options_for(redis_.port(), /*retry_after=*/60s));
  ASSERT_EQ(lookup(store, "conv:1"), "absent");
  redis_.stop();
  store.put("conv:big", std::string(16 << 20, 'x'), 60s);
  EXPECT_EQ(lookup(store, "conv:1"), "failed");
  EXPECT_EQ(store.stats().writes_failed, 1u);
}

TEST_F(HomeStoreTest, ConcurrentLookupsCompleteExactlyOnce) {
  HomeStore store(options_for(redis_.port()));
  store.put("conv:even", "home", 60s);
  ASSERT_EQ(lookup(store, "conv:even"), "found:home");

  constexpr int kThreads = 8;
  constexpr int kEach = 500;
  std::vector<std::atomic<int>> calls(kThreads * kEach);
  std::atomic<int> wrong{0};
  std::atomic<int> total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const int id = t * kEach + i;
        const bool even = id % 2 == 0;
        store.get(even ? "conv:even" : "conv:odd", [&calls, &wrong, &total, id, even](Lookup l) {
          ++calls[id];
          ++total;
          const bool right = even ? l.status == LookupStatus::kFound && l.value == "home"
                                  : l.status == LookupStatus::kAbsent;
          if (!right) ++wrong;
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(eventually([&] { return total == kThreads * kEach; }));
  std::this_thread::sleep_for(50ms);  // room for a second call, were there one
  int twice = 0, never = 0;
  for (auto& c : calls) {
    twice += c > 1;
    never += c == 0;
  }
  EXPECT_EQ(never, 0);
  EXPECT_EQ(twice, 0);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(store.stats().lookups_failed, 0u);
}

// One lookup is on the wire to a server that does not answer; one more
// fits the queue; beyond it, lookups fail on the caller's thread and writes
// are dropped.
TEST(HomeStoreUnreachable, MaxPendingRefusesLookupsAndDropsWrites) {
  SilentRedis silent;
  HomeStoreOptions options = options_for(silent.port());
  options.timeout = 1000ms;
  options.max_pending = 1;
  HomeStore store(options);
  ASSERT_TRUE(silent.answer_ping());
  ASSERT_TRUE(eventually([&] { return store.stats().connected; }));
  std::atomic<int> failed{0};
  store.get("conv:on-the-wire", [&](Lookup l) { failed += l.status == LookupStatus::kFailed; });
  ASSERT_TRUE(silent.received("conv:on-the-wire"));

  store.get("conv:queued", [&](Lookup l) { failed += l.status == LookupStatus::kFailed; });
  bool refused_here = false;
  const auto caller = std::this_thread::get_id();
  store.get("conv:refused", [&](Lookup l) {
    refused_here = l.status == LookupStatus::kFailed && std::this_thread::get_id() == caller;
  });
  EXPECT_TRUE(refused_here);
  store.put("conv:dropped", "a", 60s);
  EXPECT_EQ(store.stats().writes_dropped, 1u);
  EXPECT_EQ(store.stats().lookups_failed, 1u);
  EXPECT_EQ(failed, 0);  // the other two wait for the timeout
  EXPECT_TRUE(eventually([&] { return failed == 2; }));
}

TEST(HomeStoreUnreachable, DestructorFailsWhatIsQueued) {
  SilentRedis silent;
  HomeStoreOptions options = options_for(silent.port());
  options.timeout = 300ms;
  std::atomic<int> calls{0};
  std::atomic<int> failed{0};
  const auto count = [&](Lookup l) {
    ++calls;
    failed += l.status == LookupStatus::kFailed;
  };
  {
    HomeStore store(options);
    ASSERT_TRUE(silent.answer_ping());
    ASSERT_TRUE(eventually([&] { return store.stats().connected; }));
    store.get("conv:on-the-wire", count);
    ASSERT_TRUE(silent.received("conv:on-the-wire"));
    for (int i = 0; i < 10; ++i) store.get("conv:queued", count);
    store.put("conv:w", "a", 60s);
  }
  EXPECT_EQ(calls, 11);
  EXPECT_EQ(failed, 11);
}

class HomeStoreAuthTest : public ::testing::Test {
 protected:
  HomeStoreOptions with_password(std::string username, std::string password) {
    HomeStoreOptions options = options_for(redis_.port(), /*retry_after=*/60s);
    options.address.username = std::move(username);
    options.address.password = std::move(password);
    return options;
  }

  RedisServer redis_{RedisServerOptions{.password = "sesame"}};
};

TEST_F(HomeStoreAuthTest, RightPasswordIsAccepted) {
  HomeStore store(with_password("", "sesame"));
  store.put("conv:1", "a", 60s);
  EXPECT_EQ(lookup(store, "conv:1"), "found:a");
  EXPECT_TRUE(store.stats().connected);
}

TEST_F(HomeStoreAuthTest, UserAndPasswordAreAccepted) {
  HomeStore store(with_password("default", "sesame"));
  EXPECT_EQ(lookup(store, "conv:1"), "absent");
}

TEST_F(HomeStoreAuthTest, WrongPasswordFailsAndIsLogged) {
  CapturedLog log;
  {
    HomeStore store(with_password("", "open-barley"));
    EXPECT_EQ(lookup(store, "conv:1"), "failed");
    EXPECT_FALSE(store.stats().connected);
  }
  EXPECT_EQ(log.count("warn"), 1u);
  EXPECT_EQ(log.count("redis refused AUTH: WRONGPASS"), 1u);
  EXPECT_EQ(log.count("open-barley"), 0u);
}

// Redis answers NOAUTH to each command: the connection is no use.
TEST_F(HomeStoreAuthTest, NoPasswordFails) {
  HomeStore store(with_password("", ""));
  EXPECT_EQ(lookup(store, "conv:1"), "failed");
  EXPECT_FALSE(store.stats().connected);
}

TEST_F(HomeStoreTest, DatabaseIsSelected) {
  HomeStoreOptions db3 = options_for(redis_.port());
  db3.address.database = 3;
  HomeStore writer(db3);
  writer.put("conv:1", "a", 60s);
  ASSERT_TRUE(eventually([&] { return writer.stats().writes_sent == 1; }));

  HomeStore other_in_db3(db3);
  HomeStore in_db0(options_for(redis_.port()));
  EXPECT_EQ(lookup(other_in_db3, "conv:1"), "found:a");
  EXPECT_EQ(lookup(in_db0, "conv:1"), "absent");
  EXPECT_EQ(redis_.command({"DBSIZE"}), ":0");
}

// Once when an outage begins (and when its cause changes), once when it
// ends; never per request.
TEST_F(HomeStoreTest, OutageIsLoggedOnceAndItsEndOnce) {
  CapturedLog log;
  {
    HomeStore store(options_for(redis_.port(), /*retry_after=*/20ms));
    ASSERT_EQ(lookup(store, "conv:1"), "absent");
    redis_.stop();
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(lookup(store, "conv:1"), "failed");
      store.put("conv:1", "a", 60s);
      std::this_thread::sleep_for(10ms);
    }
    redis_.start();
    ASSERT_TRUE(eventually([&] { return store.stats().connected; }));
    EXPECT_EQ(lookup(store, "conv:1"), "absent");
  }
  EXPECT_EQ(log.count("cannot use redis://127.0.0.1:" + std::to_string(redis_.port()) + "/0 ("),
            1u);
  EXPECT_EQ(log.count("placed by this warden alone"), 1u);
  EXPECT_LE(log.count("warn"), 2u);
  EXPECT_EQ(log.count("info"), 2u);  // the first connection, and Redis answering again
  EXPECT_EQ(log.count("info shared homes: connected to redis://127.0.0.1:" +
                      std::to_string(redis_.port()) + "/0"),
            1u);
  EXPECT_EQ(log.count("info shared homes: redis://127.0.0.1:" + std::to_string(redis_.port()) +
                      "/0 answers again"),
            1u);
}

// Accepts connections and fails each in turn one of two ways: closed at
// once, or answered "-LOADING" (a Redis loading its data).
class FickleServer {
 public:
  FickleServer() : listener_(testing::loopback_listener(64, port_)) {
    thread_ = std::thread([this] { serve(); });
  }
  ~FickleServer() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  FickleServer(const FickleServer&) = delete;
  FickleServer& operator=(const FickleServer&) = delete;
  std::uint16_t port() const { return port_; }
  int connections() const { return connections_.load(); }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) continue;
      if (connections_++ % 2 == 1) {
        pollfd c{fd, POLLIN, 0};
        char buf[512];
        if (::poll(&c, 1, 1000) > 0 && ::recv(fd, buf, sizeof buf, 0) > 0) {
          static constexpr std::string_view kLoading = "-LOADING Redis is loading the dataset\r\n";
          ::send(fd, kLoading.data(), kLoading.size(), MSG_NOSIGNAL);
        }
      }
      ::close(fd);
    }
  }

  std::uint16_t port_ = 0;
  int listener_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

// An outage whose connections fail one way, then another, in turn, logs each
// cause once, not a line per connection.
TEST(HomeStoreUnreachable, AnOutageWhoseCausesTakeTurnsLogsEachOnce) {
  FickleServer fickle;
  CapturedLog log;
  {
    HomeStore store(options_for(fickle.port(), /*retry_after=*/10ms));
    const auto until = Clock::now() + 1500ms;
    while (Clock::now() < until && fickle.connections() < 12) {
      EXPECT_EQ(lookup(store, "conv:1"), "failed");
      std::this_thread::sleep_for(15ms);
    }
  }
  ASSERT_GE(fickle.connections(), 6) << "too few connections to see causes take turns";
  // Closed at once reads as "closed" or as a reset, as the race goes.
  const auto lines = ::testing::PrintToString(log.lines());
  EXPECT_EQ(log.count("LOADING"), 1u) << lines;
  EXPECT_LE(log.count("Server closed the connection"), 1u) << lines;
  EXPECT_LE(log.count("reset by peer"), 1u) << lines;
  EXPECT_LE(log.count("cannot use"), 3u) << lines;
}

}  // namespace
}  // namespace lmwarden::homes
