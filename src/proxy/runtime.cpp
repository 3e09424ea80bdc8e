#include "proxy/runtime.h"

namespace lmwarden::proxy {

WardenRuntime::WardenRuntime(config::Config config)
    : io_(std::make_unique<net::IoThreads>(config.threads)),
      control_(std::make_unique<net::IoThreads>(1)) {
  warden_ = std::make_unique<Warden>(std::move(config), *io_);
  server_ = std::make_unique<net::HttpServer>(
      *io_, warden_->server_options(), [w = warden_.get()](net::Exchange& ex) { return w->handle(ex); });
  scraper_ = std::make_unique<Scraper>(*warden_, warden_->config().scrape_interval,
                                       warden_->config().unhealthy_after);
}

net::tcp::endpoint WardenRuntime::start(bool scrape) {
  const auto& cfg = warden_->config();
  const auto endpoint = server_->listen(cfg.listen_host, cfg.listen_port);
  if (scrape) scraper_->start(control_->at(0));
  control_->start();
  io_->start();
  return endpoint;
}

int WardenRuntime::in_flight() const {
  int n = 0;
  for (const auto& m : warden_->models()) {
    std::lock_guard lock{m->mutex};
    n += m->router.view().in_flight;
  }
  return n;
}

void WardenRuntime::shutdown() {
  if (stopped_) return;
  stopped_ = true;
  control_->stop();
  control_->join();
  io_->stop();
  io_->join();
  server_->close_acceptor();
  warden_->close_upstreams();
  control_.reset();
  io_.reset();
  scraper_.reset();
  server_.reset();
  warden_.reset();
}

}  // namespace lmwarden::proxy
