#include "net/name_lookup.h"

#include <netdb.h>
#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace lmwarden::net {
namespace {

// One caller's wait: its timer, which an answer stops, and the answer.
// `gone` (under the lookups' lock) is set once the caller no longer waits,
// after which nothing is posted to its executor: the caller's coroutine may
// be destroyed with its io_context. Only the caller's thread holds a Waiter
// (its coroutine, or the answer posted to it), so the timer is destroyed
// there, never on a lookup thread after its io_context has gone.
struct Waiter {
  explicit Waiter(const Executor& executor) : executor(executor), timer(executor) {}
  Executor executor;
  Timer timer;
  std::optional<std::pair<beast::error_code, Endpoints>> answer;
  bool gone = false;
};

// The lookups under way, by "host:port", and who waits for each. Never
// destroyed: a lookup thread may still be in getaddrinfo when the process
// exits.
struct Lookups {
  std::mutex mutex;
  std::map<std::string, std::vector<std::weak_ptr<Waiter>>, std::less<>> under_way;
};

Lookups& lookups() {
  static Lookups* const all = new Lookups;
  return *all;
}

beast::error_code netdb_error(int gai) {
  namespace error = asio::error;
  switch (gai) {
    case EAI_NONAME:
#ifdef EAI_NODATA
    case EAI_NODATA:
#endif
      return error::host_not_found;
    case EAI_AGAIN:
      return error::host_not_found_try_again;
    case EAI_SERVICE:
      return error::service_not_found;
    case EAI_MEMORY:
      return error::no_memory;
    case EAI_SYSTEM:
      return {errno, boost::system::system_category()};
    default:
      return error::no_recovery;
  }
}

std::pair<beast::error_code, Endpoints> getaddrinfo_endpoints(const std::string& host,
                                                              std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;  // as Asio's resolver asks by default
  addrinfo* found = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (gai != 0) return {netdb_error(gai), {}};
  Endpoints endpoints;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    tcp::endpoint endpoint;
    std::memcpy(endpoint.data(), a->ai_addr, a->ai_addrlen);
    endpoint.resize(a->ai_addrlen);
    endpoints.push_back(endpoint);
  }
  ::freeaddrinfo(found);
  if (endpoints.empty()) return {asio::error::host_not_found, {}};
  return {{}, std::move(endpoints)};
}

// The lookup thread: asks, then hands the answer to whoever still waits.
void run_lookup(std::string key, std::string host, std::uint16_t port) {
  const auto answer = getaddrinfo_endpoints(host, port);
  Lookups& all = lookups();
  const std::lock_guard lock(all.mutex);
  const auto it = all.under_way.find(key);
  for (const auto& weak : it->second) {
    // Not gone: its caller still holds it (it marks it gone, under this
    // lock, before letting go).
    std::shared_ptr<Waiter> waiter = weak.lock();
    if (!waiter || waiter->gone) continue;
    const Executor executor = waiter->executor;
    asio::post(executor, [waiter = std::move(waiter), answer] {
      if (waiter->gone) return;
      waiter->answer = answer;
      waiter->timer.cancel();
    });
  }
  all.under_way.erase(it);
}

// Marks the waiter gone when its caller stops waiting, whether it returns or
// its coroutine is destroyed unfinished (its io_context shutting down).
struct Leave {
  std::shared_ptr<Waiter> waiter;
  ~Leave() {
    const std::lock_guard lock(lookups().mutex);
    waiter->gone = true;
  }
};

}  // namespace

Awaitable<std::pair<beast::error_code, Endpoints>> look_up(
    const Executor& executor, const std::string& host, std::uint16_t port,
    std::chrono::steady_clock::time_point deadline) {
  auto waiter = std::make_shared<Waiter>(executor);
  waiter->timer.expires_at(deadline);
  std::string key = host + ":" + std::to_string(port);
  beast::error_code no_thread;
  {
    Lookups& all = lookups();
    const std::lock_guard lock(all.mutex);
    auto [it, first] = all.under_way.try_emplace(key);
    if (first) {
      try {
        std::thread(run_lookup, key, host, port).detach();
      } catch (const std::system_error& e) {  // no thread to be had (a limit)
        no_thread = e.code();
        all.under_way.erase(it);
      }
    }
    if (!no_thread) it->second.push_back(waiter);
  }
  if (no_thread) co_return std::pair{no_thread, Endpoints{}};
  const Leave leave{waiter};
  (void)co_await waiter->timer.async_wait(asio::as_tuple(asio::deferred));
  // The answer is set on this thread, as the timer's wait completes.
  if (waiter->answer) co_return std::move(*waiter->answer);
  co_return std::pair{beast::error_code{beast::error::timeout}, Endpoints{}};
}

std::size_t lookups_under_way() {
  Lookups& all = lookups();
  const std::lock_guard lock(all.mutex);
  return all.under_way.size();
}

}  // namespace lmwarden::net
