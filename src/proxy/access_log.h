// The access log (`access_log` in the configuration): one JSON object per line
// for each request to the inference API, written when its reply has ended:
// who asked, for which model and conversation, where the warden sent it and
// why, what the client got, how long it took and what the engine reported of
// its tokens. Never a prompt's text: a conversation appears as the short hash
// the other logs use.
//
// The I/O thread that ends a request formats its line and appends it to a
// buffer; a thread of the log's own writes the buffer to the file (opened
// with O_APPEND) when it holds 64 KiB, and at least once a second, so a line
// reaches the file within about a second and no I/O thread ever waits on the
// disk. As nginx's `access_log … buffer= flush=`: one write per 64 KiB of
// lines, and the writer woken once per 64 KiB, not per line. When the disk
// falls 4 MiB behind, further lines are dropped until it catches up; those,
// and the lines of a write that fails (a full disk), are counted
// (lmwarden_access_log_dropped_total), and a failed write is logged.
// The file is opened at start and again at each reload, so a rotated file
// (moved, then SIGHUP) is followed; reopen() opens it again without a
// reload (SIGUSR1, as nginx reopens its logs).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "telemetry/usage_tap.h"

namespace lmwarden::proxy {

// What one request's line says; filled in as the request goes.
struct AccessRecord {
  // Its whole request was read; for an error the server sent before that
  // (400, 408, 413, 431), when the request began.
  std::chrono::steady_clock::time_point received;
  std::string_view request_id;  // X-Request-Id, the client's or the one added; empty: none
  std::string_view model;                     // empty: none matched
  std::optional<std::uint64_t> conversation;  // the conversation's hash, when it has one
  std::string_view route;                     // new, sticky, …; empty: not routed
  int replica = -1;                           // the last replica tried; -1: none, or no rank
  int rank = -1;                              // that replica's rank on its server; -1 likewise
  std::string_view server;                    // its server's configured URL; empty: none tried
  int attempts = 0;                           // replicas tried
  unsigned status = 0;                        // the status the client got; 0: none (it left first)
  std::string_view outcome = "refused";       // relayed, cut_short, client_gone, failed, refused
  std::string error;                          // the failure's kind, when there was one
  std::optional<std::chrono::steady_clock::time_point> first_byte;  // of the reply's body
  std::optional<telemetry::RequestUsage> usage;                     // as the engine reported it
  std::uint64_t body_bytes = 0;  // the request's body, as the client sent it
  // What the client's socket took of the reply, header and framing included.
  std::uint64_t sent_bytes = 0;
};

class AccessLog {
 public:
  // Opens `path` for appending; nullptr (and an error in the process log,
  // and in *failure if given) when it cannot be opened.
  static std::shared_ptr<AccessLog> open(const std::string& path, std::string* failure = nullptr);
  ~AccessLog();  // writes what is buffered
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // Formats the line of a request (its `id`, client address, method, target
  // and User-Agent, empty when it sent none) and buffers it.
  void write(std::uint64_t id, std::string_view client, std::string_view method,
             std::string_view target, std::string_view user_agent, const AccessRecord& record);

  // Writes what is buffered to the file open now, then opens the path again
  // (a rotated file's new one) and writes there from then on; a path that
  // does not open is logged, and the file open now kept. Done by the log's
  // own thread, soon after the call.
  void reopen();

  // Lines lost, dropped while the disk was behind or to failed writes: by
  // every log of the process (`current`'s and those closed).
  static std::uint64_t dropped_total(const AccessLog* current);

 private:
  static constexpr std::size_t kFlushBytes = 64 * 1024;
  static constexpr std::size_t kMaxBufferedBytes = 4 * 1024 * 1024;

  AccessLog(int fd, std::string path);
  void run_flusher();
  bool write_out(std::string_view bytes);  // false: the write failed
  void open_again();                       // the flusher's part of reopen()

  int fd_;  // the flusher's alone once it runs
  const std::string path_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the flusher: 64 KiB buffered, or stop
  std::string buffer_;
  std::size_t buffered_lines_ = 0;
  std::uint64_t dropped_ = 0;
  bool stopping_ = false;
  bool reopening_ = false;  // reopen() asked
  std::thread flusher_;  // started once the rest is set up
};

}  // namespace lmwarden::proxy
