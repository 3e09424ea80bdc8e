#include "net/name_lookup.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace lmwarden::net {
namespace {

using Clock = std::chrono::steady_clock;
using Addresses = std::vector<asio::ip::address>;

// Kept addresses older than this are looked up again, in the background.
constexpr auto kRefreshAfter = std::chrono::seconds(1);
// How often a waiting caller looks for its answer: after 1 ms, then twice as
// long each time, up to 50 ms (a lookup from /etc/hosts or a near DNS server
// takes well under a millisecond to a few).
constexpr auto kFirstLook = std::chrono::milliseconds(1);
constexpr auto kLastLook = std::chrono::milliseconds(50);

// One lookup of a host: plain data under the lookups' lock, shared by its
// thread and the callers that wait for it, freed by whichever lets go last.
struct Flight {
  bool done = false;
  beast::error_code error;
  Addresses addresses;
};

struct Kept {
  Addresses addresses;
  Clock::time_point at;
};

// Never destroyed: a lookup thread may still be in getaddrinfo when the
// process exits.
struct Lookups {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<Flight>, std::less<>> under_way;
  std::map<std::string, Kept, std::less<>> kept;
};

Lookups& lookups() {
  static Lookups* const all = new Lookups;
  return *all;
}

class LookupCategory : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "lmwarden.lookup"; }
  std::string message(int) const override { return "the name server gave no answer in time"; }
};

beast::error_code netdb_error(int gai, int saved_errno) {
  namespace error = asio::error;
  switch (gai) {
    case EAI_NONAME:
#ifdef EAI_NODATA
    case EAI_NODATA:
#endif
      return error::host_not_found;
    case EAI_AGAIN:
      return error::host_not_found_try_again;
    case EAI_MEMORY:
      return error::no_memory;
    case EAI_SYSTEM:
      if (saved_errno != 0) return {saved_errno, boost::system::system_category()};
      return error::no_recovery;
    default:
      return error::no_recovery;
  }
}

// The host's addresses, as getaddrinfo gives them.
std::pair<beast::error_code, Addresses> ask(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;  // as Asio's resolver asks by default
  addrinfo* found = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (gai != 0) return {netdb_error(gai, errno), {}};
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
  Addresses addresses;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET && a->ai_addrlen >= sizeof(sockaddr_in)) {
      sockaddr_in v4;
      std::memcpy(&v4, a->ai_addr, sizeof v4);
      addresses.emplace_back(asio::ip::address_v4(ntohl(v4.sin_addr.s_addr)));
    } else if (a->ai_family == AF_INET6 && a->ai_addrlen >= sizeof(sockaddr_in6)) {
      sockaddr_in6 v6;
      std::memcpy(&v6, a->ai_addr, sizeof v6);
      asio::ip::address_v6::bytes_type bytes;
      std::memcpy(bytes.data(), &v6.sin6_addr, bytes.size());
      addresses.emplace_back(asio::ip::address_v6(bytes, v6.sin6_scope_id));
    }
  }
  if (addresses.empty()) return {asio::error::host_not_found, {}};
  return {{}, std::move(addresses)};
}

// The lookup thread: asks, keeps the answer (or drops the kept one, for a
// name that no longer exists), and hands it to whoever waits.
void run_lookup(const std::string& host, const std::shared_ptr<Flight>& flight) noexcept {
  std::pair<beast::error_code, Addresses> answer;
  try {
    answer = ask(host);
  } catch (...) {  // std::bad_alloc
    answer = {asio::error::no_memory, {}};
  }
  Lookups& all = lookups();
  const std::lock_guard lock(all.mutex);
  flight->done = true;
  flight->error = answer.first;
  try {
    if (!answer.first) {
      all.kept[host] = {answer.second, Clock::now()};
    } else if (answer.first == asio::error::host_not_found) {
      if (const auto it = all.kept.find(host); it != all.kept.end()) all.kept.erase(it);
    }
    flight->addresses = std::move(answer.second);
  } catch (...) {
    flight->error = asio::error::no_memory;
  }
  if (const auto it = all.under_way.find(host); it != all.under_way.end() && it->second == flight)
    all.under_way.erase(it);
}

// The host's lookup under way, or a new one; nullptr (and why in `error`)
// when no thread could be had for it. Under the lookups' lock.
std::shared_ptr<Flight> join_or_start(Lookups& all, const std::string& host,
                                      beast::error_code& error) {
  const auto [it, first] = all.under_way.try_emplace(host);
  if (!first) return it->second;
  try {
    it->second = std::make_shared<Flight>();
    std::thread([host, flight = it->second] { run_lookup(host, flight); }).detach();
    return it->second;
  } catch (const std::system_error& e) {  // no thread to be had (a limit)
    error = e.code();
  } catch (...) {
    error = asio::error::no_memory;
  }
  all.under_way.erase(it);
  return nullptr;
}

Endpoints with_port(const Addresses& addresses, std::uint16_t port) {
  Endpoints endpoints;
  endpoints.reserve(addresses.size());
  for (const auto& address : addresses) endpoints.emplace_back(address, port);
  return endpoints;
}

}  // namespace

beast::error_code lookup_got_no_answer() {
  static const LookupCategory category;
  return {1, category};
}

Awaitable<std::pair<beast::error_code, Endpoints>> look_up(
    const Executor& executor, const std::string& host, std::uint16_t port,
    std::chrono::steady_clock::time_point deadline) {
  Lookups& all = lookups();
  std::optional<Endpoints> kept;
  std::shared_ptr<Flight> flight;
  beast::error_code error;
  {
    const std::lock_guard lock(all.mutex);
    const auto it = all.kept.find(host);
    if (it == all.kept.end() || Clock::now() - it->second.at >= kRefreshAfter)
      flight = join_or_start(all, host, error);
    if (it != all.kept.end()) kept = with_port(it->second.addresses, port);
  }
  if (kept) co_return std::pair{beast::error_code{}, std::move(*kept)};
  if (!flight) co_return std::pair{error, Endpoints{}};

  Timer timer(executor);
  auto wait = std::chrono::duration_cast<Clock::duration>(kFirstLook);
  for (;;) {
    std::optional<std::pair<beast::error_code, Endpoints>> answer;
    {
      const std::lock_guard lock(all.mutex);
      if (flight->done) answer.emplace(flight->error, with_port(flight->addresses, port));
    }
    if (answer) co_return std::move(*answer);
    const auto now = Clock::now();
    if (now >= deadline) co_return std::pair{lookup_got_no_answer(), Endpoints{}};
    timer.expires_at(std::min(now + wait, deadline));
    (void)co_await timer.async_wait(asio::as_tuple(asio::deferred));
    wait = std::min<Clock::duration>(wait * 2, kLastLook);
  }
}

std::size_t lookups_under_way() {
  Lookups& all = lookups();
  const std::lock_guard lock(all.mutex);
  return all.under_way.size();
}

void forget_kept_answers() {
  Lookups& all = lookups();
  const std::lock_guard lock(all.mutex);
  all.kept.clear();
}

}  // namespace lmwarden::net
