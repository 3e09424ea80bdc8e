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

#include <algorithm>
#include <atomic>
#include <cassert>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "homes/redis_link.h"

namespace lmwarden::homes {
namespace {

using Clock = std::chrono::steady_clock;

// How a claim is sent, cheapest first. Each goes in the cheapest form its
// connection allows; one that Redis refuses in a form is sent again in
// another, so none is sent more than three times.
enum class ClaimForm : std::uint8_t {
  kSha = 1,     // EVALSHA, with the SHA1 of the script the connection loaded
  kScript = 2,  // EVAL with the script's text (which loads it again)
  kPlain = 4,   // SET: Redis runs no script; over whatever the key holds
};

struct Command {
  // kLoad: SCRIPT LOAD of the claim's script, ahead of a connection's
  // first claim, whose answer lets the later ones be EVALSHA.
  enum class Kind { kGet, kPut, kClaim, kLoad } kind;
  std::string key;
  std::string value;                   // kPut, kClaim
  std::chrono::milliseconds ttl{0};    // kPut, kClaim
  std::string replaces;                // kClaim
  ClaimForm form = ClaimForm::kSha;    // kClaim: as last sent
  std::uint8_t refused_forms = 0;      // kClaim: the ClaimForms Redis refused it in
  std::function<void(Lookup)> done;    // kGet
  std::function<void(Claim)> claimed;  // kClaim
};

// KEYS[1] set to ARGV[2] with a TTL of ARGV[3] ms when absent, holding
// ARGV[1] (what the claim replaces) or holding ARGV[2] already; a nil reply
// then, and otherwise what it holds. One script runs at a time in Redis, so
// of two claims on a key, the second sees the first's value.
constexpr std::string_view kClaimScript =
    "local v = redis.call('GET', KEYS[1]) "
    "if v == false or v == ARGV[1] or v == ARGV[2] then "
    "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return false end "
    "return v";

// Log lines about one kind of trouble that can recur at any rate (a Redis
// refusing writes, replies coming late): the first at once, then at most
// one a minute, saying how many were not logged.
class LogLimit {
 public:
  // Whether to log now; `unlogged` is then how many were not, since the last.
  bool due(Clock::time_point now, std::uint64_t& unlogged) {
    if (logged_ && now - last_ < std::chrono::minutes(1)) {
      ++unlogged_;
      return false;
    }
    logged_ = true;
    last_ = now;
    unlogged = std::exchange(unlogged_, 0);
    return true;
  }

