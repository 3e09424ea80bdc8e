#include "proxy/access_log.h"

#include <fmt/format.h>
#include <spdlog/async.h>
#include <spdlog/async_logger.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/hash.h"

namespace lmwarden::proxy {

namespace {

constexpr std::size_t kQueueLines = 8192;

// Lines dropped by the logs already closed (a reload opens a new one).
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

}  // namespace

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

std::shared_ptr<AccessLog> AccessLog::open(const std::string& path) {
  try {
    auto pool = std::make_shared<spdlog::details::thread_pool>(kQueueLines, 1);
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
    auto logger = std::make_shared<spdlog::async_logger>(
        "access", std::move(sink), pool, spdlog::async_overflow_policy::overrun_oldest);
    logger->set_pattern("%v");
    logger->set_level(spdlog::level::info);
    logger->flush_on(spdlog::level::info);
    return std::shared_ptr<AccessLog>(new AccessLog(std::move(pool), std::move(logger)));
  } catch (const spdlog::spdlog_ex& e) {
    spdlog::error("access log {} not opened, so not written: {}", path, e.what());
    return nullptr;
  }
}

AccessLog::AccessLog(std::shared_ptr<spdlog::details::thread_pool> pool,
                     std::shared_ptr<spdlog::logger> logger)
    : pool_(std::move(pool)), logger_(std::move(logger)) {}

AccessLog::~AccessLog() {
  // The queued lines are written before the pool's thread ends.
  logger_->flush();
  logger_.reset();
  closed_dropped.fetch_add(pool_->overrun_counter(), std::memory_order_relaxed);
  pool_.reset();  // joins the pool's thread once its queue is written
}

void AccessLog::write(std::uint64_t id, std::string_view client, std::string_view method,
                      std::string_view target, const AccessRecord& record) {
  logger_->info(access_line(id, client, method, target, record, std::chrono::system_clock::now(),
                            std::chrono::steady_clock::now()));
}

std::uint64_t AccessLog::dropped() const {
  return pool_->overrun_counter();
}

std::uint64_t AccessLog::dropped_total(const AccessLog* current) {
  return closed_dropped.load(std::memory_order_relaxed) + (current ? current->dropped() : 0);
}

}  // namespace lmwarden::proxy
