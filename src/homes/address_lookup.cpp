#include "homes/address_lookup.h"

#include <sys/socket.h>

#include <system_error>
#include <thread>

namespace lmwarden::homes {

Result<std::shared_ptr<AddressLookup>, std::string> AddressLookup::start(const std::string& host,
                                                                         const std::string& port) {
  auto lookup = std::make_shared<AddressLookup>(host, port);
  try {
    std::thread([lookup] { lookup->run(); }).detach();
  } catch (const std::system_error& e) {  // no thread to be had (a limit)
    return unexpected("cannot start a thread to look the name up: " + std::string(e.what()));
  }
  return lookup;
}

void AddressLookup::run() noexcept {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host_.c_str(), port_.c_str(), &hints, &found);
  AddrInfoPtr owned(found);
  {
    const std::lock_guard lock(mutex_);
    try {
      if (rc != 0) {
        answer_.emplace(unexpected(std::string(gai_strerror(rc))));
      } else {
        answer_.emplace(std::move(owned));
      }
    } catch (...) {  // std::bad_alloc, making the error's text
      answer_.emplace(AddrInfoPtr{});
    }
  }
  done_.notify_all();
}

std::optional<AddressLookup::Answer> AddressLookup::wait_until(Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  if (!done_.wait_until(lock, deadline, [this] { return answer_.has_value(); }))
    return std::nullopt;
  std::optional<Answer> answer = std::move(answer_);
  answer_.reset();
  return answer;
}

}  // namespace lmwarden::homes
