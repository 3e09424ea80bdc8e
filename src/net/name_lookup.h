// Host names looked up under a deadline, for connections to backends and
// probes of them named by host name (a literal address needs no lookup).
//
// getaddrinfo blocks and nothing cuts it short: with a DNS server that does
// not answer it returns after the resolver's own timeout times its attempts
// (glibc: 5 s, twice). Asio's resolver runs it on one thread per io_context,
// one lookup after another, and joins that thread when the context shuts
// down: every connect behind a stalled lookup waits for it, and so does a
// stop. Here each name has at most one lookup under way in the process, on
// a thread of its own that ends with it; whoever asks waits on a timer of
// its own until the answer or the deadline, whichever is first, and a lookup
// no one waits for any more is left to finish unheard (the process may exit
// before it does). A lookup asked from an I/O thread with a descriptor table
// of its own (net/listener.h) shares that table while it runs.
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
// beast::error::timeout when no answer came by `deadline`. Two callers that
// ask for the same host:port while a lookup of it is under way share it.
Awaitable<std::pair<beast::error_code, Endpoints>> look_up(
    const Executor& executor, const std::string& host, std::uint16_t port,
    std::chrono::steady_clock::time_point deadline);

// Lookups under way now in this process (each a thread).
std::size_t lookups_under_way();

}  // namespace lmwarden::net