 private:
  bool logged_ = false;
  Clock::time_point last_;
  std::uint64_t unlogged_ = 0;
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

// Whether Redis's ACL refused the user a key (NOPERM for a key names no
// command: "NOPERM No permissions to access a key", or in Redis 7.0 "… to
// access one of the keys used as arguments"); one that refused a command
// names it ("… to run the 'eval' command").
bool refuses_keys(std::string_view error) {
  return error.starts_with("NOPERM") && error.find("command") == std::string_view::npos;
}

// Error replies that say Redis will not run the claim's script at all: an
// ACL without EVAL (NOPERM for the command), or EVAL renamed away. Other
// errors (OOM, a script that failed, an ACL refusing the key) are about one
// command.
bool refuses_scripts(std::string_view error) {
  return (error.starts_with("NOPERM") && !refuses_keys(error)) ||
         error.find("unknown command") != std::string_view::npos;
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
  std::string connect_hint(std::string_view error) const;
  // Ends a connection whose pipeline was answered late: what it carried
  // failed, and the next turn connects again at once.
  void drop_late_connection(const std::string& error);
  void fail(Command& command);
  void answer(Command& command, const redisReply& reply);
  // The cheapest form this connection allows that `claim` was not refused in.
  ClaimForm form_for(const Command& claim) const;
  // Whether a claim refused in the form it was sent in is sent again in
  // another (queued in refused_claims), with what the refusal means for this
  // connection's later claims.
  bool retry_in_another_form(Command& claim, std::string_view error);
  // Queues again, first, the claims Redis refused in the form they were
  // sent in (retry_in_another_form).
  void resend_refused();
  void refused(const Command& command, std::string_view error);
  // Logs, once per warden, that claims go as plain SETs: Redis runs the
  // script neither by its SHA1 nor whole.
  void refuse_scripts(std::string_view error);
  // Queues `command` (moved from) unless max_pending are waiting (kFull) or
  // the store has stopped (kStopped); when refused, `command` is left as it was.
  enum class Queued : std::uint8_t { kYes, kFull, kStopped };
  Queued enqueue(Command& command);

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
  std::atomic<std::uint64_t> claims_taken{0};
  std::atomic<std::uint64_t> claims_held{0};
  std::atomic<std::uint64_t> claims_unchecked{0};
  std::atomic<bool> connected{false};

  // The thread's own.
  RedisLink link;
  Clock::time_point retry_at = Clock::time_point::min();
  bool in_outage = false;
  // The causes this outage has logged (each once, at most this many).
  static constexpr std::size_t kOutageCausesLogged = 4;
  std::vector<std::string> outage_errors;
  bool connected_before = false;  // the first connection is logged at info
  LogLimit refusals;
  LogLimit late_replies;
  // The claim script's SHA1 as this connection's Redis loaded it (SCRIPT
  // LOAD, sent ahead of the first claim); "" until then, or when refused.
  // ("" too once Redis refused EVALSHA on this connection.)
  std::string script_sha;
  bool script_load_sent = false;
  bool eval_refused = false;  // by this connection's Redis
  bool scripts_refusal_logged = false;
  std::vector<Command> refused_claims;  // to be sent again (resend_refused)

  std::thread thread;  // last: started once the members above exist
};

void HomeStore::State::run() {
  // OpenSSL writes a TLS connection's records with write(2), not
  // send(MSG_NOSIGNAL) as the plain connection does: a write to a connection
  // Redis closed would raise SIGPIPE, whose default action ends the whole
  // warden. Blocked on this thread, it leaves the write to fail with EPIPE,
  // which is then an I/O error like any other.
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
  if (!std::exchange(script_load_sent, true)) {
    batch.push_front(Command{.kind = Command::Kind::kLoad});
  }
  for (auto& c : batch) {
    std::optional<std::string> error;
    if (c.kind == Command::Kind::kLoad) {
      const char* argv[] = {"SCRIPT", "LOAD", kClaimScript.data()};
      const std::size_t lengths[] = {6, 4, kClaimScript.size()};
      error = link.append(3, argv, lengths);
    } else if (c.kind == Command::Kind::kGet) {
      const char* argv[] = {"GET", c.key.data()};
      const std::size_t lengths[] = {3, c.key.size()};
      error = link.append(2, argv, lengths);
    } else {
      const std::string ms = std::to_string(std::max<std::int64_t>(c.ttl.count(), 1));
      if (c.kind == Command::Kind::kClaim) c.form = form_for(c);
      if (c.kind == Command::Kind::kPut || c.form == ClaimForm::kPlain) {
        const char* argv[] = {"SET", c.key.data(), c.value.data(), "PX", ms.data()};
        const std::size_t lengths[] = {3, c.key.size(), c.value.size(), 2, ms.size()};
        error = link.append(5, argv, lengths);
      } else {
        const std::string_view script = c.form == ClaimForm::kSha ? script_sha : kClaimScript;
        const char* argv[] = {c.form == ClaimForm::kSha ? "EVALSHA" : "EVAL",
                              script.data(),
                              "1",
                              c.key.data(),
                              c.replaces.data(),
                              c.value.data(),
                              ms.data()};
        const std::size_t lengths[] = {std::strlen(argv[0]), script.size(),  1,        c.key.size(),
                                       c.replaces.size(),    c.value.size(), ms.size()};
        error = link.append(7, argv, lengths);
      }
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
    if (r.type == REDIS_REPLY_ERROR && breaks_connection(reply_text(r))) {
      broken = std::string(reply_text(r));
      break;  // failed below, once the connection is closed
    }
    answer(batch[answered], r);
  }
  resend_refused();
  if (!broken) return;
  // A connection that served until a reply came late (Redis paused to save,
  // or this host was busy) is most likely fine: it is dropped, since its
  // late replies would be taken for later commands', but not held against
  // Redis. A connect that fails, or a reply refused, closes the gate.
  if (link.timed_out()) {
    drop_late_connection(*broken);
  } else {
    fail_connection(*broken);
  }
  for (; answered < batch.size(); ++answered) fail(batch[answered]);
}

void HomeStore::State::answer(Command& c, const redisReply& r) {
  if (c.kind == Command::Kind::kLoad) {
    if (r.type == REDIS_REPLY_STRING) {
      script_sha = reply_text(r);
    } else {
      // An ACL without SCRIPT, say: claims are sent whole, with EVAL.
      spdlog::debug(
          "shared homes: {} did not load the claim's script ({}); claims are sent "
          "with EVAL",
          describe(options.address), reply_text(r));
    }
    return;
  }
  if (r.type == REDIS_REPLY_ERROR) {
    const std::string_view error = reply_text(r);
    if (c.kind == Command::Kind::kClaim && retry_in_another_form(c, error)) return;
    refused(c, error);
    if (c.kind != Command::Kind::kClaim) return fail(c);
    ++writes_failed;
    return c.claimed(Claim{.status = ClaimStatus::kRefused});
  }
  switch (c.kind) {
    case Command::Kind::kPut:
      if (r.type != REDIS_REPLY_STATUS) return fail(c);
      ++writes_sent;
      return;
    case Command::Kind::kGet:
      if (r.type == REDIS_REPLY_NIL) {
        ++lookups_absent;
        return c.done(Lookup{.status = LookupStatus::kAbsent});
      }
      if (r.type != REDIS_REPLY_STRING) return fail(c);
      ++lookups_found;
      return c.done(Lookup{.status = LookupStatus::kFound, .value = std::string(reply_text(r))});
    case Command::Kind::kLoad:
      return;
    case Command::Kind::kClaim:
      if (c.form == ClaimForm::kPlain) {
        if (r.type != REDIS_REPLY_STATUS) return fail(c);
        ++writes_sent;
        ++claims_unchecked;
        return c.claimed(Claim{.status = ClaimStatus::kUnchecked});
      }
      if (r.type == REDIS_REPLY_NIL) {
        ++writes_sent;
        ++claims_taken;
        return c.claimed(Claim{.status = ClaimStatus::kTaken});
      }
      if (r.type != REDIS_REPLY_STRING) return fail(c);
      ++writes_sent;
      ++claims_held;
      return c.claimed(Claim{.status = ClaimStatus::kHeld, .holder = std::string(reply_text(r))});
  }
}

void HomeStore::State::refused(const Command& c, std::string_view error) {
  std::uint64_t unlogged = 0;
  if (!refusals.due(Clock::now(), unlogged)) return;
  const std::string_view what = c.kind == Command::Kind::kGet   ? "a lookup"
                                : c.kind == Command::Kind::kPut ? "a write"
                                                                : "a claim";
  const std::string_view counted =
      c.kind == Command::Kind::kGet   ? "lmwarden_shared_homes_lookups_total"
      : c.kind == Command::Kind::kPut ? "lmwarden_shared_homes_writes_total"
                                      : "lmwarden_shared_homes_claims_total and _writes_total";
  spdlog::warn(
      "shared homes: {} refused {}: {}{}; such homes are not shared ({} count each as "
      "failed){}",
      describe(options.address), what, error,
      refuses_keys(error) ? " (the Redis user's ACL must allow the keys under "
                            "shared_homes.key_prefix, e.g. ~lmwarden:* for the default prefix)"
                          : "",
      counted,
      unlogged == 0 ? std::string{}
                    : fmt::format(" ({} more refused since the last line)", unlogged));
}

ClaimForm HomeStore::State::form_for(const Command& c) const {
  const auto refused = [&c](ClaimForm form) {
    return (c.refused_forms & static_cast<std::uint8_t>(form)) != 0;
  };
  if (!script_sha.empty() && !refused(ClaimForm::kSha)) return ClaimForm::kSha;
  if (!eval_refused && !refused(ClaimForm::kScript)) return ClaimForm::kScript;
  return ClaimForm::kPlain;
}

bool HomeStore::State::retry_in_another_form(Command& c, std::string_view error) {
  switch (c.form) {
    case ClaimForm::kSha:
      // NOSCRIPT: Redis's script cache was emptied (SCRIPT FLUSH). EVAL
      // loads the script again under the same SHA1, so later claims are
      // EVALSHA still.
      if (error.starts_with("NOSCRIPT")) break;
      if (!refuses_scripts(error)) return false;
      script_sha.clear();
      spdlog::debug("shared homes: {} refuses EVALSHA ({}); claims are sent with EVAL",
                    describe(options.address), error);
      break;
    case ClaimForm::kScript:
      if (!refuses_scripts(error)) return false;
      eval_refused = true;
      break;
    case ClaimForm::kPlain:
      return false;
  }
  c.refused_forms |= static_cast<std::uint8_t>(c.form);
  if (form_for(c) == ClaimForm::kPlain) refuse_scripts(error);
  refused_claims.push_back(std::move(c));
  return true;
}

void HomeStore::State::resend_refused() {
  if (refused_claims.empty()) return;
  {
    std::lock_guard lock(mutex);
    queue.insert(queue.begin(), std::make_move_iterator(refused_claims.begin()),
                 std::make_move_iterator(refused_claims.end()));
  }
  refused_claims.clear();
}

void HomeStore::State::refuse_scripts(std::string_view error) {
  if (std::exchange(scripts_refusal_logged, true)) return;
  spdlog::warn(
      "shared homes: {} refuses the claim's script (EVAL): {}; homes are written with a plain "
      "SET instead, so two wardens that place a conversation apart do not settle on one home "
      "(lmwarden_shared_homes_claims_total{{result=\"unchecked\"}}). Let the wardens' Redis user "
      "run EVALSHA and SCRIPT LOAD, or EVAL, to share homes fully; the warden asks again at its "
      "next connection to Redis (a restart of the warden, or CLIENT KILL USER on Redis)",
      describe(options.address), error);
}

void HomeStore::State::connect() {
  if (auto error = link.connect(options.address, options.tls, options.timeout)) {
    fail_connection(*error);
    return;
  }
  connected = true;
  // Asked again on each connection: the ACL, or the server, may have changed.
  eval_refused = false;
  script_sha.clear();
  script_load_sent = false;
  if (in_outage) {
    spdlog::info(
        "shared homes: {} answers again; conversations placed by other wardens are found "
        "again",
        describe(options.address));
  } else if (!connected_before) {
    spdlog::info("shared homes: connected to {}{}", describe(options.address),
                 options.tls.server_name.empty()
                     ? std::string()
                     : " (its certificate checked for " + options.tls.server_name + ")");
  } else {
    spdlog::debug("shared homes: connected to {}", describe(options.address));
  }
  connected_before = true;
  in_outage = false;
}

// What an operator can do about a failed connection, where its reason
// says: " (…)", or "".
std::string HomeStore::State::connect_hint(std::string_view error) const {
  if (error.find("certificate required") != std::string_view::npos)
    return " (Redis asks for the warden's own certificate: set shared_homes.tls_cert_file and "
           "tls_key_file)";
  if (!options.address.tls && (error.find("reset by peer") != std::string_view::npos ||
                               error.find("closed the connection") != std::string_view::npos))
    return " (if that port serves TLS, the URL must be rediss://)";
  return {};
}

void HomeStore::State::fail_connection(const std::string& error) {
  link.close();
  connected = false;
  retry_at = Clock::now() + options.retry_after;
  // Once per outage, and again only for a cause not yet logged in it (Redis
  // came back with another password, say): a Redis that stays down for
  // hours must not write a line each `retry_after`, nor one whose failures
  // take turns between two causes (a TLS server refusing a warden without a
  // certificate resets some connections and alerts on others).
  if (!in_outage) outage_errors.clear();
  const bool new_cause = std::ranges::find(outage_errors, error) == outage_errors.end() &&
                         outage_errors.size() < kOutageCausesLogged;
  if (!in_outage) {
    spdlog::warn(
        "shared homes: cannot use {} ({}){}; conversations are placed by this warden alone "
        "until Redis answers again",
        describe(options.address), error, connect_hint(error));
  } else if (new_cause) {
    spdlog::warn("shared homes: still cannot use {}, now: {}{}", describe(options.address), error,
                 connect_hint(error));
  }
  in_outage = true;
  if (new_cause) outage_errors.push_back(error);
}

void HomeStore::State::drop_late_connection(const std::string& error) {
  link.close();
  connected = false;
  retry_at = Clock::now();
  std::uint64_t unlogged = 0;
  if (late_replies.due(Clock::now(), unlogged))
    spdlog::warn(
        "shared homes: {} answered late ({}); what was asked failed, and the warden connects "
        "again at once (a line follows only if that fails){}",
        describe(options.address), error,
        unlogged == 0 ? std::string{}
                      : fmt::format(" ({} more late since the last line)", unlogged));
}

void HomeStore::State::fail(Command& command) {
  switch (command.kind) {
    case Command::Kind::kPut:
      ++writes_failed;
      return;
    case Command::Kind::kClaim:
      ++writes_failed;
      return command.claimed(Claim{});
    case Command::Kind::kGet:
      ++lookups_failed;
      return command.done(Lookup{.status = LookupStatus::kFailed});
    case Command::Kind::kLoad:
      return;
  }
}

HomeStore::HomeStore(HomeStoreOptions options)
    : state_(std::make_unique<State>(std::move(options))) {
  state_->thread = std::thread([state = state_.get()] { state->run(); });
}

HomeStore::~HomeStore() {
  stop();
}

void HomeStore::stop() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_one();
  if (state_->thread.joinable()) state_->thread.join();
}

HomeStore::State::Queued HomeStore::State::enqueue(Command& command) {
  bool was_empty = false;
  {
    std::lock_guard lock(mutex);
    if (stopping) return Queued::kStopped;
    if (queue.size() >= options.max_pending) return Queued::kFull;
    was_empty = queue.empty();
    queue.push_back(std::move(command));
  }
  // Only an empty queue can have the thread waiting on it.
  if (was_empty) wake.notify_one();
  return Queued::kYes;
}

void HomeStore::put(std::string key, std::string value, std::chrono::milliseconds ttl) {
  Command command{
      .kind = Command::Kind::kPut, .key = std::move(key), .value = std::move(value), .ttl = ttl};
  if (state_->enqueue(command) != State::Queued::kYes) ++state_->writes_dropped;
}

void HomeStore::get(std::string key, std::function<void(Lookup)> done) {
  assert(done);
  Command command{.kind = Command::Kind::kGet, .key = std::move(key), .done = std::move(done)};
  const State::Queued queued = state_->enqueue(command);
  if (queued != State::Queued::kFull) return;  // taken, or stopped: dropped
  ++state_->lookups_failed;
  command.done(Lookup{.status = LookupStatus::kFailed});
}

void HomeStore::claim(std::string key, std::string replaces, std::string value,
                      std::chrono::milliseconds ttl, std::function<void(Claim)> done) {
  assert(done);
  Command command{.kind = Command::Kind::kClaim,
                  .key = std::move(key),
                  .value = std::move(value),
                  .ttl = ttl,
                  .replaces = std::move(replaces),
                  .claimed = std::move(done)};
  const State::Queued queued = state_->enqueue(command);
  if (queued == State::Queued::kYes) return;
  ++state_->writes_dropped;
  if (queued == State::Queued::kStopped) return;
  command.claimed(Claim{});
}

HomeStoreStats HomeStore::stats() const {
  const State& s = *state_;
  return HomeStoreStats{.lookups_found = s.lookups_found.load(std::memory_order_relaxed),
                        .lookups_absent = s.lookups_absent.load(std::memory_order_relaxed),
                        .lookups_failed = s.lookups_failed.load(std::memory_order_relaxed),
                        .writes_sent = s.writes_sent.load(std::memory_order_relaxed),
                        .writes_failed = s.writes_failed.load(std::memory_order_relaxed),
                        .writes_dropped = s.writes_dropped.load(std::memory_order_relaxed),
                        .claims_taken = s.claims_taken.load(std::memory_order_relaxed),
                        .claims_held = s.claims_held.load(std::memory_order_relaxed),
                        .claims_unchecked = s.claims_unchecked.load(std::memory_order_relaxed),
                        .connected = s.connected.load(std::memory_order_relaxed)};
}

bool HomeStore::connected() const noexcept {
  return state_->connected.load(std::memory_order_relaxed);
}

const HomeStoreOptions& HomeStore::options() const noexcept {
  return state_->options;
}

}  // namespace lmwarden::homes
