// HomeStore (home_store.h): a queue, one thread, one Redis connection.
//
// The thread takes the whole queue at each turn and sends it as one
// pipeline (RedisLink, redis_link.h), so a burst of lookups costs one round
// trip, not one each, and the whole pipeline gets one deadline: `timeout`.
//
// Without a connection the thread connects at once when `retry_after` has
// passed since the last failure, whether or not anything is queued: the
// requests after an outage then do not pay for the connect, and `connected`
// tells the truth while the warden is idle.
#include "homes/home_store.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cassert>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "homes/redis_link.h"

namespace lmwarden::homes {
namespace {

using Clock = std::chrono::steady_clock;

struct Command {
  enum class Kind { kGet, kPut } kind;
  std::string key;
  std::string value;                 // kPut
  std::chrono::milliseconds ttl{0};  // kPut
  std::function<void(Lookup)> done;  // kGet
};

// Error replies that say the connection cannot serve commands at all, rather
// than that one command was wrong: the server restarted with a password
// (NOAUTH), is still loading its data (LOADING), or became a replica
// (READONLY, MASTERDOWN). They end the connection as an I/O error does, so
// the outage is logged and a fresh connection (AUTH, SELECT) is tried later.
bool breaks_connection(std::string_view error) {
  for (std::string_view prefix : {"NOAUTH", "LOADING", "READONLY", "MASTERDOWN"}) {
    if (error.starts_with(prefix)) return true;
  }
  return false;
}

}  // namespace

struct HomeStore::State {
  explicit State(HomeStoreOptions o) : options(std::move(o)) {}

  void run();
  void take_turn(std::deque<Command>& batch);
  void send(std::deque<Command>& batch);
  void connect();
  // Ends the connection after a failure and closes the retry gate.
  void fail_connection(const std::string& error);
  void fail(Command& command);

  const HomeStoreOptions options;

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Command> queue;  // guarded by mutex
  bool stopping = false;      // guarded by mutex

  std::atomic<std::uint64_t> lookups_found{0};
  std::atomic<std::uint64_t> lookups_absent{0};
  std::atomic<std::uint64_t> lookups_failed{0};
  std::atomic<std::uint64_t> writes_sent{0};
  std::atomic<std::uint64_t> writes_failed{0};
  std::atomic<std::uint64_t> writes_dropped{0};
  std::atomic<bool> connected{false};

  // The thread's own.
  RedisLink link;
  Clock::time_point retry_at = Clock::time_point::min();
  bool in_outage = false;
  std::string outage_error;

