#include "proxy/access_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/hash.h"

namespace lmwarden::proxy {

namespace {

// Lines lost by the logs already closed (a reload opens a new one).
std::atomic<std::uint64_t> closed_dropped{0};

double millis(std::chrono::steady_clock::duration d) {
  return std::chrono::round<std::chrono::microseconds>(d).count() / 1000.0;
}

// RFC 3339 in UTC to the millisecond, as log shippers parse it.
std::string utc(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000 - (ms % 1000 < 0 ? 1 : 0));
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ((ms % 1000) + 1000) % 1000);
}

// The line as written, without its newline.
std::string access_line(std::uint64_t id, std::string_view client, std::string_view method,
                        std::string_view target, const AccessRecord& r,
                        std::chrono::system_clock::time_point ended,
                        std::chrono::steady_clock::time_point ended_steady) {
  using json = nlohmann::ordered_json;  // fields in the documented order
  auto text_or_null = [](std::string_view s) { return s.empty() ? json(nullptr) : json(s); };
  json line = {
      {"time", utc(ended)},
      {"id", id},
      {"client", client},
      {"method", method},
      {"target", target},
      {"model", text_or_null(r.model)},
      {"conversation", r.conversation ? json(short_hash(*r.conversation)) : json(nullptr)},
      {"route", text_or_null(r.route)},
      {"replica", r.replica >= 0 ? json(r.replica) : json(nullptr)},
      {"attempts", r.attempts},
      {"status", r.status ? json(r.status) : json(nullptr)},
      {"outcome", r.outcome},
      {"error", text_or_null(r.error)},
      {"first_byte_ms",
       r.first_byte ? json(millis(*r.first_byte - r.received_steady)) : json(nullptr)},
      {"duration_ms", millis(ended_steady - r.received_steady)},
  };
  if (r.usage && r.usage->cache_measured) {
    line["prompt_tokens"] = r.usage->prompt_tokens;
    line["cached_tokens"] = r.usage->cached_tokens;
    line["completion_tokens"] = r.usage->completion_tokens;
  } else {
    line["prompt_tokens"] = line["cached_tokens"] = line["completion_tokens"] = nullptr;
  }
  // A target need not be UTF-8: replaced, not refused.
  return line.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::shared_ptr<AccessLog> AccessLog::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    spdlog::error("access log {} not opened, so not written: {}", path, std::strerror(errno));
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
  flusher_.join();  // its last round wrote what was buffered
  closed_dropped.fetch_add(dropped_, std::memory_order_relaxed);
  ::close(fd_);
}

void AccessLog::write(std::uint64_t id, std::string_view client, std::string_view method,
                      std::string_view target, const AccessRecord& record) {
  std::string line =
      access_line(id, client, method, target, record, std::chrono::system_clock::now(),
                  std::chrono::steady_clock::now());
  line += '\n';
  bool wake = false;
  {
    std::lock_guard lock{mutex_};
    if (buffer_.size() + line.size() > kMaxBufferedBytes) {
      ++dropped_;  // the disk is that far behind: the line is lost, and counted
      return;
    }
    buffer_ += line;
    ++buffered_lines_;
    wake = buffer_.size() >= kFlushBytes && buffer_.size() - line.size() < kFlushBytes;
  }
  if (wake) wake_.notify_one();  // once per kFlushBytes, not per line
}

void AccessLog::run_flusher() {
  std::string writing;
  std::unique_lock lock{mutex_};
  for (;;) {
    wake_.wait_for(lock, std::chrono::seconds(1),
                   [this] { return stopping_ || buffer_.size() >= kFlushBytes; });
    const bool last = stopping_;
    writing.swap(buffer_);
    const std::size_t lines = std::exchange(buffered_lines_, 0);
    lock.unlock();
    const std::size_t lost = write_out(writing) ? 0 : lines;
    writing.clear();
    lock.lock();
    dropped_ += lost;
    if (last) return;
  }
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
