// Reads each backend server's /health and /metrics every scrape interval and
// feeds the routing state: per-rank running, waiting and KV used (placement),
// prefix-cache counters (hit rate since the warden started), and health.
//
// A server is marked unhealthy after `unhealthy_after` consecutive failed
// rounds (connect error, timeout, non-200 /health, or a /metrics without
// vLLM samples); its ranks then take no new conversations and their
// conversations re-home. The data plane takes a server out at once when it
// cannot connect to it (warden.cpp). One good round brings it back, whoever
// took it out. Each change is logged once. Every probe has its own timeout
// and runs on the scraper's own thread, so a hanging /metrics delays nothing
// but its own server's next round. A server's probes share one connection,
// kept open from round to round (net::HttpGetter).
//
// After a configuration reload, `start` is called again: loops of the retired
// configuration end at their next round, and the new configuration's begin
// (a model that kept its layout keeps its health, its count of failed
// probes and its counter baselines).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "net/http_server.h"
#include "proxy/warden.h"

namespace lmwarden::proxy {

class Scraper {
 public:
  Scraper(Warden& warden, std::chrono::milliseconds interval, int unhealthy_after)
      : warden_(warden), interval_(interval), unhealthy_after_(unhealthy_after) {}

  // Starts one loop per (model, backend server) of the configuration in
  // force on `io`, unless that configuration's loops were started already
  // (each reload asks; a burst of reloads asks several times for the last
  // one). Call from `io`'s thread, or before it runs.
  void start(net::asio::io_context& io);

 private:
  net::Awaitable<void> watch(std::shared_ptr<ModelState> model, int backend,
                             std::uint64_t generation);

  Warden& warden_;
  std::chrono::milliseconds interval_;
  int unhealthy_after_;
  std::optional<std::uint64_t> started_;  // the generation whose loops run
};

}  // namespace lmwarden::proxy
