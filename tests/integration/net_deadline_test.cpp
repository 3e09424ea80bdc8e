// ConnectionDeadline over a real socket pair on 127.0.0.1: a pending read is
// cancelled (or the socket closed) when the armed deadline passes, not before,
// and a disarmed or re-armed deadline leaves the read alone.
#include "net/connection_deadline.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <optional>

namespace lmwarden::net {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A connected pair: `near` is the side the deadline guards.
struct SocketPair {
  asio::io_context io;
  Socket near{io}, far{io};
  asio::steady_timer later{io};
  SocketPair() {
    tcp::acceptor acceptor{io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    far.connect(acceptor.local_endpoint());
    acceptor.accept(near);
  }
  // The far side sends one byte after `delay` (while `io` runs).
  void send_later(milliseconds delay) {
    later.expires_after(delay);
    later.async_wait([this](boost::system::error_code) { asio::write(far, asio::buffer("z", 1)); });
  }
};

// `at`: when the read completed. The tests count from a time of their own
// taken before they arm the deadline (or start the sending): the deadline
// runs from then, and read_once may start later on a busy machine.
struct ReadResult {
  boost::system::error_code ec;
  std::size_t bytes = 0;
  Clock::time_point at{};
};

// Starts one read of `pair.near` and runs `io` until it completes (at most 5 s).
std::optional<ReadResult> read_once(SocketPair& pair, const std::function<void()>& while_pending = {}) {
  std::optional<ReadResult> result;
  char byte[16];
  const auto start = Clock::now();
  pair.near.async_read_some(asio::buffer(byte), [&](boost::system::error_code ec, std::size_t n) {
    result = ReadResult{ec, n, Clock::now()};
  });
  if (while_pending) while_pending();
  // Until the read completes: the deadline's timer may keep waking after it.
  pair.io.restart();
  const auto give_up = start + std::chrono::seconds(5);
  while (!result && Clock::now() < give_up) pair.io.run_one_until(give_up);
  return result;
}

TEST(ConnectionDeadline, CancelsAPendingReadWhenTheDeadlinePasses) {
  SocketPair pair;
  ConnectionDeadline deadline{pair.io.get_executor()};
  const auto start = Clock::now();
  deadline.arm(pair.near, milliseconds(50));
  const auto r = read_once(pair);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ec, asio::error::operation_aborted);
  EXPECT_GE(r->at - start, milliseconds(45));
  EXPECT_TRUE(deadline.expired());
  EXPECT_TRUE(pair.near.is_open()) << "kCancel leaves the socket open (a 408 can still be sent)";
}

TEST(ConnectionDeadline, ClosesTheSocketWhenAskedTo) {
  SocketPair pair;
  ConnectionDeadline deadline{pair.io.get_executor()};
  deadline.arm(pair.near, milliseconds(30), ConnectionDeadline::OnExpiry::kClose);
  const auto r = read_once(pair);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ec);
  EXPECT_TRUE(deadline.expired());
  EXPECT_FALSE(pair.near.is_open());
}

TEST(ConnectionDeadline, DataBeforeTheDeadlineIsReadAndReArmingClearsExpiry) {
  SocketPair pair;
  ConnectionDeadline deadline{pair.io.get_executor()};
  deadline.arm(pair.near, milliseconds(30));
  ASSERT_EQ(read_once(pair)->ec, asio::error::operation_aborted);
  ASSERT_TRUE(deadline.expired());

  deadline.arm(pair.near, std::chrono::seconds(10));
  EXPECT_FALSE(deadline.expired());
  const auto r = read_once(pair, [&] { asio::write(pair.far, asio::buffer("x", 1)); });
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ec);
  EXPECT_EQ(r->bytes, 1u);
  EXPECT_FALSE(deadline.expired());
}

TEST(ConnectionDeadline, DisarmedDeadlineNeverFires) {
  SocketPair pair;
  ConnectionDeadline deadline{pair.io.get_executor()};
  deadline.arm(pair.near, milliseconds(20));
  deadline.disarm();
  // The timer still wakes at 20 ms; it must find nothing armed. The data
  // arrives well after that.
  const auto start = Clock::now();
  pair.send_later(milliseconds(150));
  const auto r = read_once(pair);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ec) << r->ec.message();
  EXPECT_GE(r->at - start, milliseconds(140));
  EXPECT_FALSE(deadline.expired());
}

// The timer moves only when a deadline falls before its expiry: a short
// deadline armed after a long one must still fire on time.
TEST(ConnectionDeadline, AShorterDeadlineAfterALongOneFiresOnTime) {
  SocketPair pair;
  ConnectionDeadline deadline{pair.io.get_executor()};
  const auto start = Clock::now();
  deadline.arm(pair.near, std::chrono::seconds(30));
  deadline.arm(pair.near, milliseconds(40));
  const auto r = read_once(pair);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ec, asio::error::operation_aborted);
  EXPECT_LT(r->at - start, std::chrono::seconds(3));
}

// A longer deadline after a short one: the timer wakes at the short horizon,
// finds the real deadline later, and waits on; the read is not cut early.
TEST(ConnectionDeadline, ALongerDeadlineAfterAShortOneIsNotCutEarly) {
  SocketPair pair;
  ConnectionDeadline deadline{pair.io.get_executor()};
  const auto start = Clock::now();
  deadline.arm(pair.near, milliseconds(30));
  deadline.arm(pair.near, milliseconds(300));
  const auto r = read_once(pair);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ec, asio::error::operation_aborted);
  EXPECT_GE(r->at - start, milliseconds(290));
  EXPECT_TRUE(deadline.expired());
}

// What is left of a first-byte timeout may be nothing: arm_until() with a
// deadline passed expires at once, and the timeouts armed after it still wake
// the timer about once each. arm() with the rest as a timeout of zero had made
// it wake at once, again and again, for the connection's life.
TEST(ConnectionDeadline, ADeadlineInTimeThatHasPassedLeavesTheWakeUpsAlone) {
  SocketPair pair;
  ConnectionDeadline deadline{pair.io.get_executor()};
  deadline.arm_until(pair.near, Clock::now() - milliseconds(1));
  auto r = read_once(pair);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ec, asio::error::operation_aborted);
  EXPECT_TRUE(deadline.expired());

  deadline.arm(pair.near, milliseconds(200));
  bool done = false;
  char byte[16];
  pair.near.async_read_some(asio::buffer(byte),
                            [&](boost::system::error_code, std::size_t) { done = true; });
  pair.io.restart();
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  std::size_t handlers = 0;
  while (!done && Clock::now() < give_up) handlers += pair.io.run_one_until(give_up);
  EXPECT_TRUE(done);
  EXPECT_TRUE(deadline.expired());
  EXPECT_LT(handlers, 20u) << "the timer woke that many times in 200 ms";
}

TEST(ConnectionDeadline, DestroyedWhileArmedLeavesTheSocketAlone) {
  SocketPair pair;
  {
    ConnectionDeadline deadline{pair.io.get_executor()};
    deadline.arm(pair.near, milliseconds(20));
  }
  pair.send_later(milliseconds(100));
  const auto r = read_once(pair);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ec) << r->ec.message();
  EXPECT_EQ(r->bytes, 1u);
}

}  // namespace
}  // namespace lmwarden::net
