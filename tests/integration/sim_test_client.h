// Test helpers for the simulator's integration tests: run `lmwarden sim` as a
// child process, and a tiny blocking HTTP/1.1 client with timeouts (enough
// for tests; one request per connection, chunked bodies decoded).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lmwarden::testing {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked
};

struct SseEvent {
  std::string event;  // empty when the event had no `event:` line
  std::string data;
};

// Splits an SSE body into events, checking the framing strictly: each event
// is lines "field: value" ended by an empty line.
inline std::vector<SseEvent> parse_sse(std::string_view body) {
  std::vector<SseEvent> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    const std::size_t end = body.find("\n\n", pos);
    if (end == std::string_view::npos) throw std::runtime_error("SSE event without blank line");
    SseEvent ev;
    std::string_view block = body.substr(pos, end - pos);
    while (!block.empty()) {
      const std::size_t nl = block.find('\n');
      const std::string_view line = block.substr(0, nl);
      if (line.starts_with("event: "))
        ev.event = std::string(line.substr(7));
      else if (line.starts_with("data: "))
        ev.data = std::string(line.substr(6));
      else
        throw std::runtime_error("unexpected SSE line: " + std::string(line));
      block = nl == std::string_view::npos ? std::string_view{} : block.substr(nl + 1);
    }
    out.push_back(std::move(ev));
    pos = end + 2;
  }
  return out;
}

class Connection {
 public:
  explicit Connection(std::uint16_t port, int timeout_ms = 20'000) : timeout_ms_(timeout_ms) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect failed");
    }
  }
  ~Connection() { close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void send_request(std::string_view method, std::string_view target, std::string_view body = {},
                    const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    std::string req = std::string(method) + " " + std::string(target) + " HTTP/1.1\r\n";
    req += "Host: 127.0.0.1\r\nConnection: close\r\n";
    for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
    if (!body.empty() || method == "POST") {
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n";
    }
    req += "\r\n";
    req += body;
    std::size_t sent = 0;
    while (sent < req.size()) {
      const ssize_t n = ::send(fd_, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      sent += static_cast<std::size_t>(n);
    }
  }

  // Reads until `pred(raw bytes so far)` holds or the peer closes. False on
  // timeout.
  template <typename Pred>
  bool read_until(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
    char buf[16384];
    while (!pred(raw_)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        return pred(raw_);
      }
      raw_.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }

  HttpResponse read_response() {
    if (!read_until([this](const std::string&) { return closed_; })) {
      throw std::runtime_error("response timed out; got: " + raw_.substr(0, 300));
    }
    return parse(raw_);
  }

  const std::string& raw() const { return raw_; }

  static HttpResponse parse(const std::string& raw) {
    HttpResponse res;
    const std::size_t head_end = raw.find("\r\n\r\n");
    if (head_end == std::string::npos)
      throw std::runtime_error("no header in: " + raw.substr(0, 200));
    std::string_view head(raw.data(), head_end);
    res.status = std::stoi(std::string(head.substr(9, 3)));
    std::size_t pos = head.find("\r\n") + 2;
    while (pos < head.size()) {
      std::size_t e = head.find("\r\n", pos);
      if (e == std::string_view::npos) e = head.size();
      const std::string_view line = head.substr(pos, e - pos);
      const std::size_t colon = line.find(':');
      std::string name(line.substr(0, colon));
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      res.headers[name] = std::string(value);
      pos = e + 2;
    }
    std::string_view body(raw.data() + head_end + 4, raw.size() - head_end - 4);
    if (res.headers["transfer-encoding"] == "chunked") {
      while (!body.empty()) {
        const std::size_t nl = body.find("\r\n");
        const std::size_t len = std::stoul(std::string(body.substr(0, nl)), nullptr, 16);
        if (len == 0) break;
        res.body.append(body.substr(nl + 2, len));
        body.remove_prefix(nl + 2 + len + 2);
      }
    } else {
      res.body = std::string(body);
    }
    return res;
  }

 private:
  int fd_ = -1;
  int timeout_ms_;
  bool closed_ = false;
  std::string raw_;
};

inline HttpResponse http_request(
    std::uint16_t port, std::string_view method, std::string_view target,
    std::string_view body = {},
    const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  Connection c(port);
  c.send_request(method, target, body, headers);
  return c.read_response();
}

// How a child is started. The defaults suit `lmwarden sim`: stdout to a pipe
// (read for the address), stderr shared with the test.
struct ProcessOptions {
  // When set, the child's stdout and stderr both go to this file (a pipe could
  // fill up and block a chatty child); output() reads it back.
  std::string output_file;
  // RLIMIT_NOFILE of the child (soft and hard), set just before exec.
  std::optional<rlim_t> max_open_files;
  // Environment variables set in the child only.
  std::vector<std::pair<std::string, std::string>> env;
  // The program to run; empty: lmwarden (LMWARDEN_BINARY). Another must also
  // print "listening on http://127.0.0.1:PORT".
  std::string binary;
};

// This process's environment with `overrides` set (replacing a variable of
// the same name), as "NAME=value" entries for execve.
inline std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> entries;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry{*e};
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool overridden = std::any_of(overrides.begin(), overrides.end(),
                                        [&](const auto& o) { return o.first == name; });
    if (!overridden) entries.emplace_back(entry);
  }
  for (const auto& [name, value] : overrides) entries.push_back(name + "=" + value);
  return entries;
}

