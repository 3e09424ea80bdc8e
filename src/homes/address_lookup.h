// A host name looked up with a deadline, for the connection to Redis.
//
// getaddrinfo blocks, and nothing cuts it short: with a DNS server that does
// not answer it returns after the resolver's own timeout times its attempts
// (glibc: 5 s, twice). On the store's thread that held every request's
// lookup behind it, and a stop, which joins that thread. Here getaddrinfo
// runs on a thread of its own, which ends with it; the caller waits for it
// until a deadline and may leave it running, to take its answer at the next
// connect (net/name_lookup.h does the same for the backends, on Asio).
#pragma once

#include <netdb.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/result.h"

namespace lmwarden::homes {

struct AddrInfoFree {
  void operator()(addrinfo* ai) const noexcept { freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoFree>;

class AddressLookup : public std::enable_shared_from_this<AddressLookup> {
 public:
  using Clock = std::chrono::steady_clock;

  // getaddrinfo's answer: its addresses, or what it said (gai_strerror).
  using Answer = Result<AddrInfoPtr, std::string>;

  // Starts looking up host:port (TCP, IPv4 and IPv6); the error when no
  // thread could be had for it.
  static Result<std::shared_ptr<AddressLookup>, std::string> start(const std::string& host,
                                                                   const std::string& port);

  // The answer, once: nullopt when none came by `deadline` (the lookup goes
  // on, and a later call may take it).
  std::optional<Answer> wait_until(Clock::time_point deadline);

  const std::string& host() const noexcept { return host_; }
  const std::string& port() const noexcept { return port_; }

  AddressLookup(std::string host, std::string port)
      : host_(std::move(host)), port_(std::move(port)) {}

 private:
  void run() noexcept;

  const std::string host_;
  const std::string port_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::optional<Answer> answer_;  // guarded by mutex_
};

// The error of a lookup that got no answer by its deadline.
inline constexpr const char* kNoAnswerInTime = "the name server gave no answer in time";

}  // namespace lmwarden::homes
