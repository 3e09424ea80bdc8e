// bench_responder: a zero-latency stand-in for vLLM, the upstream of the proxy
// benchmark (bench/proxy/run.sh). It answers at once, from memory, so that
// what the benchmark measures is the proxy in front of it, not a model.
//
//   POST, body without "stream":true  → a small JSON reply in the route's
//                                       dialect (OpenAI chat, or Anthropic
//                                       for /v1/messages), with usage
//   POST, body with "stream":true     → text/event-stream, chunked: --events
//                                       content deltas (one write each, as
//                                       vLLM flushes them), the usage chunk
//                                       when the body asks include_usage, and
//                                       data: [DONE]. Back to back, or with
//                                       the header X-Bench-Paced: 1 one delta
//                                       per decode step: every --step-us
//                                       microseconds each paced stream of the
//                                       thread gets its next delta, together,
//                                       as an engine emits a batch's tokens
//   GET /health                       → 200
//   GET /metrics                      → a one-engine vLLM exposition
//
// Plain epoll, one thread per --threads, each with its own SO_REUSEPORT
// listener. HTTP/1.1 keep-alive, Content-Length request bodies only. It stops
// on SIGINT/SIGTERM or after --max-seconds, whichever comes first.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) {
  g_stop.store(true);
}

struct Options {
  int port = 0;
  int threads = 1;
  int events = 256;
  int max_seconds = 600;
  int step_us = 2000;
};

struct Replies {
  std::string openai_json;
  std::string anthropic_json;
  std::string sse_head;
  std::vector<std::string> sse_events;  // chunked-encoded, one per write
  std::string sse_usage;                // chunked-encoded
  std::string sse_tail;                 // [DONE] + last chunk
  std::string health;
  std::string metrics;
};

std::string chunk(std::string_view data) {
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return std::string(size) + std::string(data) + "\r\n";
}

std::string json_reply(std::string_view body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

Replies make_replies(int events) {
  Replies r;
  r.openai_json = json_reply(
      R"({"id":"chatcmpl-bench","object":"chat.completion","created":1767000000,"model":"bench",)"
      R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the bench responder."},)"
      R"("logprobs":null,"finish_reason":"stop","stop_reason":null}],)"
      R"("usage":{"prompt_tokens":24,"total_tokens":31,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":16}}})");
  r.anthropic_json = json_reply(
      R"({"id":"msg_bench","type":"message","role":"assistant","model":"bench",)"
      R"("content":[{"type":"text","text":"Hello from the bench responder."}],"stop_reason":"end_turn",)"
      R"("stop_sequence":null,"usage":{"input_tokens":512,"cache_read_input_tokens":29696,"output_tokens":7}})");
  r.sse_head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < events; ++i)
    r.sse_events.push_back(chunk(
        R"(data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1767000000,"model":"bench",)"
        R"("choices":[{"index":0,"delta":{"content":" token)" +
        std::to_string(i) +
        R"("},"logprobs":null,"finish_reason":null}]})"
        "\n\n"));
  r.sse_usage = chunk(
      R"(data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1767000000,"model":"bench",)"
      R"("choices":[],"usage":{"prompt_tokens":24,"total_tokens":)" +
      std::to_string(24 + events) + R"(,"completion_tokens":)" + std::to_string(events) +
      R"(,"prompt_tokens_details":{"cached_tokens":16}}})"
      "\n\n");
  r.sse_tail = chunk("data: [DONE]\n\n") + "0\r\n\r\n";
  r.health = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
  const std::string metrics =
      "# TYPE vllm:num_requests_running "
      "gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"bench\"} 0.0\n"
      "# TYPE vllm:num_requests_waiting "
      "gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"bench\"} 0.0\n"
      "# TYPE vllm:kv_cache_usage_perc "
      "gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"bench\"} 0.0\n";
  r.metrics = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
              std::to_string(metrics.size()) + "\r\n\r\n" + metrics;
  return r;
}

bool icontains(std::string_view hay, std::string_view needle) {
  if (needle.size() > hay.size()) return false;
  for (std::size_t i = 0; i + needle.size() <= hay.size(); ++i) {
    std::size_t j = 0;
    while (j < needle.size() && std::tolower(static_cast<unsigned char>(hay[i + j])) == needle[j])
      ++j;
    if (j == needle.size()) return true;
  }
  return false;
}

