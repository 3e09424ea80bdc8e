#include "proxy/upstream_pool.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <cerrno>

#include "common/coarse_clock.h"
#include "net/http_client.h"
#include "net/read_available.h"

namespace lmwarden::proxy {
namespace {

constexpr auto kTrustedIdle = std::chrono::milliseconds(1000);

// An idle keep-alive connection the server has closed shows as readable with
// EOF (or with stray bytes, which make it unusable too).
bool still_open(net::Stream& stream) {
  char probe;
  const auto n = ::recv(stream.socket().native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

bool UpstreamPool::take_idle(const config::BackendConfig& backend, UpstreamConnection& into) {
  const auto it = idle_.find(backend.authority);
  if (it == idle_.end()) return false;
  const auto now = coarse_steady_now();
  std::vector<Idle>& idle = it->second;
  for (; !idle.empty(); idle.pop_back()) {  // a stale one is closed as it is popped
    // A connection idle for less than kTrustedIdle is taken without the
    // probe (a syscall per request under load): servers close idle
    // keep-alive connections after seconds (uvicorn: 5 s), and a stale one
    // is still caught by forward_once, which retries on a fresh connection.
    Idle& last = idle.back();
    if (now - last.since < kTrustedIdle || still_open(*last.connection.stream)) {
      into = std::move(last.connection);
      into.reused = true;
      idle.pop_back();
      return true;
    }
  }
  return false;
}

net::Awaitable<net::beast::error_code> UpstreamPool::connect(
    const config::BackendConfig& backend, std::chrono::milliseconds connect_timeout,
    UpstreamConnection& into) {
  // In place before the wait, so that the caller can close it while it connects.
  into = UpstreamConnection{};
  into.stream = std::make_unique<net::Stream>(io_);
  into.key = backend.authority;
  net::Stream& stream = *into.stream;
  const auto ec = co_await net::connect_to(stream, backend.host, backend.port,
                                           std::chrono::steady_clock::now() + connect_timeout);
  stream.expires_never();
  if (!ec) {
    net::beast::error_code ignored;
    stream.socket().set_option(net::tcp::no_delay(true), ignored);
    net::enable_drain_hints(stream.socket());  // reads that wait without a recv first
  }
  co_return ec;
}

void UpstreamPool::release(UpstreamConnection& connection) {
  // Whatever is not kept is closed when the caller's connection is.
  if (!connection.stream || !connection.stream->socket().is_open() || connection.broken) return;
  if (connection.buffer.size() > 0) return;  // bytes past the reply: not reusable
  auto it = idle_.find(connection.key);
  if (it == idle_.end()) it = idle_.emplace(connection.key, std::vector<Idle>{}).first;
  if (it->second.size() >= max_idle_) return;
  it->second.emplace_back(std::move(connection), coarse_steady_now());
}

std::size_t UpstreamPool::idle_count() const noexcept {
  std::size_t n = 0;
  for (const auto& [key, v] : idle_) n += v.size();
  return n;
}

}  // namespace lmwarden::proxy
