#include "proxy/access_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>
#include <utility>

#include "common/hash.h"
#include "common/json_dump.h"

namespace lmwarden::proxy {

namespace {

// Lines lost by the logs already closed (a reload opens a new one).
std::atomic<std::uint64_t> closed_dropped{0};

double millis(std::chrono::steady_clock::duration d) {
  return std::chrono::round<std::chrono::microseconds>(d).count() / 1000.0;
}

// A line is formatted straight into a buffer, field by field, in the
// documented order: about a tenth of what building it as a JSON object and
// serialising that cost (bench-micro's access_log/*).
class LineWriter {
 public:
  explicit LineWriter(std::string& out) : out_(out) {}

  // `"name":`, with the comma before every field but the first.
  LineWriter& key(std::string_view name) {
    raw(first_ ? "{\"" : ",\"");
    first_ = false;
    raw(name);
    raw("\":");
    return *this;
  }
  void raw(std::string_view s) { out_ += s; }
  void null() { raw("null"); }
  template <typename T>
  void number(T n) {
    if constexpr (std::is_integral_v<T>) {
      const fmt::format_int digits(n);  // no format string to read
      raw({digits.data(), digits.size()});
    } else {
      char digits[32];
      raw({digits, fmt::format_to_n(digits, sizeof digits, "{}", n).out});
    }
  }
  // Printable ASCII other than '"' and '\' is copied as it is, which is every
  // field of nearly every line; anything else goes through nlohmann's
  // serialiser, which escapes it and replaces bytes that are not UTF-8 (a
  // target need not be) with U+FFFD rather than refuse the line.
  void text(std::string_view s) {
    const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return u >= 0x20 && u < 0x7f && u != '"' && u != '\\';
    });
    if (!plain) {
      raw(json_dump(nlohmann::json(s)));
      return;
    }
    out_ += '"';
    out_ += s;
    out_ += '"';
  }
  void text_or_null(std::string_view s) { s.empty() ? null() : text(s); }
  template <typename T>
  void number_or_null(const std::optional<T>& n) {
    n ? number(*n) : null();
  }
  // RFC 3339 in UTC to the millisecond, as log shippers parse it. The date
  // and time of day are formatted once a second per thread.
  void utc(std::chrono::system_clock::time_point t) {
    thread_local std::time_t cached_second = -1;
    thread_local std::array<char, 19> cached{};  // 2026-12-03T11:40:02
    const auto ms = std::chrono::floor<std::chrono::milliseconds>(t.time_since_epoch()).count();
    const auto milli = static_cast<int>(((ms % 1000) + 1000) % 1000);
    const auto second = static_cast<std::time_t>((ms - milli) / 1000);
    if (second != cached_second) {
      std::tm tm{};
      ::gmtime_r(&second, &tm);
      fmt::format_to_n(cached.data(), cached.size(), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                       tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                       tm.tm_sec);
      cached_second = second;
    }
    out_ += '"';
    raw({cached.data(), cached.size()});
    const char fraction[] = {'.',
                             static_cast<char>('0' + milli / 100),
                             static_cast<char>('0' + milli / 10 % 10),
                             static_cast<char>('0' + milli % 10),
                             'Z',
                             '"'};
    raw({fraction, sizeof fraction});
  }
  void end() { raw("}\n"); }

 private:
  std::string& out_;
  bool first_ = true;
};

// The line as written, its newline included.
void format_line(std::string& out, std::uint64_t id, std::string_view client,
                 std::string_view method, std::string_view target, std::string_view user_agent,
                 const AccessRecord& r, std::chrono::system_clock::time_point ended,
                 std::chrono::steady_clock::time_point ended_steady) {
  auto when = [](bool present, auto value) {
    return present ? std::optional(value) : std::nullopt;
  };
  LineWriter line{out};
  line.key("time").utc(ended);
  line.key("id").number(id);
  line.key("request_id").text_or_null(r.request_id);
  line.key("client").text(client);
  line.key("method").text(method);
  line.key("target").text(target);
  line.key("user_agent").text_or_null(user_agent);
  line.key("model").text_or_null(r.model);
  line.key("conversation").text_or_null(r.conversation ? short_hash(*r.conversation) : "");
  line.key("route").text_or_null(r.route);
  line.key("replica").number_or_null(when(r.replica >= 0, r.replica));
  line.key("server").text_or_null(r.server);
  line.key("rank").number_or_null(when(r.rank >= 0, r.rank));
  line.key("attempts").number(r.attempts);
  line.key("status").number_or_null(when(r.status != 0, r.status));
  line.key("outcome").text(r.outcome);
  line.key("error").text_or_null(r.error);
  line.key("first_byte_ms")
      .number_or_null(r.first_byte ? std::optional(millis(*r.first_byte - r.received))
                                   : std::nullopt);
  line.key("duration_ms").number(millis(ended_steady - r.received));
  line.key("body_bytes").number(r.body_bytes);
  line.key("sent_bytes").number(r.sent_bytes);
  const bool measured = r.usage && r.usage->cache_measured;
  const telemetry::RequestUsage& usage = measured ? *r.usage : telemetry::RequestUsage{};
  line.key("prompt_tokens").number_or_null(when(measured, usage.prompt_tokens));
  line.key("cached_tokens").number_or_null(when(measured, usage.cached_tokens));
  line.key("completion_tokens").number_or_null(when(measured, usage.completion_tokens));
  line.end();
}

}  // namespace

