#include "app/journal.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>

namespace lmwarden::app {

namespace {

bool stream_is_journal(int fd) {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  unsigned long long device = 0;
  unsigned long long inode = 0;
  char end = 0;
  if (std::sscanf(stream, "%llu:%llu%c", &device, &inode, &end) != 2) return false;
  struct stat st {};
  return ::fstat(fd, &st) == 0 && st.st_dev == device && st.st_ino == inode;
}

// A log line's level as its priority prefix: `<4>` for a warning.
class SyslogPriority final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    // trace, debug, info, warn, err, critical, off
    static constexpr std::array<char, 7> kPriority{'7', '7', '6', '4', '3', '2', '6'};
    const std::array<char, 3> prefix{'<', kPriority[static_cast<std::size_t>(msg.level)], '>'};
    dest.append(prefix.data(), prefix.data() + prefix.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriority>();
  }
};

// Read once per stream: the descriptors do not change hands.
bool stdout_is_journal() {
  static const bool out = stream_is_journal(STDOUT_FILENO);
  return out;
}
bool stderr_is_journal() {
  static const bool err = stream_is_journal(STDERR_FILENO);
  return err;
}

}  // namespace

void set_log_format() {
  if (stdout_is_journal()) {
    // The journal stamps each line itself, to the microsecond.
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<SyslogPriority>('*').set_pattern("%*[%l] %v");
    spdlog::set_formatter(std::move(formatter));
  } else {
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e %z] [%l] %v");
  }
}

void say_error(std::string_view text) {
  const char* prefix = stderr_is_journal() ? "<3>" : "";
  std::string out;
  std::string_view rest = text;
  bool first = true;
  while (!rest.empty() || first) {
    const std::size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    out.append(prefix).append(first ? "lmwarden: " : "").append(line).push_back('\n');
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    first = false;
  }
  std::fputs(out.c_str(), stderr);
}

void say_info(std::string_view text) {
  std::printf("%s%.*s\n", stdout_is_journal() ? "<6>" : "", static_cast<int>(text.size()),
              text.data());
  std::fflush(stdout);
}

}  // namespace lmwarden::app
