// The access log (`access_log` in the configuration): one JSON object per line
// for each request to the inference API, written when its reply has ended:
// who asked, for which model and conversation, where the warden sent it and
// why, what the client got, how long it took and what the engine reported of
// its tokens. Never a prompt's text: a conversation appears as the short hash
// the other logs use.
//
// The I/O thread formats the line; a thread of the log's own appends it to
// the file (flushed per line), so that a slow disk never stalls a reply. Its
// queue holds 8,192 lines; when the disk falls that far behind, the oldest
// waiting lines are dropped and counted (lmwarden_access_log_dropped_total).
// The file is opened for appending at start and again at each reload, so a
// rotated file (logrotate's `create`, then SIGHUP) is followed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "telemetry/usage_tap.h"

namespace spdlog {
class logger;
namespace details {
class thread_pool;
}
}  // namespace spdlog

namespace lmwarden::proxy {

// What one request's line says; filled in as the request goes.
struct AccessRecord {
  std::chrono::system_clock::time_point received;  // its whole request was read
  std::chrono::steady_clock::time_point received_steady;
  std::string_view model;                     // empty: none matched
  std::optional<std::uint64_t> conversation;  // the conversation's hash, when it has one
  std::string_view route;                     // new, sticky, …; empty: not routed
  int replica = -1;                           // the last replica tried; -1: none
  int attempts = 0;                           // replicas tried
  unsigned status = 0;                        // the status the client got; 0: none (it left first)
  std::string_view outcome = "refused";       // relayed, cut_short, client_gone, failed, refused
  std::string error;                          // the failure's kind, when there was one
  std::optional<std::chrono::steady_clock::time_point> first_byte;  // of the reply's body
  std::optional<telemetry::RequestUsage> usage;                     // as the engine reported it
};

class AccessLog {
 public:
  // Opens `path` for appending; nullptr (and an error in the process log)
  // when it cannot be opened.
  static std::shared_ptr<AccessLog> open(const std::string& path);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // Formats the line of a request (its `id`, client address, method and
  // target) and queues it.
  void write(std::uint64_t id, std::string_view client, std::string_view method,
             std::string_view target, const AccessRecord& record);

  // Lines dropped because the queue was full: by this log since it was
  // opened, and by every log of the process (`current`'s and those closed).
  std::uint64_t dropped() const;
  static std::uint64_t dropped_total(const AccessLog* current);

 private:
  AccessLog(std::shared_ptr<spdlog::details::thread_pool> pool,
            std::shared_ptr<spdlog::logger> logger);

  std::shared_ptr<spdlog::details::thread_pool> pool_;
  std::shared_ptr<spdlog::logger> logger_;
};

// The line as written, without its newline (exposed for tests).
std::string access_line(std::uint64_t id, std::string_view client, std::string_view method,
                        std::string_view target, const AccessRecord& record,
                        std::chrono::system_clock::time_point ended,
                        std::chrono::steady_clock::time_point ended_steady);

}  // namespace lmwarden::proxy