std::shared_ptr<AccessLog> AccessLog::open(const std::string& path, std::string* failure) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    const std::string why = fmt::format("access log {} not opened: {}", path, std::strerror(errno));
    spdlog::error("{}, so not written", why);
    if (failure) *failure = why;
    return nullptr;
  }
  spdlog::info("access log: appending to {}", path);
  return std::shared_ptr<AccessLog>(new AccessLog(fd, path));
}

AccessLog::AccessLog(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
  buffer_.reserve(kFlushBytes + 1024);
  // Created from the thread that opened the file, so it shares that thread's
  // descriptor table (the I/O threads have tables of their own).
  flusher_ = std::thread([this] { run_flusher(); });
}

AccessLog::~AccessLog() {
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  wake_.notify_one();
  flusher_.join();  // its last round wrote what was buffered, and closed the file
  closed_dropped.fetch_add(dropped_, std::memory_order_relaxed);
}

void AccessLog::write(std::uint64_t id, std::string_view client, std::string_view method,
                      std::string_view target, std::string_view user_agent,
                      const AccessRecord& record) {
  thread_local std::string line;  // its capacity kept for the thread's next line
  line.clear();
  format_line(line, id, client, method, target, user_agent, record,
              std::chrono::system_clock::now(), std::chrono::steady_clock::now());
  bool wake = false;
  {
    std::lock_guard lock{mutex_};
    if (buffer_.size() + line.size() > kMaxBufferedBytes) {
      ++dropped_;  // the disk is that far behind: the line is lost, and counted
      return;
    }
    const std::size_t before = buffer_.size();
    buffer_.append(line.data(), line.size());
    ++buffered_lines_;
    wake = buffer_.size() >= kFlushBytes && before < kFlushBytes;
  }
  if (wake) wake_.notify_one();  // once per kFlushBytes, not per line
}

void AccessLog::run_flusher() {
  std::string writing;
  std::unique_lock lock{mutex_};
  for (;;) {
    wake_.wait_for(lock, std::chrono::seconds(1),
                   [this] { return stopping_ || reopening_ || buffer_.size() >= kFlushBytes; });
    const bool last = stopping_;
    const bool reopen = std::exchange(reopening_, false);
    writing.swap(buffer_);
    const std::size_t lines = std::exchange(buffered_lines_, 0);
    lock.unlock();
    const std::size_t lost = write_out(writing) ? 0 : lines;
    writing.clear();
    if (reopen && !last) open_again();
    lock.lock();
    dropped_ += lost;
    if (last) {
      // Closed here, in the descriptor table that opened it: the log is
      // destroyed by whichever thread lets go of it last, often an I/O
      // thread (a reload's old log, when its last request ends), whose
      // table of its own may hold anything under this number (its listening
      // socket, say).
      ::close(fd_);
      return;
    }
  }
}

void AccessLog::reopen() {
  {
    std::lock_guard lock{mutex_};
    reopening_ = true;
  }
  wake_.notify_one();
}

// On the flusher, whose descriptor table opened the file (the constructor's
// note): the new one is opened, and the old one closed, in that table.
void AccessLog::open_again() {
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    spdlog::error("access log {} not reopened: {}; still writing to the file open before", path_,
                  std::strerror(errno));
    return;
  }
  ::close(std::exchange(fd_, fd));
  spdlog::info("access log: reopened {}", path_);
}

bool AccessLog::write_out(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      spdlog::error("access log {}: write failed, {} bytes of lines lost: {}", path_, bytes.size(),
                    n < 0 ? std::strerror(errno) : "no progress");
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::uint64_t AccessLog::dropped_total(const AccessLog* current) {
  if (!current) return closed_dropped.load(std::memory_order_relaxed);
  std::lock_guard lock{current->mutex_};
  return closed_dropped.load(std::memory_order_relaxed) + current->dropped_;
}

}  // namespace lmwarden::proxy