// `lmwarden ARGS...` (sim, serve) as a child process, which prints
// "listening on http://127.0.0.1:PORT"; killed (SIGTERM, then SIGKILL) on
// destruction.
class SimProcess {
 public:
  explicit SimProcess(std::vector<std::string> args, ProcessOptions options = {})
      : output_file_(std::move(options.output_file)) {
    // Everything the child needs is built before fork(). The test process may
    // run threads (an in-process warden), and the child of a threaded process
    // may call only async-signal-safe functions until it execs: an allocation
    // there can wait forever on a lock another thread held at the fork.
    std::string binary = options.binary.empty() ? LMWARDEN_BINARY : options.binary;
    std::vector<char*> argv;
    argv.push_back(binary.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> environment = child_environment(options.env);
    std::vector<char*> envp;
    for (auto& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);
    const char* output_path = output_file_.c_str();
    int out[2] = {-1, -1};
    // Close-on-exec, so that no other child started meanwhile keeps the
    // write end open (the reader would then never see the end).
    if (output_file_.empty() && ::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // Dies with the test process, even when a timeout kills it.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (out[1] >= 0) {
        ::dup2(out[1], STDOUT_FILENO);  // the copy is not close-on-exec
      } else {
        const int fd = ::open(output_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        if (fd < 0) std::_Exit(126);
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
        ::close(fd);
      }
      if (options.max_open_files) {
        const rlimit limit{*options.max_open_files, *options.max_open_files};
        if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) std::_Exit(125);
      }
      ::execve(argv[0], argv.data(), envp.data());
      std::_Exit(127);
    }
    if (output_file_.empty()) {
      ::close(out[1]);
      stdout_fd_ = out[0];
    }
    port_ = read_port();
  }
  ~SimProcess() { terminate(); }

  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

  // True while the child has not exited (reaps it when it has).
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
    pid_ = -1;
    exit_status_ = status;
    close_stdout();
    return false;
  }

  // Everything the child wrote so far (only with ProcessOptions::output_file).
  std::string output() const {
    std::ifstream in(output_file_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  // Closes the reading end of the child's stdout (without output_file): what
  // it writes from then on has no reader, as after `| tee` has exited.
  void stop_reading_output() { close_stdout(); }

  // Sends `sig` and returns at once (the destructor reaps the child).
  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  // Sends SIGTERM and returns the exit status (waits up to 10 s).
  int terminate() {
    if (pid_ <= 0) return exit_status_;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 1000; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = status;
        close_stdout();
        return status;
      }
      ::usleep(10'000);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &exit_status_, 0);
    pid_ = -1;
    close_stdout();
    return exit_status_;
  }

 private:
  void close_stdout() {
    if (stdout_fd_ >= 0) ::close(stdout_fd_);
    stdout_fd_ = -1;
  }

  // More of the child's output, waiting up to 100 ms; false once it can say no more.
  bool read_more(std::string& text) {
    if (!output_file_.empty()) {
      ::usleep(20'000);
      text = output();
      return running();
    }
    pollfd p{stdout_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) return true;
    char buf[512];
    const ssize_t n = ::read(stdout_fd_, buf, sizeof buf);
    if (n <= 0) return false;
    text.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  std::uint16_t read_port() {
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    constexpr std::string_view kPrefix = "listening on http://127.0.0.1:";
    while (std::chrono::steady_clock::now() < deadline) {
      const bool more = read_more(text);
      const std::size_t at = text.find(kPrefix);
      if (at != std::string::npos) {
        const std::size_t nl = text.find('\n', at);
        if (nl != std::string::npos) {
          return static_cast<std::uint16_t>(std::stoi(text.substr(at + kPrefix.size())));
        }
      }
      if (!more) break;
    }
    throw std::runtime_error("lmwarden did not print its address; output: " + text);
  }

  std::string output_file_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::uint16_t port_ = 0;
  int exit_status_ = 0;
};

}  // namespace lmwarden::testing
