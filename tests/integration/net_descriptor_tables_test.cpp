// I/O threads with a descriptor table each (DescriptorTables::kPerThread),
// over real sockets on 127.0.0.1: connections reach every thread, their
// descriptors stay out of the process's own table, the listening socket
// stops accepting when told to, stopping closes each thread's descriptors on
// that thread, never a number of the process's table, and a name lookup adds
// no user to a thread's table.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "http_test_client.h"
#include "net/http_server.h"
#include "net/name_lookup.h"

namespace lmwarden::net {
namespace {

using testing::HttpConnection;

std::size_t entries(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// Descriptors in the table of the process (its first thread, this test's).
std::size_t process_descriptors() { return entries("/proc/self/fd"); }

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// Answers with the id of the thread that served the request.
Awaitable<void> answer_thread(Exchange& ex) {
  Response res{http::status::ok, 11};
  res.body() = std::to_string(::syscall(SYS_gettid));
  res.prepare_payload();
  co_await ex.respond(std::move(res));
}

// Never answers: the connection's coroutine is still waiting when the
// threads stop.
Awaitable<void> wait_forever(Exchange& ex) {
  Timer timer{ex.stream().get_executor()};
  timer.expires_after(std::chrono::hours(1));
  co_await timer.async_wait(kAsTuple);
}

// The same, counting the requests that reached it first.
Awaitable<void> count_then_wait_forever(std::atomic<int>& reached, Exchange& ex) {
  ++reached;
  co_await wait_forever(ex);
}

constexpr const char* kShared = "the I/O threads share the descriptor table here (see the log)";

struct Server {
  explicit Server(Handler handler, int threads = 2)
      : io(threads, DescriptorTables::kPerThread), http(io, ServerOptions{}, std::move(handler)) {
    port = http.listen("127.0.0.1", 0).port();
    io.start();
  }
  ~Server() { stop(); }
  void stop() {
    io.stop();
    io.join();
  }
  bool tables_of_their_own() const {
    for (std::size_t i = 0; i < io.size(); ++i)
      if (!io.own_table(i)) return false;
    return true;
  }
  IoThreads io;
  HttpServer http;
  std::uint16_t port = 0;
};

// One request on a keep-alive connection: the body of the reply.
std::string get(tcp::socket& socket, beast::flat_buffer& buffer) {
  http::request<http::empty_body> req{http::verb::get, "/", 11};
  req.set(http::field::host, "127.0.0.1");
  http::write(socket, req);
  http::response<http::string_body> res;
  http::read(socket, buffer, res);
  EXPECT_EQ(res.result_int(), 200);
  return res.body();
}

TEST(DescriptorTables, ConnectionsReachEveryThreadAndStayOutOfTheProcessTable) {
  Server server{answer_thread};
  if (!server.tables_of_their_own()) GTEST_SKIP() << kShared;
  // The clients share one context, whose reactor opens its descriptors with
  // the first socket: before counting.
  asio::io_context client_io;
  tcp::socket(client_io).open(tcp::v4());
  const std::size_t before = process_descriptors();
  struct Client {
    explicit Client(asio::io_context& io) : socket(io) {}
    tcp::socket socket;
    beast::flat_buffer buffer;
  };
  std::vector<std::unique_ptr<Client>> clients;
  std::set<std::string> threads;
  for (int i = 0; i < 8; ++i) {
    clients.push_back(std::make_unique<Client>(client_io));
    clients.back()->socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server.port));
    threads.insert(get(clients.back()->socket, clients.back()->buffer));
  }
  // Round robin over two threads, the second's connections sent to it over
  // its channel.
  EXPECT_EQ(threads.size(), 2u);
  // The process's table gained the clients' ends alone (shared, it would
  // also hold the server's eight).
  EXPECT_EQ(process_descriptors(), before + clients.size());
  // Each connection is served again, on the thread that served it first.
  for (auto& c : clients) EXPECT_TRUE(threads.count(get(c->socket, c->buffer)) == 1);
}

// Connects to port on 127.0.0.1 until refused, for up to 5 s: the error.
boost::system::error_code connect_until_refused(std::uint16_t port) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  boost::system::error_code ec;
  while (std::chrono::steady_clock::now() < deadline) {
    asio::io_context io;
    tcp::socket s{io};
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    // A reset: the handshake reached a backlog that its socket's close then
    // dropped (the close racing this connect); the next try says which it is.
    if (ec && ec != asio::error::connection_reset) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ec;
}

TEST(DescriptorTables, StopAcceptingRefusesNewConnections) {
  Server server{answer_thread};
  if (!server.tables_of_their_own()) GTEST_SKIP() << kShared;
  {
    HttpConnection before{server.port};
    before.send(http::verb::get, "/", "");
    EXPECT_EQ(before.read().status, 200);
  }
  server.http.stop_accepting();
  // Refused once the first thread has closed its listening socket: no other
  // table holds a copy that would go on accepting.
  EXPECT_EQ(connect_until_refused(server.port), asio::error::connection_refused);
}

TEST(DescriptorTables, ASocketOpenedElsewhereClosesWhenItsOwnerClosesIt) {
  // Another part of the process listens before the threads copy the table
  // (in the warden: the scraper's connections; in a test: a fake backend).
  asio::io_context other;
  tcp::acceptor elsewhere{other, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  const std::uint16_t port = elsewhere.local_endpoint().port();
  Server server{answer_thread};
  if (!server.tables_of_their_own()) GTEST_SKIP() << kShared;
  elsewhere.close();
  // A copy left in a thread's table would keep the port listening.
  EXPECT_EQ(connect_until_refused(port), asio::error::connection_refused);
}

TEST(DescriptorTables, StoppingClosesEachThreadsDescriptorsOnThatThread) {
  std::atomic<int> waiting{0};  // (before the server, whose handlers count on it)
  auto server = std::make_unique<Server>(
      [&waiting](Exchange& ex) { return count_then_wait_forever(waiting, ex); });
  if (!server->tables_of_their_own()) GTEST_SKIP() << kShared;
  // Opened after the threads copied the table, these numbers are free in
  // theirs too: the server's ends of the connections take the same ones.
  std::vector<std::unique_ptr<HttpConnection>> clients;
  for (int i = 0; i < 6; ++i) {
    clients.push_back(std::make_unique<HttpConnection>(server->port, std::chrono::seconds(5)));
    clients.back()->send(http::verb::get, "/", "");
  }
  int pipe_ends[2];
  ASSERT_EQ(::pipe2(pipe_ends, O_CLOEXEC), 0);
  // Every request is waiting in its coroutine (the stop below destroys them).
  ASSERT_TRUE(testing::eventually([&] { return waiting.load() == 6; }))
      << waiting.load() << " of the 6 requests reached their handler";
  const std::size_t before = process_descriptors();
  server->stop();
  server.reset();

  // Had a thread's descriptors been closed by number in the process's table,
  // the clients' sockets and the pipe, which share those numbers, would be
  // gone.
  for (auto& c : clients) EXPECT_TRUE(is_open(c->socket().native_handle()));
  EXPECT_TRUE(is_open(pipe_ends[0]));
  EXPECT_TRUE(is_open(pipe_ends[1]));
  // The server's ends were closed: each client reads the end of its stream.
  for (auto& c : clients) {
    char byte;
    boost::system::error_code ec;
    asio::read(c->socket(), asio::buffer(&byte, 1), ec);
    EXPECT_EQ(ec, asio::error::eof);
  }
  // The process's table lost what the server had put there (its reactors'
  // descriptors and the channels) and nothing else.
  EXPECT_LT(process_descriptors(), before);
  ::close(pipe_ends[0]);
  ::close(pipe_ends[1]);
}

// Whether threads a and b of this process use one descriptor table (kcmp);
// nothing where the kernel does not say.
std::optional<bool> same_table(pid_t a, pid_t b) {
  const long r = ::syscall(SYS_kcmp, a, b, KCMP_FILES, 0, 0);
  if (r < 0) return std::nullopt;
  return r == 0;
}

// A name looked up on an I/O thread (a backend named by hostname) is looked up
// on a thread of its own, which shares the I/O thread's table while it runs
// and ends with its lookup: then each I/O thread is again the only user of
// its table (the kernel's every lookup of a descriptor in a table with two
// users takes the slower path).
TEST(DescriptorTables, ANameLookupLeavesEachThreadTheOnlyUserOfItsTable) {
  Server server{answer_thread};
  if (!server.tables_of_their_own()) GTEST_SKIP() << kShared;
  forget_kept_answers();  // so that a lookup thread is started
  std::atomic<std::size_t> looked_up{0};
  for (std::size_t i = 0; i < server.io.size(); ++i)
    asio::co_spawn(
        server.io.at(i),
        [&]() -> Awaitable<void> {
          auto [ec, found] =
              co_await look_up(co_await asio::this_coro::executor, "localhost", 80,
                               std::chrono::steady_clock::now() + std::chrono::seconds(10));
          EXPECT_FALSE(ec) << ec.message();
          EXPECT_FALSE(found.empty());
          ++looked_up;
        },
        asio::detached);
  ASSERT_TRUE(testing::eventually([&] { return looked_up == server.io.size(); }));
  ASSERT_TRUE(testing::eventually([] { return lookups_under_way() == 0; }));
  const pid_t self = ::getpid();
  if (!same_table(self, self)) GTEST_SKIP() << "kcmp cannot compare descriptor tables here";
  // The I/O threads (those whose table is not the process's), and the
  // threads that share one of their tables; a lookup's thread ends soon
  // after its answer.
  std::size_t io_threads = 0;
  std::vector<std::string> sharing;
  const auto look = [&] {
    std::vector<pid_t> threads;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
      threads.push_back(std::stoi(e.path().filename().string()));
    io_threads = 0;
    sharing.clear();
    for (const pid_t t : threads) {
      if (same_table(self, t).value_or(true)) continue;  // gone meanwhile, or the process's
      ++io_threads;
      for (const pid_t other : threads)
        if (other != t && same_table(t, other).value_or(false))
          sharing.push_back("thread " + std::to_string(other) + " shares I/O thread " +
                            std::to_string(t) + "'s table");
    }
    return sharing.empty();
  };
  EXPECT_TRUE(testing::eventually(look)) << ::testing::PrintToString(sharing);
  EXPECT_EQ(io_threads, server.io.size());
}

}  // namespace
}  // namespace lmwarden::net
