// One Redis connection, plain TCP or TLS, sending pipelines under a single
// deadline each (HomeStore's thread, home_store.cpp).
//
// hiredis formats the commands and parses the replies; the socket is this
// class's own, non-blocking, so that every connect, handshake, write and
// read waits only for what is left of its deadline (a server that trickles
// bytes cannot hold a pipeline, and every request behind it, past the
// timeout), and so that TLS can carry the same bytes (OpenSSL; Debian's
// hiredis 0.14 has no TLS of its own).
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "homes/address_lookup.h"
#include "homes/home_store.h"

struct ssl_st;
struct ssl_ctx_st;

namespace lmwarden::homes {

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

// A string, status or error reply's bytes.
inline std::string_view reply_text(const redisReply& r) {
  return {r.str, r.len};
}

// Not thread-safe: one thread owns it. Every error closes the connection,
// except append's, which leave it to the caller.
class RedisLink {
 public:
  using Clock = std::chrono::steady_clock;

  RedisLink();
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;

  bool open() const noexcept { return fd_ >= 0; }
  // Whether the last error was a deadline passing (no answer in time),
  // rather than a refusal or a broken connection.
  bool timed_out() const noexcept { return timed_out_; }
  void close() noexcept;

  // Connects within `timeout` (the host name's lookup included; with
  // address.tls, the TLS handshake too, checking Redis's certificate against
  // `tls`'s CA file or the system's and against the address's host), then
  // sends AUTH and SELECT as the address asks and a PING (one round trip, within `timeout` too).
  // The error otherwise: a refused AUTH reads "redis refused AUTH: <its reply>".
  std::optional<std::string> connect(const RedisAddress& address, const RedisTls& tls,
                                     std::chrono::milliseconds timeout);

  // Queues one command (argv-style, so keys and values may hold any byte).
  std::optional<std::string> append(int argc, const char** argv, const std::size_t* lengths);
  std::optional<std::string> append(const std::vector<std::string>& args);

  // Whether Redis closed (or reset) the connection while nothing was asked
  // of it: a restart, an idle timeout of its own. With no command
  // outstanding Redis sends nothing, so anything readable is the end (over
  // TLS, a record that carries no data, a session ticket, is not).
  bool closed_while_idle() noexcept;
  // Sends everything appended.
  std::optional<std::string> flush(Clock::time_point deadline);

  // The next reply, in the order of the commands; an error when none came
  // by `deadline` or the connection failed.
  Result<ReplyPtr, std::string> next_reply(Clock::time_point deadline);

 private:
  struct SslFree {
    void operator()(ssl_st* ssl) const noexcept;
  };
  struct ReaderFree {
    void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
  };

  // How one read or write went: `bytes` moved, or none and the poll events
  // to wait for (`want`), or the error.
  struct Io {
    std::size_t bytes = 0;
    short want = 0;
  };

  std::optional<std::string> open_socket(const RedisAddress& address, Clock::time_point deadline);
  // The handshake, Redis's certificate checked against `name` (given in
  // the configuration, or the URL's host).
  std::optional<std::string> start_tls(const std::string& name, bool name_given,
                                       ssl_ctx_st* context, Clock::time_point deadline);
  Result<Io, std::string> write_some(const char* data, std::size_t size);
  Result<Io, std::string> read_some(char* data, std::size_t size);
  std::string fail(std::string error);
  std::string timeout_error();
  std::optional<std::string> wait_ready(short events, Clock::time_point deadline);

  int fd_ = -1;
  std::unique_ptr<ssl_st, SslFree> ssl_;
  std::unique_ptr<redisReader, ReaderFree> reader_;
  std::string out_;  // commands appended and not yet sent
  std::chrono::milliseconds timeout_{0};
  bool timed_out_ = false;
  // A name lookup that outlived its connect, until a connect takes its answer.
  std::shared_ptr<AddressLookup> lookup_;
};

}  // namespace lmwarden::homes