// Value of a header (name lower-case, with the colon), or "".
std::string_view header_value(std::string_view head, std::string_view name) {
  std::size_t pos = head.find("\r\n");
  while (pos != std::string_view::npos && pos + 2 < head.size()) {
    const std::size_t start = pos + 2;
    const std::size_t end = head.find("\r\n", start);
    std::string_view line =
        head.substr(start, (end == std::string_view::npos ? head.size() : end) - start);
    if (line.size() > name.size() && icontains(line.substr(0, name.size()), name)) {
      std::string_view v = line.substr(name.size());
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      return v;
    }
    pos = end;
  }
  return {};
}

bool body_says(std::string_view body, std::string_view key) {
  // "key":true or "key": true
  std::size_t at = 0;
  while ((at = body.find(key, at)) != std::string_view::npos) {
    at += key.size();
    std::size_t p = at;
    while (p < body.size() && (body[p] == ' ')) ++p;
    if (p < body.size() && body[p] == ':') {
      ++p;
      while (p < body.size() && body[p] == ' ') ++p;
      if (body.substr(p, 4) == "true") return true;
    }
  }
  return false;
}

struct Conn {
  int fd;
  std::string in;
  std::string out;
  bool close_after = false;
};

// A streamed reply sent one delta per decode step.
struct PacedStream {
  int fd;
  std::size_t next = 0;  // index of the next delta
  bool usage = false;    // the body asked for include_usage
};

using Clock = std::chrono::steady_clock;

class Worker {
 public:
  Worker(int listen_fd, const Replies& replies, std::chrono::microseconds step)
      : listen_fd_(listen_fd), replies_(replies), step_(step) {}

  void run() {
    ep_ = epoll_create1(0);
    add(listen_fd_, EPOLLIN);
    std::vector<epoll_event> events(256);
    while (!g_stop.load(std::memory_order_relaxed)) {
      timespec wait{0, 100'000'000};
      if (!paced_.empty()) {
        const auto left = std::max(Clock::duration::zero(), next_step_ - Clock::now());
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
        wait = {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      }
      const int n =
          epoll_pwait2(ep_, events.data(), static_cast<int>(events.size()), &wait, nullptr);
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listen_fd_) {
          accept_all();
          continue;
        }
        auto it = conns_.find(fd);
        if (it == conns_.end()) continue;
        Conn& c = *it->second;
        bool ok = true;
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) ok = on_readable(c);
        if (ok && (events[i].events & EPOLLOUT)) ok = flush(c);
        if (!ok || (c.close_after && c.out.empty() && !pacing(fd))) drop(fd);
      }
      if (!paced_.empty() && Clock::now() >= next_step_) decode_step();
    }
    for (auto& [fd, c] : conns_) ::close(fd);
    ::close(ep_);
  }

 private:
  void add(int fd, std::uint32_t ev) {
    epoll_event e{};
    e.events = ev;
    e.data.fd = fd;
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e);
  }
  void want_write(Conn& c, bool on) {
    epoll_event e{};
    e.events = EPOLLIN | (on ? EPOLLOUT : 0u);
    e.data.fd = c.fd;
    epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &e);
  }
  void drop(int fd) {
    std::erase_if(paced_, [fd](const PacedStream& p) { return p.fd == fd; });
    epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    conns_.erase(fd);
  }
  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      conns_.emplace(fd, std::make_unique<Conn>(Conn{fd}));
      add(fd, EPOLLIN);
    }
  }
  // Sends what it can; false when the connection failed.
  bool flush(Conn& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          want_write(c, true);
          return true;
        }
        return false;
      }
      c.out.erase(0, static_cast<std::size_t>(n));
    }
    want_write(c, false);
    return true;
  }
  void send_piece(Conn& c, std::string_view piece) {
    const bool idle = c.out.empty();
    c.out.append(piece);
    if (idle) (void)flush(c);  // one write per piece while the socket keeps up
  }
  bool on_readable(Conn& c) {
    char buf[64 * 1024];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n == 0) return false;
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return false;
      }
      c.in.append(buf, static_cast<std::size_t>(n));
    }
    for (;;) {
      const std::size_t end = c.in.find("\r\n\r\n");
      if (end == std::string::npos) return c.in.size() < (1u << 20);
      const std::string_view head(c.in.data(), end + 2);
      const std::size_t length =
          std::strtoull(std::string(header_value(head, "content-length:")).c_str(), nullptr, 10);
      if (c.in.size() < end + 4 + length) return true;  // body not complete yet
      const std::string_view body(c.in.data() + end + 4, length);
      if (icontains(header_value(head, "connection:"), "close")) c.close_after = true;
      respond(c, head, body);
      c.in.erase(0, end + 4 + length);
      if (c.close_after) break;
    }
    return flush(c);
  }
  void respond(Conn& c, std::string_view head, std::string_view body) {
    const std::string_view line = head.substr(0, head.find("\r\n"));
    if (line.starts_with("GET /health") || line.starts_with("HEAD ")) {
      send_piece(c, replies_.health);
    } else if (line.starts_with("GET /metrics")) {
      send_piece(c, replies_.metrics);
    } else if (body_says(body, "\"stream\"") && !header_value(head, "x-bench-paced:").empty()) {
      send_piece(c, replies_.sse_head);
      if (paced_.empty()) next_step_ = Clock::now() + step_;
      paced_.push_back({c.fd, 0, body_says(body, "\"include_usage\"")});
    } else if (body_says(body, "\"stream\"")) {
      send_piece(c, replies_.sse_head);
      for (const auto& e : replies_.sse_events) send_piece(c, e);
      send_stream_end(c, body_says(body, "\"include_usage\""));
    } else if (line.find("/v1/messages") != std::string_view::npos) {
      send_piece(c, replies_.anthropic_json);
    } else {
      send_piece(c, replies_.openai_json);
    }
  }

  bool pacing(int fd) const {
    return std::any_of(paced_.begin(), paced_.end(),
                       [fd](const PacedStream& p) { return p.fd == fd; });
  }

  // After the deltas: the usage chunk when asked for, then [DONE].
  void send_stream_end(Conn& c, bool usage) {
    if (usage) send_piece(c, replies_.sse_usage);
    send_piece(c, replies_.sse_tail);
  }

  // One decode step: every paced stream gets its next delta; a stream past
  // its last delta gets its end with it.
  void decode_step() {
    std::vector<int> to_drop;
    std::erase_if(paced_, [&](PacedStream& p) {
      Conn& c = *conns_.at(p.fd);
      const bool last = p.next + 1 == replies_.sse_events.size();
      send_piece(c, replies_.sse_events[p.next++]);
      if (last) {
        send_stream_end(c, p.usage);
        if (c.close_after && c.out.empty()) to_drop.push_back(p.fd);
      }
      if (c.out.size() > (1u << 20)) to_drop.push_back(p.fd);  // the reader stopped reading
      return last;
    });
    for (int fd : to_drop) drop(fd);
    // Steps keep their cadence; one that overran does not make the next early.
    next_step_ = std::max(next_step_ + step_, Clock::now());
  }

  int listen_fd_;
  const Replies& replies_;
  const std::chrono::microseconds step_;
  std::vector<PacedStream> paced_;
  Clock::time_point next_step_{};
  int ep_ = -1;
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
};

