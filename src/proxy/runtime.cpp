#include "proxy/runtime.h"

#include <boost/asio/post.hpp>
#include <stdexcept>

namespace lmwarden::proxy {

WardenRuntime::WardenRuntime(config::Config config)
    : io_(std::make_unique<net::IoThreads>(config.threads, net::DescriptorTables::kPerThread)),
      control_(std::make_unique<net::IoThreads>(1)) {
  warden_ = std::make_unique<Warden>(std::move(config), *io_);
  server_ = std::make_unique<net::HttpServer>(
      *io_, warden_->server_options(), [w = warden_.get()](net::Exchange& ex) { return w->handle(ex); });
  const auto set = warden_->models();
  scraper_ = std::make_unique<Scraper>(*warden_, set->config.scrape_interval, set->config.unhealthy_after);
  saver_ = std::make_unique<HomeSaver>(*warden_, warden_->saved_homes_writes());
}

net::tcp::endpoint WardenRuntime::start(bool scrape) {
  const auto set = warden_->models();
  // The file passed the configuration's check, and still would not open.
  if (!set->access_log_failure.empty()) throw std::runtime_error(set->access_log_failure);
  if (const std::string reason = saver_->claim(); !reason.empty())
    throw std::runtime_error("saved homes: " + reason);
  if (!restore_saved_homes(*set)) saver_->hold(set->config.saved_homes->path);
  const auto endpoint = passed_socket_ >= 0
                            ? server_->adopt(passed_socket_)
                            : server_->listen(set->config.listen_host, set->config.listen_port);
  scraping_ = scrape;
  warden_->set_health_probed(scrape);
  if (scrape) scraper_->start(control_->at(0));
  control_->start();
  io_->start();
  saver_->start();
  return endpoint;
}

std::vector<std::string> WardenRuntime::reload(config::Config config) {
  auto kept = warden_->reload(std::move(config));
  if (scraping_) net::asio::post(control_->at(0), [this] { scraper_->start(control_->at(0)); });
  saver_->reconfigured();
  return kept;
}

void WardenRuntime::shutdown() {
  if (stopped_) return;
  stopped_ = true;
  saver_->finish();
  control_->stop();
  control_->join();
  // The store's thread posts its answers to the I/O contexts: it ends while
  // they still run (a request that gave up on its lookup leaves the store
  // holding it, and an I/O thread shuts its context down as it ends, which
  // a post must not meet). A lookup asked after this gets no answer and ends
  // at its timeout, if the stop leaves it that long.
  warden_->stop_shared_homes();
  io_->stop();
  io_->join();
  server_->close_acceptor();
  warden_->close_upstreams();
  control_.reset();
  io_.reset();
  scraper_.reset();
  saver_.reset();
  server_.reset();
  warden_.reset();
}

}  // namespace lmwarden::proxy
