// A real redis-server for one test, on 127.0.0.1 at a port nothing else
// uses, with nothing persisted; stopped (and started again on the same port,
// for restart tests) at will. Also a minimal client for arranging what a
// test needs that the code under test cannot write (a list under a key, say).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "scratch.h"

namespace lmwarden::testing {

inline constexpr const char* kRedisServerBinary = "/usr/bin/redis-server";

// TLS on a second port (the first stays plain, for the test's own
// commands): the server's certificate and key, and the CA whose
// certificates it accepts from clients when it asks for them.
struct RedisServerTls {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  bool auth_clients = false;  // --tls-auth-clients yes: a client certificate is required
};

struct RedisServerOptions {
  std::string password;  // --requirepass when not empty
  bool debug_command = false;  // DEBUG allowed (DEBUG SLEEP stalls the server)
  std::optional<RedisServerTls> tls;
};

// One RESP exchange on a fresh connection: AUTH first when `password` is
// set, then `args`. The reply's first line ("+OK", ":1", "$5", "-ERR …"),
// or with `whole_bulk`, a bulk string reply's content (INFO's text, say).
// The reply is waited for up to `wait` (longer for a command that blocks,
// such as DEBUG SLEEP).
inline std::string redis_command(std::uint16_t port, const std::vector<std::string>& args,
                                 const std::string& password = {}, bool whole_bulk = false,
                                 std::chrono::milliseconds wait = std::chrono::seconds(2)) {
  const auto encode = [](const std::vector<std::string>& a) {
    std::string out = "*" + std::to_string(a.size()) + "\r\n";
    for (const auto& s : a) out += "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
    return out;
  };
  std::string request;
  if (!password.empty()) request += encode({"AUTH", password});
  request += encode(args);

  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot reach redis-server on port " + std::to_string(port));
  }
  // With AUTH, the command's reply starts after the first line (AUTH's is
  // one line). The reply is complete at the end of its first line, or with
  // `whole_bulk` and a "$<length>" line, once that many bytes follow it.
  const std::size_t skipped_lines = password.empty() ? 0 : 1;
  std::string text;
  std::size_t start = 0;
  std::optional<std::string> reply;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!reply && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    start = 0;
    for (std::size_t i = 0; i < skipped_lines && start != std::string::npos; ++i) {
      const std::size_t at = text.find("\r\n", start);
      start = at == std::string::npos ? at : at + 2;
    }
    if (start == std::string::npos) continue;
    const std::size_t end = text.find("\r\n", start);
    if (end == std::string::npos) continue;
    std::string line = text.substr(start, end - start);
    if (!whole_bulk || !line.starts_with('$') || line == "$-1") {
      reply = std::move(line);
    } else if (const std::size_t length = std::stoul(line.substr(1));
               text.size() >= end + 2 + length) {
      reply = text.substr(end + 2, length);
    }
  }
  ::close(fd);
  if (!reply)
    throw std::runtime_error("redis-server on port " + std::to_string(port) + " did not answer");
  return *reply;
}

// Whether a PING on a fresh connection is answered within `wait`: false
// while the server is blocked (DEBUG SLEEP), or gone.
inline bool redis_answers_within(std::uint16_t port, std::chrono::milliseconds wait) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string ping = "*1\r\n$4\r\nPING\r\n";
  bool answered = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::send(fd, ping.data(), ping.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(ping.size())) {
    pollfd p{fd, POLLIN, 0};
    char buf[16];
    answered =
        ::poll(&p, 1, static_cast<int>(wait.count())) > 0 && ::recv(fd, buf, sizeof buf, 0) > 0;
  }
  ::close(fd);
  return answered;
}

