// The warden's log lines, as a test reads them: a sink added to spdlog's
// default logger for the capture's life (the last 64 lines).
#pragma once

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lmwarden::testing {

class CapturedLog {
 public:
  CapturedLog() { spdlog::default_logger()->sinks().push_back(sink_); }
  ~CapturedLog() { std::erase(spdlog::default_logger()->sinks(), sink_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  std::vector<std::string> containing(std::string_view what) const {
    std::vector<std::string> lines;
    for (auto& line : sink_->last_formatted())
      if (line.find(what) != std::string::npos) lines.push_back(std::move(line));
    return lines;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_ =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
};

}  // namespace lmwarden::testing