int open_listener(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 1024) != 0) {
    std::perror("bench_responder: listen");
    std::exit(1);
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_responder [--port P] [--threads N] [--events N] [--max-seconds S] "
               "[--step-us US]\n");
  return 2;
}

// A flag's value: a whole non-negative number, or nullopt.
std::optional<int> number(const char* text) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || value < 0 || value > INT_MAX)
    return std::nullopt;
  return static_cast<int>(value);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string_view flag = argv[i];
    const std::optional<int> parsed = i + 1 < argc ? number(argv[i + 1]) : std::nullopt;
    if (!parsed) return usage();
    const int value = *parsed;
    if (flag == "--port" && value <= 65535)
      o.port = value;
    else if (flag == "--threads")
      o.threads = value > 0 ? value : 1;
    else if (flag == "--events")
      o.events = value > 0 ? value : 1;
    else if (flag == "--max-seconds")
      o.max_seconds = value > 0 ? value : 1;
    else if (flag == "--step-us")
      o.step_us = value > 0 ? value : 1;
    else
      return usage();
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);
  const Replies replies = make_replies(o.events);
  std::vector<int> listeners{open_listener(o.port)};
  const int port = bound_port(listeners[0]);
  for (int i = 1; i < o.threads; ++i) listeners.push_back(open_listener(port));
  std::printf("listening on http://127.0.0.1:%d\n", port);
  std::fflush(stdout);
  std::vector<std::thread> threads;
  const std::chrono::microseconds step(o.step_us);
  for (int fd : listeners)
    threads.emplace_back([fd, &replies, step] { Worker(fd, replies, step).run(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.max_seconds);
  while (!g_stop.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  g_stop.store(true);
  for (auto& t : threads) t.join();
  for (int fd : listeners) ::close(fd);
  return 0;
}
