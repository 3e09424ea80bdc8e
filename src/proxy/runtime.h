// Everything `lmwarden serve` runs, owned in one place so that it starts and,
// above all, stops in the right order: the I/O threads first, then the
// listening socket and pooled upstream connections (while their io_contexts
// still exist), then the io_contexts (destroying any unfinished request
// coroutines, which still reach the warden to end their in-flight counts),
// and the warden last.
#pragma once

#include <memory>

#include "config/config.h"
#include "net/http_server.h"
#include "proxy/home_saver.h"
#include "proxy/scraper.h"
#include "proxy/warden.h"

namespace lmwarden::proxy {

class WardenRuntime {
 public:
  explicit WardenRuntime(config::Config config);
  ~WardenRuntime() { shutdown(); }
  WardenRuntime(const WardenRuntime&) = delete;
  WardenRuntime& operator=(const WardenRuntime&) = delete;

  // Takes the homes file's lock and reads the file (saved_homes) into the
  // models (throws std::runtime_error when another warden keeps the file),
  // binds the configured address or serves the passed socket (throws
  // std::system_error with a clear message when it cannot), and starts the
  // I/O threads, the writer of the homes file and, with `scrape`, the
  // scraper.
  net::tcp::endpoint start(bool scrape = true);
  // Before start(): serve the listening socket `fd` (passed by a service
  // manager) instead of binding the configured address.
  void use_passed_socket(int fd) noexcept { passed_socket_ = fd; }
  void stop_accepting() { server_->stop_accepting(); }
  // Requests being served (in any configuration, current or retired).
  int in_flight() const { return warden_->requests_in_progress(); }
  // Requests read in part or whole and not yet answered, of any route: a
  // drain's grace period waits for these.
  int requests_under_way() const { return server_->requests_under_way(); }
  // Publishes a new configuration (see Warden::reload) and restarts the
  // scraper's loops for it. Returns what the operator should hear of it (see
  // Warden::reload).
  std::vector<std::string> reload(config::Config config);
  // Opens the access log's file again (AccessLog::reopen); false when the
  // configuration names none.
  bool reopen_access_log() {
    const auto set = warden_->models();
    if (!set->access_log) return false;
    set->access_log->reopen();
    return true;
  }
  // Ends the requests in flight with an error (Warden::cut_in_flight).
  void cut_in_flight() { warden_->cut_in_flight(*io_); }
  // Writes the homes file a last time (when the configuration names one),
  // then stops everything.
  void shutdown();
  // Writes the homes file now (saved_homes); false when that failed.
  bool save_homes() { return saver_->write_now(); }

  Warden& warden() noexcept { return *warden_; }

 private:
  std::unique_ptr<net::IoThreads> io_;
  std::unique_ptr<net::IoThreads> control_;  // scrapes and probes, off the data plane
  std::unique_ptr<Warden> warden_;
  std::unique_ptr<net::HttpServer> server_;
  std::unique_ptr<Scraper> scraper_;
  std::unique_ptr<HomeSaver> saver_;  // the homes file (saved_homes)
  bool scraping_ = false;
  bool stopped_ = false;
  int passed_socket_ = -1;
};

}  // namespace lmwarden::proxy
