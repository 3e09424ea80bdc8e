// Helpers for the hostile-client tests: a raw socket client that can send any
// bytes (malformed, pipelined, dribbled) and read replies back with a deadline
// on every read, and a raw backend that records the exact bytes the warden
// sends upstream, so a test can see whether anything was smuggled through.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "scratch.h"
#include "sim_test_client.h"

namespace lmwarden::testing {

using namespace std::chrono_literals;

inline std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The value of header `name` (case-insensitive) in a raw header block, or nullopt.
inline std::optional<std::string> raw_header(std::string_view head, std::string_view name) {
  const std::string want = lower_ascii(name) + ":";
  std::size_t pos = 0;
  while (pos < head.size()) {
    std::size_t eol = head.find("\r\n", pos);
    if (eol == std::string_view::npos) eol = head.size();
    const std::string_view line = head.substr(pos, eol - pos);
    if (lower_ascii(line.substr(0, want.size())) == want) {
      std::string_view v = line.substr(want.size());
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      return std::string(v);
    }
    pos = eol + 2;
  }
  return std::nullopt;
}

inline constexpr std::string_view kChat =
    R"({"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]})";

// A well-formed chat request with a tag that RawBackend echoes back.
inline std::string chat_request(std::string_view tag, std::string_view extra_headers = "",
                                std::string_view body = kChat) {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
         "x-tag: " + std::string(tag) + "\r\n" + std::string(extra_headers) +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

inline int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error(std::string("connect: ") + std::strerror(err));
  }
  return fd;
}

// A client that speaks bytes, not HTTP: it sends what it is given and parses
// replies one at a time (Content-Length, chunked, or until close), so that
// pipelined replies can be told apart.
class RawClient {
 public:
  explicit RawClient(std::uint16_t port) : fd_(connect_loopback(port)) {}
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // False when the peer has already closed or reset the connection.
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // The next whole reply (1xx interim replies skipped), or nullopt when none
  // arrived before the deadline or the connection ended first.
  // `to_head`: the reply answers a HEAD, so no body follows its header.
  std::optional<HttpResponse> read_response(std::chrono::milliseconds timeout = 5s, bool to_head = false) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto r = take_response(to_head)) {
        if (r->status >= 100 && r->status < 200) continue;
        return r;
      }
      if (closed_ || !fill(deadline)) return std::nullopt;
    }
  }

  // True when the peer closes (EOF or reset) before the deadline; whatever it
  // sent until then stays readable with read_response().
  bool wait_closed(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!closed_)
      if (!fill(deadline)) return closed_;
    return true;
  }

  // True when `text` has arrived (and stays unread) before the deadline.
  bool wait_for(std::string_view text, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (buffer_.find(text) == std::string::npos)
      if (!fill(deadline)) return buffer_.find(text) != std::string::npos;
    return true;
  }

  const std::string& unread() const { return buffer_; }
  bool closed() const { return closed_; }

 private:
  // Receives more bytes; false on timeout or when the peer has closed.
  bool fill(std::chrono::steady_clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};  // a deadline already passed still looks once
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count()))) <= 0) return false;
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    buffer_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  // Removes one complete reply from the buffer, if there is one.
  std::optional<HttpResponse> take_response(bool to_head) {
    const std::size_t head_end = buffer_.find("\r\n\r\n");
    if (head_end == std::string::npos) return std::nullopt;
    const std::string_view head(buffer_.data(), head_end);
    std::size_t end = 0;
    if (to_head) {
      end = head_end + 4;
    } else if (lower_ascii(raw_header(head, "transfer-encoding").value_or("")) == "chunked") {
      std::size_t pos = head_end + 4;
      for (;;) {
        const std::size_t nl = buffer_.find("\r\n", pos);
        if (nl == std::string::npos) return std::nullopt;
        const std::size_t len = std::stoul(buffer_.substr(pos, nl - pos), nullptr, 16);
        if (len == 0) {
          if (buffer_.size() < nl + 4) return std::nullopt;
          end = nl + 4;  // no trailers from our servers
          break;
        }
        pos = nl + 2 + len + 2;
        if (buffer_.size() < pos) return std::nullopt;
      }
    } else if (auto cl = raw_header(head, "content-length")) {
      end = head_end + 4 + std::stoul(*cl);
      if (buffer_.size() < end) return std::nullopt;
    } else {
      const int status = std::stoi(buffer_.substr(9, 3));
      if (status >= 200 && status != 204 && status != 304 && !closed_) return std::nullopt;
      end = (status < 200 || status == 204 || status == 304) ? head_end + 4 : buffer_.size();
    }
    HttpResponse r = Connection::parse(buffer_.substr(0, end));
    buffer_.erase(0, end);
    return r;
  }

  int fd_ = -1;
  bool closed_ = false;
  std::string buffer_;
};

// A backend that records every request the warden sends it, byte for byte,
// and answers each with 200 and {"tag":"<its x-tag header>"}, keeping the
// connection alive. It understands Content-Length framing only, which is all
// the warden may send upstream; anything else is recorded and counted.
class RawBackend {
 public:
  RawBackend() {
    listen_fd_ = loopback_listener(64, port_);
    thread_ = std::thread([this] { run(); });
  }
  ~RawBackend() {
    stop_ = true;
    thread_.join();
    for (auto& c : clients_) ::close(c.fd);
    ::close(listen_fd_);
  }

  std::uint16_t port() const { return port_; }
  // Each request as received: header block (with its blank line) and body.
  std::vector<std::string> requests() {
    std::lock_guard lock{mutex_};
    return requests_;
  }
  // Requests whose framing was not a plain Content-Length (chunked, or both).
  int badly_framed() const { return badly_framed_.load(); }

 private:
  struct Client {
    int fd;
    std::string buffer;
  };

  void run() {
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      for (auto& c : clients_) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) clients_.push_back({fd, {}});
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Client& c = clients_[i - 1];
        char buf[16384];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n <= 0) {
          ::close(c.fd);
          c.fd = -1;
          continue;
        }
        c.buffer.append(buf, static_cast<std::size_t>(n));
        answer_complete_requests(c);
      }
      std::erase_if(clients_, [](const Client& c) { return c.fd < 0; });
    }
  }

  void answer_complete_requests(Client& c) {
    for (;;) {
      const std::size_t head_end = c.buffer.find("\r\n\r\n");
      if (head_end == std::string::npos) return;
      const std::string_view head(c.buffer.data(), head_end);
      std::size_t body_len = 0;
      const auto cl = raw_header(head, "content-length");
      if (cl) body_len = std::stoul(*cl);
      if (raw_header(head, "transfer-encoding") || !cl) ++badly_framed_;
      if (c.buffer.size() < head_end + 4 + body_len) return;
      const std::string request = c.buffer.substr(0, head_end + 4 + body_len);
      const std::string tag = raw_header(head, "x-tag").value_or("");
      c.buffer.erase(0, request.size());
      {
        std::lock_guard lock{mutex_};
        requests_.push_back(request);
      }
      const std::string body = "{\"tag\":\"" + tag + "\"}";
      const std::string reply = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
      ::send(c.fd, reply.data(), reply.size(), MSG_NOSIGNAL);
      // A request line without Content-Length (GET) has no body: body_len 0.
      if (!cl && raw_header(head, "transfer-encoding")) {
        ::close(c.fd);  // cannot frame what follows: give up on this connection
        c.fd = -1;
        return;
      }
    }
  }

  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> badly_framed_{0};
  std::thread thread_;
  std::vector<Client> clients_;  // the backend thread's own
  std::mutex mutex_;
  std::vector<std::string> requests_;
};

}  // namespace lmwarden::testing
