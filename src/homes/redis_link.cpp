#include "homes/redis_link.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

namespace lmwarden::homes {
namespace {

timeval to_timeval(std::chrono::milliseconds d) {
  // A zero timeval means "no timeout" to both connect and setsockopt.
  const auto ms = std::max<std::int64_t>(d.count(), 1);
  return timeval{.tv_sec = static_cast<time_t>(ms / 1000),
                 .tv_usec = static_cast<suseconds_t>(ms % 1000 * 1000)};
}

}  // namespace

std::optional<std::string> RedisLink::connect(const RedisAddress& address,
                                              std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  timed_out_ = false;
  context_.reset(redisConnectWithTimeout(address.host.c_str(), address.port, to_timeval(timeout)));
  if (!context_) return "cannot allocate a connection";
  if (context_->err) return fail(context_->errstr);
  if (redisSetTimeout(context_.get(), to_timeval(timeout)) != REDIS_OK)
    return fail(context_->errstr);

  // (command, its name in an error): AUTH's arguments stay out of errors.
  std::vector<std::pair<std::vector<std::string>, std::string>> handshake;
  if (!address.password.empty()) {
    std::vector<std::string> auth{"AUTH"};
    if (!address.username.empty()) auth.push_back(address.username);
    auth.push_back(address.password);
    handshake.emplace_back(std::move(auth), "AUTH");
  }
  if (address.database != 0) {
    const std::string db = std::to_string(address.database);
    handshake.emplace_back(std::vector<std::string>{"SELECT", db}, "SELECT " + db);
  }
  // And a PING, answered before the connection counts: a Redis that accepts
  // connections but does not serve (stopped, or refusing this client without
  // a password) must not pass for one that answers.
  handshake.emplace_back(std::vector<std::string>{"PING"}, "PING");
  for (const auto& [args, _] : handshake) {
    if (auto error = append(args)) return fail(*error);
  }
  const auto deadline = Clock::now() + timeout;
  if (auto error = flush(deadline)) return error;
  for (const auto& [_, name] : handshake) {
    auto reply = next_reply(deadline);
    if (!reply) return std::move(reply).error();
    if ((*reply)->type == REDIS_REPLY_ERROR)
      return fail("redis refused " + name + ": " + std::string(reply_text(**reply)));
  }
  return std::nullopt;
}

std::optional<std::string> RedisLink::append(int argc, const char** argv,
                                             const std::size_t* lengths) {
  if (redisAppendCommandArgv(context_.get(), argc, argv, lengths) != REDIS_OK)
    return std::string(context_->errstr[0] != '\0' ? context_->errstr : "out of memory");
  return std::nullopt;
}

std::optional<std::string> RedisLink::append(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  return append(static_cast<int>(argv.size()), argv.data(), lengths.data());
}

std::optional<std::string> RedisLink::flush(Clock::time_point deadline) {
  int done = 0;
  while (!done) {
    if (auto error = wait_ready(POLLOUT, deadline)) return error;
    if (redisBufferWrite(context_.get(), &done) != REDIS_OK) return fail(io_error());
  }
  return std::nullopt;
}

Result<ReplyPtr, std::string> RedisLink::next_reply(Clock::time_point deadline) {
  for (;;) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(context_.get(), &raw) != REDIS_OK)
      return unexpected(fail(context_->errstr));
    if (raw != nullptr) return ReplyPtr(static_cast<redisReply*>(raw));
    if (auto error = wait_ready(POLLIN, deadline)) return unexpected(std::move(*error));
    if (redisBufferRead(context_.get()) != REDIS_OK) return unexpected(fail(io_error()));
  }
}

std::string RedisLink::fail(std::string error) {
  context_.reset();
  return error;
}

std::string RedisLink::timeout_error() {
  timed_out_ = true;
  return "no answer within " + std::to_string(timeout_.count()) + " ms";
}

// hiredis reports its socket timeout (the backstop) as an I/O error, EAGAIN.
std::string RedisLink::io_error() {
  if (context_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK))
    return timeout_error();
  return context_->errstr;
}

std::optional<std::string> RedisLink::wait_ready(short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return fail(timeout_error());
    pollfd p{.fd = context_->fd, .events = events, .revents = 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    // Ready, or an error or hang-up that the read or write then reports.
    if (n > 0) return std::nullopt;
    if (n < 0 && errno != EINTR) return fail(std::string("poll: ") + std::strerror(errno));
  }
}

bool RedisLink::closed_while_idle() const noexcept {
  if (!context_) return false;
  pollfd p{.fd = context_->fd, .events = POLLIN | POLLRDHUP, .revents = 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace lmwarden::homes