class RedisServer {
 public:
  explicit RedisServer(RedisServerOptions options = {}) : options_(std::move(options)) {
    if (::access(kRedisServerBinary, X_OK) != 0) {
      throw std::runtime_error(std::string(kRedisServerBinary) +
                               " not found: run scripts/bootstrap.sh (it installs redis-server)");
    }
    // Another process may take the port between its release and Redis's
    // bind: try a few.
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_port();
      if (options_.tls) tls_port_ = free_port();
      if (try_start()) return;
    }
    throw std::runtime_error("redis-server did not start; its output: " + output());
  }
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  std::uint16_t port() const { return port_; }
  // With options.tls: the port that speaks TLS.
  std::uint16_t tls_port() const { return tls_port_; }
  const std::string& password() const { return options_.password; }

  // Starts it again on the same port after stop(); data written before is
  // gone (nothing is persisted).
  void start() {
    if (pid_ > 0) return;
    // The old listener's port is free at once (Redis sets SO_REUSEADDR), but
    // allow for a slow exit of the previous process.
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (try_start()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    throw std::runtime_error("redis-server did not start again on port " + std::to_string(port_) +
                             "; its output: " + output());
  }

  // SIGTERM, then the exit reaped (SIGKILL after 5 s).
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // One command (see redis_command), authenticated when the server wants it.
  std::string command(const std::vector<std::string>& args,
                      std::chrono::milliseconds wait = std::chrono::seconds(2)) const {
    return redis_command(port_, args, options_.password, /*whole_bulk=*/false, wait);
  }

  // A number from INFO stats ("total_connections_received", …).
  std::uint64_t stat(const std::string& field) const {
    const std::string info =
        redis_command(port_, {"INFO", "stats"}, options_.password, /*whole_bulk=*/true);
    const std::size_t at = info.find("\r\n" + field + ":");
    if (at == std::string::npos) throw std::runtime_error("INFO stats has no " + field);
    return std::stoull(info.substr(at + field.size() + 3));
  }

  // One counter of a command from INFO commandstats (`calls`,
  // `failed_calls`, …) for `command` in lower case ("evalsha"); 0 for a
  // command not run since the start or CONFIG RESETSTAT.
  std::uint64_t command_stat(const std::string& command, const std::string& counter) const {
    const std::string info =
        redis_command(port_, {"INFO", "commandstats"}, options_.password, /*whole_bulk=*/true);
    const std::string name = "cmdstat_" + command + ":";
    const std::size_t line = info.find(name);
    if (line == std::string::npos) return 0;
    // ",calls=3,usec=…,failed_calls=0"
    const std::string fields =
        "," + info.substr(line + name.size(), info.find("\r\n", line) - line - name.size());
    const std::size_t field = fields.find("," + counter + "=");
    if (field == std::string::npos) return 0;
    return std::stoull(fields.substr(field + counter.size() + 2));
  }

  std::string output() const {
    std::ifstream in(dir_.file("redis.log"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

 private:
  // Starts the process and waits (up to 5 s) until it answers; false, with
  // the process reaped, when it exits first (its port taken, say).
  bool try_start() {
    // Built before fork(): the test process may run threads (a store's), and
    // the child of a threaded process may only call async-signal-safe
    // functions until it execs.
    std::vector<std::string> args{kRedisServerBinary,
                                  "--port",
                                  std::to_string(port_),
                                  "--bind",
                                  "127.0.0.1",
                                  "--save",
                                  "",
                                  "--appendonly",
                                  "no",
                                  "--daemonize",
                                  "no",
                                  "--protected-mode",
                                  "no",
                                  "--dir",
                                  dir_.file(""),
                                  "--logfile",
                                  ""};
    if (options_.debug_command) {
      args.push_back("--enable-debug-command");
      args.push_back("yes");
    }
    if (!options_.password.empty()) {
      args.push_back("--requirepass");
      args.push_back(options_.password);
    }
    if (const auto& tls = options_.tls) {
      for (const auto& a :
           {std::string("--tls-port"), std::to_string(tls_port_), std::string("--tls-cert-file"),
            tls->cert_file, std::string("--tls-key-file"), tls->key_file,
            std::string("--tls-ca-cert-file"), tls->ca_file, std::string("--tls-auth-clients"),
            std::string(tls->auth_clients ? "yes" : "no")})
        args.push_back(a);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log_path = dir_.file("redis.log");

    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // even when a timeout kills the test
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0) std::_Exit(126);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
      ::execve(argv[0], argv.data(), environ);
      std::_Exit(127);
    }

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      if (answers()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    return false;
  }

  // PING answered, by PONG or (with a password) NOAUTH: it is serving.
  bool answers() const {
    try {
      const std::string reply = redis_command(port_, {"PING"});
      return reply == "+PONG" || reply.starts_with("-NOAUTH");
    } catch (const std::runtime_error&) {
      return false;
    }
  }

  RedisServerOptions options_;
  TempDir dir_{"lmwarden-redis"};
  std::uint16_t port_ = 0;
  std::uint16_t tls_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace lmwarden::testing
