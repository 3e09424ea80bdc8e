// What a drain (HttpServer::stop_accepting) needs of one io_context: its
// connections waiting between requests, to close them, and its requests under
// way, to wait for them. An io_context service, so that it outlives the
// connection coroutines destroyed with the context.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/intrusive/list.hpp>

#include "net/http_server.h"

namespace lmwarden::net {

// Idle connections are closed at once: their clients then open a new
// connection, to whichever server now listens, rather than send a request
// that the draining one would have to serve.
class DrainState final : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;

  struct Wait {
    Wait(const HttpServer& server, Socket& socket) : server(&server), socket(&socket) {}
    boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>>
        hook;
    const HttpServer* server;
    Socket* socket;
  };

  explicit DrainState(asio::io_context& context) : service(context) {}

  // Requests from header to the end of their reply, of every server on this
  // context (one, in this program). Written by the context's thread alone: a
  // load and a store, no locked add, no cache line shared per request.
  std::atomic<int> under_way{0};
  void count_under_way(int d) noexcept {
    under_way.store(under_way.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }

  void add(Wait& wait) { waits_.push_back(wait); }
  // Cancels the waits of `server`; each connection then finds no request and
  // closes. From the context's own thread.
  void close_for(const HttpServer& server) noexcept {
    for (Wait& wait : waits_) {
      if (wait.server != &server) continue;
      beast::error_code ignored;
      wait.socket->cancel(ignored);
    }
  }

 private:
  void shutdown() override { waits_.clear(); }

  boost::intrusive::list<Wait,
                         boost::intrusive::member_hook<Wait, decltype(Wait::hook), &Wait::hook>,
                         boost::intrusive::constant_time_size<false>>
      waits_;
};

}  // namespace lmwarden::net
