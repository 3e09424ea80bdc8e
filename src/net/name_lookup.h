// Host names looked up for connections to backends named by host name, and
// for their probes (a literal address needs no lookup).
//
// getaddrinfo blocks and nothing cuts it short: with a DNS server that does
// not answer it returns after the resolver's own timeout times its attempts
// (glibc: 5 s, twice). Asio's resolver runs it on one thread per io_context,
// one lookup after another, and joins that thread when the context shuts
// down: every connect behind a stalled lookup waited for it, and so did a
// stop. Here:
// - each host has at most one lookup under way in the process, on a thread
//   of its own that ends with it (asked from an I/O thread with a descriptor
//   table of its own, net/listener.h, it shares that table while it runs);
// - the addresses of a host's last answer are kept: a caller gets them at
//   once, and when they are older than a second a lookup starts to refresh
//   them, which no one waits for. A lookup that says the name does not exist
//   drops them; one that fails otherwise (a DNS server down or slow) keeps
//   them, so a DNS outage does not take the backends with it;
// - a caller with no addresses kept waits for the lookup until its deadline,
//   on a timer of its own that looks for the answer now and then: the lookup
//   thread never touches an io_context, so a context may stop or go at any
//   time, and a lookup no one waits for any more is left to finish (the
//   process may exit before it does), its answer kept for the next caller.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "net/executor.h"

namespace lmwarden::net {

using Endpoints = std::vector<tcp::endpoint>;

// The addresses of host:port (IPv4 and IPv6, as getaddrinfo orders them,
// only of the families this host has configured), or an error:
// asio::error::host_not_found and the other netdb errors, or
// lookup_got_no_answer() when none came by `deadline`.
Awaitable<std::pair<beast::error_code, Endpoints>> look_up(
    const Executor& executor, const std::string& host, std::uint16_t port,
    std::chrono::steady_clock::time_point deadline);

// The error of a lookup that got no answer by its caller's deadline. Not a
// timeout of the server's: it says nothing of whether the server is there.
beast::error_code lookup_got_no_answer();

// Lookups under way now in this process (each a thread).
std::size_t lookups_under_way();

// Drops every kept answer (tests).
void forget_kept_answers();

}  // namespace lmwarden::net