  std::thread thread;  // last: started once the members above exist
};

void HomeStore::State::run() {
  // hiredis writes with write(2), not send(MSG_NOSIGNAL): a write to a
  // connection Redis closed would raise SIGPIPE, whose default action ends
  // the whole warden. Blocked on this thread, it leaves the write to fail
  // with EPIPE, which is then an I/O error like any other.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);

  std::deque<Command> batch;
  std::unique_lock lock(mutex);
  for (;;) {
    if (stopping) break;
    if (!link.open() && Clock::now() >= retry_at) {
      lock.unlock();
      connect();
      lock.lock();
      continue;
    }
    if (queue.empty()) {
      const auto woken = [this] { return stopping || !queue.empty(); };
      if (link.open()) {
        // Idle: every retry_after, a look at whether Redis closed the
        // connection, so that `connected` and the log tell an outage while
        // nothing is asked, not only at the next request.
        if (!wake.wait_for(lock, options.retry_after, woken) && link.closed_while_idle()) {
          lock.unlock();
          link.close();
          connected = false;
          connect();
          lock.lock();
        }
      } else {
        wake.wait_until(lock, retry_at, woken);
      }
      continue;
    }
    batch.swap(queue);
    lock.unlock();
    take_turn(batch);
    batch.clear();
    lock.lock();
  }
  batch.swap(queue);
  lock.unlock();
  link.close();
  connected = false;
  for (auto& command : batch) fail(command);
}

void HomeStore::State::take_turn(std::deque<Command>& batch) {
  // A connection Redis closed while it idled (Redis restarted, or its own
  // `timeout` setting ended it) is opened again before use, rather than
  // failing this batch and closing the retry gate on a Redis that is there.
  if (link.open() && link.closed_while_idle()) {
    link.close();
    connected = false;
    connect();
  }
  if (link.open()) {
    send(batch);
  } else {
    // Inside the retry gate: what was queued fails at once.
    for (auto& command : batch) fail(command);
  }
}

void HomeStore::State::send(std::deque<Command>& batch) {
  for (const auto& c : batch) {
    std::optional<std::string> error;
    if (c.kind == Command::Kind::kGet) {
      const char* argv[] = {"GET", c.key.data()};
      const std::size_t lengths[] = {3, c.key.size()};
      error = link.append(2, argv, lengths);
    } else {
      const std::string ms = std::to_string(std::max<std::int64_t>(c.ttl.count(), 1));
      const char* argv[] = {"SET", c.key.data(), c.value.data(), "PX", ms.data()};
      const std::size_t lengths[] = {3, c.key.size(), c.value.size(), 2, ms.size()};
      error = link.append(5, argv, lengths);
    }
    if (error) {
      fail_connection(*error);
      for (auto& command : batch) fail(command);
      return;
    }
  }

  const auto deadline = Clock::now() + options.timeout;
  std::size_t answered = 0;
  std::optional<std::string> broken = link.flush(deadline);
  for (; !broken && answered < batch.size(); ++answered) {
    auto reply = link.next_reply(deadline);
    if (!reply) {
      broken = std::move(reply).error();
      break;
    }
    const redisReply& r = **reply;
    Command& c = batch[answered];
    if (r.type == REDIS_REPLY_ERROR) {
      if (breaks_connection(reply_text(r))) {
        broken = std::string(reply_text(r));
        break;  // failed below, once the connection is closed
      }
      fail(c);
    } else if (c.kind == Command::Kind::kPut) {
      if (r.type == REDIS_REPLY_STATUS) {
        ++writes_sent;
      } else {
        fail(c);
      }
    } else if (r.type == REDIS_REPLY_NIL) {
      ++lookups_absent;
      c.done(Lookup{.status = LookupStatus::kAbsent});
    } else if (r.type == REDIS_REPLY_STRING) {
      ++lookups_found;
      c.done(Lookup{.status = LookupStatus::kFound, .value = std::string(reply_text(r))});
    } else {
      fail(c);
    }
  }
  if (!broken) return;
  fail_connection(*broken);
  for (; answered < batch.size(); ++answered) fail(batch[answered]);
}

void HomeStore::State::connect() {
  if (auto error = link.connect(options.address, options.timeout)) {
    fail_connection(*error);
    return;
  }
  connected = true;
  if (in_outage) {
    spdlog::info(
        "shared homes: {} answers again; conversations placed by other wardens are found "
        "again",
        describe(options.address));
  } else {
    spdlog::debug("shared homes: connected to {}", describe(options.address));
  }
  in_outage = false;
}

void HomeStore::State::fail_connection(const std::string& error) {
  link.close();
  connected = false;
  retry_at = Clock::now() + options.retry_after;
  // Once per outage, and again only when its cause changes (Redis came back
  // with another password, say): a Redis that stays down for hours must not
  // write a line each `retry_after`.
  if (!in_outage) {
    spdlog::warn(
        "shared homes: {} unreachable ({}); conversations are placed by this warden alone "
        "until Redis answers again",
        describe(options.address), error);
  } else if (error != outage_error) {
    spdlog::warn("shared homes: {} still unreachable, now: {}", describe(options.address), error);
  }
  in_outage = true;
  outage_error = error;
}

void HomeStore::State::fail(Command& command) {
  if (command.kind == Command::Kind::kPut) {
    ++writes_failed;
    return;
  }
  ++lookups_failed;
  command.done(Lookup{.status = LookupStatus::kFailed});
}

HomeStore::HomeStore(HomeStoreOptions options)
    : state_(std::make_unique<State>(std::move(options))) {
  state_->thread = std::thread([state = state_.get()] { state->run(); });
}

HomeStore::~HomeStore() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_one();
  state_->thread.join();
}

void HomeStore::put(std::string key, std::string value, std::chrono::milliseconds ttl) {
  State& s = *state_;
  bool was_empty = false;
  {
    std::lock_guard lock(s.mutex);
    if (s.queue.size() >= s.options.max_pending) {
      ++s.writes_dropped;
      return;
    }
    was_empty = s.queue.empty();
    s.queue.push_back(Command{
        .kind = Command::Kind::kPut, .key = std::move(key), .value = std::move(value), .ttl = ttl});
  }
  // Only an empty queue can have the thread waiting on it.
  if (was_empty) s.wake.notify_one();
}

void HomeStore::get(std::string key, std::function<void(Lookup)> done) {
  assert(done);
  State& s = *state_;
  bool queued = false;
  bool was_empty = false;
  {
    std::lock_guard lock(s.mutex);
    if (s.queue.size() < s.options.max_pending) {
      was_empty = s.queue.empty();
      s.queue.push_back(
          Command{.kind = Command::Kind::kGet, .key = std::move(key), .done = std::move(done)});
      queued = true;
    }
  }
  if (queued) {
    if (was_empty) s.wake.notify_one();
    return;
  }
  ++s.lookups_failed;
  done(Lookup{.status = LookupStatus::kFailed});
}

HomeStoreStats HomeStore::stats() const {
  const State& s = *state_;
  return HomeStoreStats{.lookups_found = s.lookups_found.load(std::memory_order_relaxed),
                        .lookups_absent = s.lookups_absent.load(std::memory_order_relaxed),
                        .lookups_failed = s.lookups_failed.load(std::memory_order_relaxed),
                        .writes_sent = s.writes_sent.load(std::memory_order_relaxed),
                        .writes_failed = s.writes_failed.load(std::memory_order_relaxed),
                        .writes_dropped = s.writes_dropped.load(std::memory_order_relaxed),
                        .connected = s.connected.load(std::memory_order_relaxed)};
}

const HomeStoreOptions& HomeStore::options() const noexcept {
  return state_->options;
}

}  // namespace lmwarden::homes
