// async_read_available over a real TCP connection on 127.0.0.1: it reads as
// async_read_some does (bytes, end of stream, a reset, a closed socket, a read
// pending when its io_context goes); after a read that the kernel says left
// nothing, the next read waits for the socket's next readiness report without
// a recv that finds nothing; and bytes or an end of stream that are left are
// read at once, with no report to wait for. The count of recvs that found
// nothing (reads_that_found_nothing) shows the edge tracking at work; the
// count of reads the sweep completed (reads_completed_by_sweep) shows that
// those reads did not need the sweep, and that a reset which came with the
// last bytes (no report of its own) is seen by it. Where this build has no
// edge tracking (kEdgeTrackedReads false) those tests are skipped.
#include "net/read_available.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "net/http_server.h"

namespace lmwarden::net {
namespace {

using std::chrono::milliseconds;
using namespace std::string_view_literals;

// A connected pair: the test reads `near`, and writes `far`.
struct Connection {
  asio::io_context io;
  Socket near{io.get_executor()}, far{io.get_executor()};
  asio::steady_timer later{io};
  explicit Connection(bool drain_hints = true) {
    Acceptor acceptor{io.get_executor(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    far.connect(acceptor.local_endpoint());
    acceptor.accept(near);
    far.set_option(tcp::no_delay(true));
    if (drain_hints) {
      EXPECT_EQ(enable_drain_hints(near), kEdgeTrackedReads);
    }
  }
  void send(std::string_view bytes) { asio::write(far, asio::buffer(bytes)); }
  // Sends `bytes` after `delay`, while `io` runs.
  void send_later(milliseconds delay, std::string bytes) {
    later.expires_after(delay);
    later.async_wait([this, bytes = std::move(bytes)](boost::system::error_code) { send(bytes); });
  }
};

struct ReadResult {
  boost::system::error_code ec;
  std::string bytes;
};

// Starts one read of up to `room` bytes into a single buffer; `result` is
// set when it completes.
void start_read(Connection& c, std::size_t room, std::optional<ReadResult>& result) {
  auto into = std::make_shared<std::string>(room, '\0');
  async_read_available(c.near, asio::buffer(*into),
                       [&result, into](boost::system::error_code ec, std::size_t n) {
                         result = ReadResult{ec, into->substr(0, n)};
                       });
}

// Runs `c.io` until `result` is set, for at most `limit`.
void run_until_set(Connection& c, const std::optional<ReadResult>& result,
                   std::chrono::steady_clock::duration limit) {
  c.io.restart();
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (!result && std::chrono::steady_clock::now() < give_up) c.io.run_one_until(give_up);
}

// One such read, run to completion (at most 5 s).
std::optional<ReadResult> read_once(Connection& c, std::size_t room) {
  std::optional<ReadResult> result;
  start_read(c, room, result);
  run_until_set(c, result, std::chrono::seconds(5));
  return result;
}

// Runs the reactor once: epoll's reports waiting now are taken (and handled:
// with no read waiting, Asio only remembers that the socket is ready). The
// work guard makes poll() run even when no operation is pending.
void take_reports(Connection& c) {
  const auto guard = asio::make_work_guard(c.io);
  c.io.restart();
  c.io.poll();
}

// Waits until the far side's bytes are in the near side's receive queue
// (loopback delivers them within the send, but this does not rely on it).
void wait_until_readable(Connection& c, std::size_t bytes) {
  for (int i = 0; i < 500 && c.near.available() < bytes; ++i)
    std::this_thread::sleep_for(milliseconds(1));
  ASSERT_GE(c.near.available(), bytes);
}

// The far side sends `bytes`, and they are in the near side's receive queue.
void arrive(Connection& c, std::string_view bytes) {
  c.send(bytes);
  wait_until_readable(c, bytes.size());
}

// Recvs that found nothing over two reads: one of bytes that are there
// ("first"), then one of bytes that come 20 ms later ("second").
std::uint64_t empty_recvs_over_a_pause(Connection& c) {
  arrive(c, "first"sv);
  const auto before = reads_that_found_nothing();
  const auto first = read_once(c, 16);
  c.send_later(milliseconds(20), "second");
  const auto second = read_once(c, 16);
  EXPECT_TRUE(first && second);
  if (first && second) {
    EXPECT_EQ(first->bytes, "first");
    EXPECT_EQ(second->bytes, "second");
  }
  return reads_that_found_nothing() - before;
}

TEST(ReadAvailable, ReadsWhatHasArrived) {
  Connection c;
  arrive(c, "hello"sv);
  const auto r = read_once(c, 16);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ec) << r->ec.message();
  EXPECT_EQ(r->bytes, "hello");
}

TEST(ReadAvailable, AfterAReadThatLeftNothingTheNextReadWaitsWithoutARecvThatFindsNothing) {
  if constexpr (!kEdgeTrackedReads) GTEST_SKIP() << "this build reads with async_read_some";
  Connection c;
  EXPECT_EQ(empty_recvs_over_a_pause(c), 0U) << "the second read tried a recv before waiting";
}

// Without TCP_INQ nothing says the socket was emptied: the read after a short
// one tries a recv first, as async_read_some does.
TEST(ReadAvailable, WithoutDrainHintsTheNextReadTriesARecvFirst) {
  if constexpr (!kEdgeTrackedReads) GTEST_SKIP() << "this build reads with async_read_some";
  Connection c{false};
  EXPECT_EQ(empty_recvs_over_a_pause(c), 1U);
}

// Bytes left by a read whose buffer they did not fit, after epoll's report of
// them was taken (take_reports): the next read must take them at once, since no
// report will come for them again.
TEST(ReadAvailable, BytesLeftInTheSocketAreReadWithoutWaitingForAReport) {
  Connection c;
  arrive(c, "0123456789abcdef"sv);
  take_reports(c);
  const auto swept = reads_completed_by_sweep();
  const auto first = read_once(c, 10);
  const auto second = read_once(c, 10);
  ASSERT_TRUE(first && second) << "the read waited for a report that had already come";
  EXPECT_EQ(first->bytes, "0123456789");
  EXPECT_EQ(second->bytes, "abcdef");
  EXPECT_EQ(reads_completed_by_sweep() - swept, 0U) << "the read waited for the sweep";
}

// The peer's last bytes and its FIN came together, while a read waited: one
// report for both, and the read takes the bytes. The FIN makes no report of
// its own, so the next read must see the end of the stream without one.
TEST(ReadAvailable, AnEndOfStreamThatCameWithTheLastBytesIsSeenAtOnce) {
  Connection c;
  const auto swept = reads_completed_by_sweep();
  std::optional<ReadResult> last;
  start_read(c, 16, last);
  c.io.poll();  // the read waits
  ASSERT_FALSE(last);
  c.send("last"sv);
  c.far.shutdown(tcp::socket::shutdown_send);
  c.io.restart();
  c.io.run_one_for(std::chrono::seconds(5));
  ASSERT_TRUE(last);
  EXPECT_EQ(last->bytes, "last");
  const auto end = read_once(c, 16);
  ASSERT_TRUE(end) << "the end of the stream went unseen";
  EXPECT_EQ(end->ec, asio::error::eof);
  EXPECT_EQ(reads_completed_by_sweep() - swept, 0U) << "the end of the stream waited for the sweep";
}

// The peer's last bytes and its reset (RST) came together, and epoll's one
// report of both was taken while no read waited. The read of the bytes
// leaves none, so the next read waits for a report; none comes for the
// reset. The sweep finds the socket readable and completes that read with
// the reset.
TEST(ReadAvailable, AResetThatCameWithTheLastBytesIsSeenByTheSweep) {
  Connection c;
  c.far.set_option(asio::socket_base::linger(true, 0));  // close sends RST
  c.send("last"sv);
  c.far.close();
  wait_until_readable(c, 4);
  take_reports(c);
  const auto swept = reads_completed_by_sweep();
  const auto data = read_once(c, 16);
  ASSERT_TRUE(data);
  EXPECT_EQ(data->bytes, "last");
  std::optional<ReadResult> reset;
  start_read(c, 16, reset);
  run_until_set(c, reset, 3 * kSweepPeriod);
  ASSERT_TRUE(reset) << "the reset went unseen";
  EXPECT_EQ(reset->ec, asio::error::connection_reset) << reset->ec.message();
  if constexpr (kEdgeTrackedReads) {
    EXPECT_EQ(reads_completed_by_sweep() - swept, 1U);
  }
}

// A read of a quiet socket waits through sweeps, then takes what comes.
TEST(ReadAvailable, TheSweepLeavesAReadOfAQuietSocketWaiting) {
  Connection c;
  const auto swept = reads_completed_by_sweep();
  std::optional<ReadResult> r;
  start_read(c, 16, r);
  run_until_set(c, r, 2 * kSweepPeriod + milliseconds(200));
  EXPECT_FALSE(r) << "the read ended with nothing to read";
  c.send("late"sv);
  run_until_set(c, r, std::chrono::seconds(5));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ec) << r->ec.message();
  EXPECT_EQ(r->bytes, "late");
  EXPECT_EQ(reads_completed_by_sweep() - swept, 0U);
}

// The socket was emptied, then bytes came and epoll reported them while no
// read was waiting (take_reports): the next read takes them at once, with
// no wait and no recv that finds nothing.
TEST(ReadAvailable, BytesReportedWhileNoReadWaitedAreReadAtOnce) {
  Connection c;
  arrive(c, "first"sv);
  const auto first = read_once(c, 16);
  arrive(c, "second"sv);
  take_reports(c);
  const auto before = reads_that_found_nothing();
  const auto swept = reads_completed_by_sweep();
  const auto second = read_once(c, 16);
  ASSERT_TRUE(first && second) << "the report was lost: the read waited";
  EXPECT_EQ(second->bytes, "second");
  EXPECT_EQ(reads_that_found_nothing() - before, 0U);
  EXPECT_EQ(reads_completed_by_sweep() - swept, 0U) << "the report was lost: the read waited";
}

// The same, with the report not yet taken from epoll when the read starts.
TEST(ReadAvailable, BytesThatCameBeforeTheReadStartedAreNotMissed) {
  Connection c;
  arrive(c, "first"sv);
  const auto first = read_once(c, 16);
  arrive(c, "second"sv);
  const auto swept = reads_completed_by_sweep();
  const auto second = read_once(c, 16);
  ASSERT_TRUE(first && second) << "the read waited for a report that had already come";
  EXPECT_EQ(second->bytes, "second");
  EXPECT_EQ(reads_completed_by_sweep() - swept, 0U) << "the read waited for the sweep";
}

TEST(ReadAvailable, ReadsIntoSeveralBuffersInOrder) {
  Connection c;
  arrive(c, "abcdefghij"sv);
  std::array<char, 4> head{};
  std::array<char, 16> tail{};
  const std::array<asio::mutable_buffer, 2> into{asio::buffer(head), asio::buffer(tail)};
  std::optional<std::size_t> got;
  async_read_available(c.near, into, [&](boost::system::error_code ec, std::size_t n) {
    EXPECT_FALSE(ec);
    got = n;
  });
  c.io.run_for(std::chrono::seconds(5));
  ASSERT_TRUE(got);
  ASSERT_EQ(*got, 10U);
  EXPECT_EQ(std::string_view(head.data(), 4), "abcd");
  EXPECT_EQ(std::string_view(tail.data(), 6), "efghij");
}

TEST(ReadAvailable, TheEndOfTheStreamIsEofWithNoBytes) {
  Connection c;
  c.send("last"sv);
  c.far.shutdown(tcp::socket::shutdown_send);
  wait_until_readable(c, 4);
  const auto data = read_once(c, 16);
  const auto end = read_once(c, 16);
  ASSERT_TRUE(data && end);
  EXPECT_EQ(data->bytes, "last");
  EXPECT_EQ(end->ec, asio::error::eof);
  EXPECT_EQ(end->bytes, "");
}

TEST(ReadAvailable, ClosingTheSocketEndsAWaitingRead) {
  Connection c;
  asio::steady_timer close_later{c.io};
  close_later.expires_after(milliseconds(20));
  close_later.async_wait([&](boost::system::error_code) { c.near.close(); });
  const auto r = read_once(c, 16);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ec, asio::error::operation_aborted);
}

TEST(ReadAvailable, AResetIsAnError) {
  Connection c;
  c.far.set_option(asio::socket_base::linger(true, 0));  // close sends RST
  c.send_later(milliseconds(10), "x");
  const auto data = read_once(c, 16);
  c.far.close();
  const auto reset = read_once(c, 16);
  ASSERT_TRUE(data && reset);
  EXPECT_EQ(reset->ec, asio::error::connection_reset) << reset->ec.message();
}

TEST(ReadAvailable, AReadPendingWhenItsContextGoesIsDestroyedUnrun) {
  auto witness = std::make_shared<int>(0);
  bool ran = false;
  {
    Connection c;
    std::array<char, 8> into{};
    async_read_available(
        c.near, asio::buffer(into),
        [&ran, w = witness](boost::system::error_code, std::size_t) { ran = true; });
    c.io.poll();
    EXPECT_EQ(witness.use_count(), 2) << "the pending read holds its handler";
  }
  EXPECT_FALSE(ran);
  EXPECT_EQ(witness.use_count(), 1) << "the handler was not destroyed with the context";
}

// The server sets TCP_INQ once, on its listening socket: each connection it
// accepts must have it too.
TEST(ReadAvailable, AnAcceptedConnectionInheritsTheHints) {
  if constexpr (!kEdgeTrackedReads) GTEST_SKIP() << "this build reads with async_read_some";
  asio::io_context io;
  Acceptor acceptor{io.get_executor(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  ASSERT_TRUE(enable_drain_hints(acceptor));
  Socket client{io.get_executor()}, accepted{io.get_executor()};
  client.connect(acceptor.local_endpoint());
  acceptor.accept(accepted);
  int on = 0;
  socklen_t size = sizeof on;
  ASSERT_EQ(::getsockopt(accepted.native_handle(), IPPROTO_TCP, TCP_INQ, &on, &size), 0);
  EXPECT_EQ(on, 1);
}

// From a coroutine, as the warden reads: co_await with kAsTuple.
TEST(ReadAvailable, AwaitedFromACoroutine) {
  Connection c;
  const auto swept = reads_completed_by_sweep();
  std::string got;
  boost::system::error_code end;
  asio::co_spawn(
      c.io,
      [&]() -> Awaitable<void> {
        std::array<char, 32> into{};
        for (;;) {
          auto [ec, n] = co_await async_read_available(c.near, asio::buffer(into), kAsTuple);
          if (ec) {
            end = ec;
            break;
          }
          got.append(into.data(), n);
        }
      },
      asio::detached);
  c.send_later(milliseconds(5), "one ");
  asio::steady_timer more{c.io};
  more.expires_after(milliseconds(30));
  more.async_wait([&](boost::system::error_code) {
    c.send("two"sv);
    c.far.shutdown(tcp::socket::shutdown_send);
  });
  // Until the coroutine ends, not until the context runs out of work: the
  // sweep's timer stays pending for up to kSweepPeriod after the last read.
  c.io.restart();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!end && std::chrono::steady_clock::now() < give_up) c.io.run_one_until(give_up);
  EXPECT_EQ(got, "one two");
  EXPECT_EQ(end, asio::error::eof);
  EXPECT_EQ(reads_completed_by_sweep() - swept, 0U);
}

}  // namespace
}  // namespace lmwarden::net
