// Conversation homes shared by several wardens through Redis (DESIGN §10).
//
// Each warden keeps its own session table; this store only lets one warden
// learn the home another one chose. The warden asks it about a conversation
// its own table does not know (one GET, bounded by the timeout) and claims
// every home it uses (set unless another warden's choice is there,
// atomically, with the idle TTL; not waited for, answered later); stored
// responses are plain writes (SET). Values are opaque here: the warden
// writes and reads them.
//
// One thread per store talks to Redis (plain TCP or TLS, redis_link.h),
// taking every command queued since its last turn as one pipeline. A failed
// connection or command fails what was in flight and the lookups queued
// behind it at once (the warden then places the request itself), and no new
// connection is tried for `retry_after`: an unreachable Redis costs requests
// nothing but a queue push. Outages are logged once when they begin and once
// when they end. A reply later than the timeout on a connection that served
// (a Redis pausing to save, a busy host) fails what was in flight too, but
// the next turn connects again at once: only a failed connect closes the
// gate. Commands Redis refuses (an error reply: out of memory, an ACL) fail
// alone, logged at most once a minute. Claims name their script by its SHA1
// (EVALSHA), loaded once per connection. A Redis that runs no script (an ACL
// without EVAL and EVALSHA, renamed commands) gets plain SETs for claims
// instead, for the rest of that connection (the claims it refused sent
// again so), answered kUnchecked.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace lmwarden::homes {

struct RedisAddress {
  std::string host = "127.0.0.1";
  std::uint16_t port = 6379;
  int database = 0;      // SELECT after connecting when not 0
  std::string username;  // with a password: AUTH username password (Redis 6 ACL)
  std::string password;  // "" = no AUTH
  bool tls = false;      // rediss://

  bool operator==(const RedisAddress&) const = default;
};

// "redis://[[username]:password@]host[:port][/database]", as redis-cli -u
// reads it, or "rediss://…" for TLS; an IPv6 host in brackets. The error
// says what is wrong, without repeating the password.
Result<RedisAddress, std::string> parse_redis_url(std::string_view url);

// The address without its password, for logs: "redis://host:port/db".
std::string describe(const RedisAddress& address);

// A TLS connection's settings (RedisAddress::tls). PEM files, read at each
// connect, so that renewed ones are taken up: `ca_file` "" trusts the
// system's certificate authorities; `cert_file` and `key_file`, both or
// neither, are the warden's own certificate, for a Redis that asks for one.
// `server_name`: the name Redis's certificate must carry (and the SNI sent),
// "" for the URL's host.
struct RedisTls {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;

  bool operator==(const RedisTls&) const = default;
};

enum class LookupStatus { kFound, kAbsent, kFailed };

struct Lookup {
  LookupStatus status = LookupStatus::kFailed;
  std::string value;  // kFound only
};

// A claim's answer. kTaken: the key now holds the claimed value. kHeld: it
// holds another (`holder`), left as it was. kUnchecked: Redis refuses
// scripts, and the value was written with a plain SET, over whatever the key
// held. kRefused: Redis answered with an error (out of memory, a script
// error); nothing written. kFailed: not known (no answer).
enum class ClaimStatus { kTaken, kHeld, kUnchecked, kRefused, kFailed };

struct Claim {
  ClaimStatus status = ClaimStatus::kFailed;
  std::string holder;  // kHeld only
};

struct HomeStoreOptions {
  RedisAddress address;
  RedisTls tls;  // with address.tls
  // Connecting, and each pipeline's replies: past it the connection is
  // dropped and what it carried fails.
  std::chrono::milliseconds timeout{50};
  // After a failure, no connection is tried again before this has passed.
  std::chrono::milliseconds retry_after{1000};
  // Commands waiting for the store's thread; more are refused (a lookup
  // fails, a write is dropped), so a stalled Redis cannot grow memory.
  std::size_t max_pending = 10000;
};

struct HomeStoreStats {
  std::uint64_t lookups_found = 0;
  std::uint64_t lookups_absent = 0;
  std::uint64_t lookups_failed = 0;  // Redis unreachable, an error reply, a timeout, refused
  // Writes are puts and claims.
  std::uint64_t writes_sent = 0;     // answered OK (a claim: taken or held)
  std::uint64_t writes_failed = 0;   // Redis unreachable, an error reply, a timeout
  std::uint64_t writes_dropped = 0;  // refused: max_pending reached
  std::uint64_t claims_taken = 0;
  std::uint64_t claims_held = 0;
  std::uint64_t claims_unchecked = 0;
  bool connected = false;
};

class HomeStore {
 public:
  explicit HomeStore(HomeStoreOptions options);
  // Stops the thread (stop()).
  ~HomeStore();
  HomeStore(const HomeStore&) = delete;
  HomeStore& operator=(const HomeStore&) = delete;

  // SET key value PX ttl, not waited for.
  void put(std::string key, std::string value, std::chrono::milliseconds ttl);
  // GET key. `done` runs exactly once, on the store's thread (or on the
  // caller's, when the lookup is refused at once), unless the store has
  // stopped (stop()): it should only hand the result to where it is wanted.
  void get(std::string key, std::function<void(Lookup)> done);
  // Sets key to `value` (PX ttl) when it is absent, holds `replaces` (""
  // claims an absent key only) or holds `value` already; otherwise leaves it
  // and answers what it holds. One Lua script (EVALSHA), so two wardens'
  // claims cannot both be taken (but see kUnchecked). `done` runs as get's does.
  void claim(std::string key, std::string replaces, std::string value,
             std::chrono::milliseconds ttl, std::function<void(Claim)> done);

  // Stops the thread: lookups and claims it still holds (queued, or sent and
  // unanswered) complete as failed first, on this thread or on the store's
  // before it ends. Those made afterwards are dropped: their `done` never runs.
  // Returns once the thread has ended; a second call does nothing.
  void stop();

  HomeStoreStats stats() const;
  // Whether it holds a working connection (stats().connected, alone).
  bool connected() const noexcept;
  const HomeStoreOptions& options() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lmwarden::homes
