// look_up from several io_contexts at once: each caller gets the answer of
// the lookup it shares, on its own thread, and every lookup's thread ends.
// (A DNS server that never answers is tested with a whole warden, in a mount
// namespace of its own: FaultNameLookup.)
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "http_test_client.h"
#include "net/name_lookup.h"

namespace lmwarden::net {
namespace {

using std::chrono::seconds;

TEST(NameLookup, CallersOnSeveralThreadsEachGetTheAnswerOnTheirOwnThread) {
  constexpr int kThreads = 2;
  constexpr int kCallers = 40;  // per thread, all at once: they share lookups
  forget_kept_answers();        // so that the callers wait for a lookup
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  std::atomic<int> answered{0};
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    contexts.push_back(std::make_unique<asio::io_context>(1));
    for (int i = 0; i < kCallers; ++i)
      asio::co_spawn(
          *contexts.back(),
          [&, port = static_cast<std::uint16_t>(8000 + i % 3)]() -> Awaitable<void> {
            const auto caller = std::this_thread::get_id();
            auto [ec, endpoints] =
                co_await look_up(co_await asio::this_coro::executor, "localhost", port,
                                 std::chrono::steady_clock::now() + seconds(20));
            bool loopback = !endpoints.empty();
            for (const auto& e : endpoints)
              loopback = loopback && e.address().is_loopback() && e.port() == port;
            if (ec || !loopback || std::this_thread::get_id() != caller) ++wrong;
            ++answered;
          },
          asio::detached);
  }
  std::vector<std::thread> threads;
  for (auto& ctx : contexts) threads.emplace_back([&ctx] { ctx->run(); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(answered, kThreads * kCallers);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(lookups_under_way(), 0u);
}

// A host's last answer is kept: a caller gets it at once (its own port put
// in), even one whose deadline has passed.
TEST(NameLookup, AKeptAnswerIsGivenAtOnceWhateverTheDeadline) {
  forget_kept_answers();
  asio::io_context ctx{1};
  std::vector<std::pair<beast::error_code, Endpoints>> answers;
  asio::co_spawn(
      ctx,
      [&]() -> Awaitable<void> {
        const auto ex = co_await asio::this_coro::executor;
        const auto now = std::chrono::steady_clock::now();
        answers.push_back(co_await look_up(ex, "localhost", 80, now + seconds(20)));
        answers.push_back(co_await look_up(ex, "localhost", 81, now - seconds(1)));
      },
      asio::detached);
  ctx.run();
  ASSERT_EQ(answers.size(), 2u);
  for (const auto& [ec, endpoints] : answers) {
    EXPECT_FALSE(ec) << ec.message();
    ASSERT_FALSE(endpoints.empty());
  }
  EXPECT_EQ(answers[0].second.front().port(), 80);
  EXPECT_EQ(answers[1].second.front().port(), 81);
  EXPECT_EQ(answers[1].second.front().address(), answers[0].second.front().address());
}

// The callers' coroutines, and their timers, go with their context; the
// lookup thread, which never touches a context, finishes alone (a use after
// free or a race there is the sanitizer builds' to catch).
TEST(NameLookup, AnIoContextDestroyedWhileItsCallersWaitLeavesTheLookupUnheard) {
  for (int round = 0; round < 20; ++round) {
    forget_kept_answers();
    auto ctx = std::make_unique<asio::io_context>(1);
    for (int i = 0; i < 4; ++i)
      asio::co_spawn(
          *ctx,
          [&]() -> Awaitable<void> {
            (void)co_await look_up(co_await asio::this_coro::executor, "localhost", 80,
                                   std::chrono::steady_clock::now() + seconds(20));
          },
          asio::detached);
    // Until the callers wait; the context is then destroyed under them, its
    // lookup answering before, during or after.
    while (lookups_under_way() == 0 && ctx->poll_one() > 0) {
    }
    if (round % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ctx.reset();
  }
  EXPECT_TRUE(testing::eventually([] { return lookups_under_way() == 0; }));
}

}  // namespace
}  // namespace lmwarden::net
