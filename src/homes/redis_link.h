// One Redis connection through hiredis's blocking API, sending pipelines
// under a single deadline each (HomeStore's thread, home_store.cpp).
//
// hiredis's own blocking reads wait the socket timeout per read, so a
// server that trickles bytes could hold a pipeline, and every request
// behind it, far longer than the timeout. Here each read and write first
// polls the socket for what is left of the pipeline's deadline; the socket
// timeouts hiredis sets at connect stay as a backstop.
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
#include "homes/home_store.h"

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

  bool open() const noexcept { return context_ != nullptr; }
  // Whether the last error was a deadline passing (no answer in time),
  // rather than a refusal or a broken connection.
  bool timed_out() const noexcept { return timed_out_; }
  void close() noexcept { context_.reset(); }

  // Connects within `timeout`, then sends AUTH and SELECT as the address
  // asks (one round trip, within `timeout` too). The error otherwise: a
  // refused AUTH reads "redis refused AUTH: <its reply>".
  std::optional<std::string> connect(const RedisAddress& address,
                                     std::chrono::milliseconds timeout);

  // Queues one command (argv-style, so keys and values may hold any byte).
  std::optional<std::string> append(int argc, const char** argv, const std::size_t* lengths);
  std::optional<std::string> append(const std::vector<std::string>& args);

  // Whether Redis closed (or reset) the connection while nothing was asked
  // of it: a restart, an idle timeout of its own. With no command
  // outstanding Redis sends nothing, so anything readable is the end.
  bool closed_while_idle() const noexcept;
  // Sends everything appended.
  std::optional<std::string> flush(Clock::time_point deadline);

  // The next reply, in the order of the commands; an error when none came
  // by `deadline` or the connection failed.
  Result<ReplyPtr, std::string> next_reply(Clock::time_point deadline);

 private:
  struct ContextFree {
    void operator()(redisContext* c) const { redisFree(c); }
  };

  std::string fail(std::string error);
  std::string timeout_error();
  std::string io_error();
  std::optional<std::string> wait_ready(short events, Clock::time_point deadline);

  std::unique_ptr<redisContext, ContextFree> context_;
  std::chrono::milliseconds timeout_{0};
  bool timed_out_ = false;
};

}  // namespace lmwarden::homes
