#include "proxy/home_saver.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "proxy/warden.h"

namespace lmwarden::proxy {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using std::chrono::system_clock;

std::int64_t unix_ms(system_clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}

// Idle times are capped here (twice session_ttl's largest), so that no
// arithmetic on a hand-edited file's figure overflows.
constexpr std::int64_t kLongestIdleMs = 2LL * 87'600 * 3'600'000;

// The homes a model takes from the file: those of each entry naming it (by
// its name or an alias; a hand-edited file may name it twice).
struct Taking {
  ModelState* model;
  std::vector<std::string> names;  // as the file names it
  std::vector<core::Router::KeptHome> conversations;
  std::vector<core::Router::KeptHome> responses;
  std::size_t repeated = 0;  // keys listed more than once: taken once, at their latest use
};

// Each key once (its latest use), least recently used first, as
// Router::take_homes wants them. Returns how many repeats were dropped.
std::size_t settle_order(std::vector<core::Router::KeptHome>& homes) {
  using Home = core::Router::KeptHome;
  std::ranges::sort(homes, [](const Home& a, const Home& b) {
    return a.key < b.key || (a.key == b.key && a.last_seen > b.last_seen);
  });
  const auto repeats = std::ranges::unique(homes, {}, &Home::key);
  const auto dropped = static_cast<std::size_t>(repeats.size());
  homes.erase(repeats.begin(), repeats.end());
  std::ranges::stable_sort(homes, {}, &Home::last_seen);
  return dropped;
}

// What one model took back, as its log line says it.
std::string restored_line(const Taking& t, const core::Router::Carried& c, bool affinity) {
  const std::string& name = t.model->config.name;
  std::string what = "model " + name;
  if (t.names != std::vector<std::string>{name})
    what += fmt::format(" (named {} in the file)", fmt::join(t.names, " and "));
  if (!affinity)
    return fmt::format("{}: affinity is off, so its {} saved conversations are not used", what,
                       t.conversations.size());
  std::string line = fmt::format(
      "{}: {} conversations and {} stored responses are back on their servers and ranks", what,
      c.conversations, c.responses);
  if (c.left > 0 || c.responses_left > 0)
    line += fmt::format(
        "; {} conversations on servers or ranks it no longer has are placed again at their next "
        "request, and {} stored responses there are forgotten",
        c.left, c.responses_left);
  if (c.idle > 0) line += fmt::format("; {} idle past session_ttl are forgotten", c.idle);
  if (c.over_capacity > 0)
    line += fmt::format("; {} over max_conversations are forgotten (the least recently used)",
                        c.over_capacity);
  if (t.repeated > 0)
    line +=
        fmt::format("; {} listed more than once were taken once, at their latest use", t.repeated);
  return line;
}

// The lock that keeps a file to one warden: flock() on PATH.lock, beside
// the file, held while the configuration names it and let go by the kernel
// when the process ends, however it ends. The holder writes its process id
// there, for the message another warden gives. The lock file stays: removing
// it would let a third process lock a new one while the first still holds
// the old.
struct FileLock {
  int fd = -1;
  std::string reason;  // why it was not taken, when fd < 0
};

FileLock lock_file(const std::string& path, const std::string& file) {
  const std::string lock = file + ".lock";
  // Not through a link: the id written there would land in another file.
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0 && errno == ELOOP)
    return {.reason = fmt::format(
                "{}, the lock beside {}, is a symbolic link: remove it (the warden makes its lock "
                "itself)",
                lock, path)};
  if (fd < 0 && errno == EISDIR)
    return {.reason = fmt::format("{}, the lock beside {}, is not a file: remove it", lock, path)};
  if (fd < 0)
    return {.reason = fmt::format("cannot open {}, the lock beside {}: {}", lock, path,
                                  std::strerror(errno))};
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char text[24] = {};
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    ::close(fd);
    if (error != EWOULDBLOCK)
      return {.reason = fmt::format("cannot lock {}: {}", lock, std::strerror(error))};
    std::string_view holder{text, static_cast<std::size_t>(std::max<ssize_t>(n, 0))};
    holder = holder.substr(0, holder.find_first_not_of("0123456789"));
    return {.reason = fmt::format(
                "{} is kept by another warden ({}, which holds {}): give each warden a file of "
                "its own",
                path, holder.empty() ? std::string("a process") : fmt::format("process {}", holder),
                lock)};
  }
  // Only for another warden's message: a failure here changes nothing else.
  const std::string id = fmt::format("{}\n", ::getpid());
  [[maybe_unused]] const bool noted =
      ::ftruncate(fd, 0) == 0 && ::pwrite(fd, id.data(), id.size(), 0) > 0;
  return {.fd = fd};
}

// The files PATH.tmp.XXXXXX beside `file` that writes cut short by a crash
// left (replace_file's names), removed; with the lock held no write of
// another warden is under way. Returns their names.
std::vector<std::string> remove_cut_writes(const std::string& file) {
  namespace fs = std::filesystem;
  const fs::path path{file};
  const std::string prefix = path.filename().string() + ".tmp.";
  std::vector<std::string> removed;
  std::error_code error;
  for (fs::directory_iterator it{path.parent_path(), error}, end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() != prefix.size() + 6 || !name.starts_with(prefix)) continue;
    std::error_code kind_error;
    if (!it->is_regular_file(kind_error) || it->is_symlink(kind_error)) continue;
    if (std::error_code gone; fs::remove(it->path(), gone)) removed.push_back(name);
  }
  std::ranges::sort(removed);
  return removed;
}

}  // namespace

SavedHomes snapshot_homes(const ModelSet& set, system_clock::time_point wall,
                          steady_clock::time_point now) {
  SavedHomes homes;
  homes.saved_at_unix_ms = unix_ms(wall);
  for (const auto& m : set.models) {
    SavedModel saved;
    saved.name = m->config.name;
    saved.servers = m->routing->servers;
    const auto ttl = std::chrono::duration_cast<steady_clock::duration>(m->config.session_ttl);
    const auto add_to = [&](std::vector<SavedHome>& list) {
      return [&](std::uint64_t key, int replica, core::TimePoint last_seen) {
        if (now - last_seen > ttl) return;
        const auto idle = std::chrono::duration_cast<milliseconds>(now - last_seen).count();
        list.push_back({.key = key,
                        .server = m->router.replica_backend(replica),
                        .rank = m->router.replica_rank(replica),
                        .idle_ms = std::max<std::int64_t>(idle, 0)});
      };
    };
    {
      std::lock_guard lock{m->mutex};
      saved.conversations.reserve(m->router.conversations());
      saved.responses.reserve(m->router.stored_responses());
      m->router.for_each_conversation(add_to(saved.conversations));
      m->router.for_each_stored_response(add_to(saved.responses));
    }
    homes.models.push_back(std::move(saved));
  }
  return homes;
}

std::vector<std::string> restore_homes(const SavedHomes& homes, const ModelSet& set,
                                       system_clock::time_point wall,
                                       steady_clock::time_point now) {
  std::vector<std::string> lines;
  // The time since the file was written counts as idle (none when the
  // system clock has gone back meanwhile).
  const std::int64_t since_saved =
      std::clamp<std::int64_t>(unix_ms(wall) - homes.saved_at_unix_ms, 0, kLongestIdleMs);
  std::vector<Taking> takings;
  std::vector<std::string> forgotten;  // said after the models that took homes
  for (const SavedModel& saved : homes.models) {
    ModelState* m = set.find(saved.name);
    if (!m) {
      forgotten.push_back(fmt::format(
          "model {} is not configured: its {} conversations and {} stored responses are forgotten",
          saved.name, saved.conversations.size(), saved.responses.size()));
      continue;
    }
    auto t = std::ranges::find(takings, m, &Taking::model);
    if (t == takings.end()) t = takings.insert(takings.end(), Taking{.model = m});
    t->names.push_back(saved.name);
    // Each saved server's index in the model now; -1 for one it no longer
    // has. The router's layout is fixed for its life: no lock needed.
    std::vector<int> backend_of;
    for (const std::string& server : saved.servers)
      backend_of.push_back(server_index(m->routing->servers, server));
    const auto add = [&](const std::vector<SavedHome>& from,
                         std::vector<core::Router::KeptHome>& to) {
      for (const SavedHome& h : from) {
        const std::int64_t idle = std::min(h.idle_ms, kLongestIdleMs) + since_saved;
        to.push_back({.key = h.key,
                      .replica = m->router.replica_at(
                          backend_of[static_cast<std::size_t>(h.server)], h.rank),
                      .last_seen = now - milliseconds{idle}});
      }
    };
    add(saved.conversations, t->conversations);
    add(saved.responses, t->responses);
  }
  for (Taking& t : takings) {
    t.repeated = settle_order(t.conversations) + settle_order(t.responses);
    std::lock_guard lock{t.model->mutex};
    const core::Router::Carried c = t.model->router.take_homes(t.conversations, t.responses, now);
    lines.push_back(restored_line(t, c, t.model->router.affinity()));
  }
  lines.insert(lines.end(), forgotten.begin(), forgotten.end());
  return lines;
}

std::string replace_file(const std::string& path, std::string_view text) {
  // A name of its own beside the file (O_EXCL): nothing else's is taken.
  std::string temporary = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(temporary.data(), O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot create a file beside {}: {}", path, std::strerror(errno));
  const auto fail = [&](std::string_view what) {
    // Named by the file it was for: the same failure reads the same each time.
    const std::string reason =
        fmt::format("cannot {} a new file beside {}: {}", what, path, std::strerror(errno));
    ::close(fd);
    ::unlink(temporary.c_str());
    return reason;
  };
  if (::fchmod(fd, 0640) != 0) return fail("set the mode of");
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write");
    done += static_cast<std::size_t>(n);
  }
  // On disk before it takes the name: a crash leaves the old file or the
  // new one, never an empty one.
  if (::fsync(fd) != 0) return fail("sync");
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason =
        fmt::format("cannot rename a new file over {}: {}", path, std::strerror(errno));
    ::unlink(temporary.c_str());
    return reason;
  }
  // The rename itself on disk (best effort: some file systems refuse it).
  const std::string directory = path.substr(0, std::max<std::size_t>(path.rfind('/'), 1));
  if (const int dir = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return {};
}

std::string file_behind(const std::string& path) {
  namespace fs = std::filesystem;
  // Links followed by hand first: weakly_canonical leaves a link to a file
  // not there yet (the first write's) as it is.
  fs::path file = path;
  std::error_code error;
  for (int links = 0; links < 40 && fs::is_symlink(fs::symlink_status(file, error)); ++links) {
    const fs::path target = fs::read_symlink(file, error);
    if (error) break;
    file = target.is_absolute() ? target : file.parent_path() / target;
  }
  const auto resolved = fs::weakly_canonical(file, error);
  return error ? file.string() : resolved.string();
}

std::optional<int> lock_holder(const std::string& path) {
  struct stat lock {};
  if (::lstat((file_behind(path) + ".lock").c_str(), &lock) != 0 || !S_ISREG(lock.st_mode))
    return std::nullopt;
  // Each lock the kernel holds, one a line, e.g.
  //   "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF"
  // (the file as MAJOR:MINOR:INODE, the first two in hex); a waiter's line
  // starts "1: -> FLOCK". Read, not taken: a start under way is not held up.
  std::ifstream locks("/proc/locks");
  const std::string file = fmt::format("{:02x}:{:02x}:{}", major(lock.st_dev), minor(lock.st_dev),
                                       static_cast<unsigned long>(lock.st_ino));
  for (std::string line; std::getline(locks, line);) {
    std::istringstream fields(line);
    std::string number, kind, mode, access, id;
    long pid = 0;
    if (!(fields >> number >> kind) || kind != "FLOCK") continue;
    if (fields >> mode >> access >> pid >> id && id == file) return static_cast<int>(pid);
  }
  return std::nullopt;
}

bool restore_saved_homes(const ModelSet& set) {
  if (!set.config.saved_homes) return true;
  const std::string& path = set.config.saved_homes->path;
  const std::string file = file_behind(path);
  std::string text;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  bool read = fd >= 0;
  for (char chunk[65536]; read;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      read = n == 0;
      break;
    }
    text.append(chunk, static_cast<std::size_t>(n));
  }
  const int read_error = errno;
  if (fd >= 0) ::close(fd);
  if (!read && read_error == ENOENT) {
    spdlog::info(
        "saved homes: {} is not there yet (a first start); homes are written there every {} s "
        "and at shutdown",
        path, set.config.saved_homes->interval.count() / 1000.0);
    return true;
  }
  const auto homes = read ? parse_saved_homes(text)
                          : Result<SavedHomes, std::string>{unexpected(
                                fmt::format("cannot read it: {}", std::strerror(read_error)))};
  if (!homes) {
    // Kept, under another name, for whoever wants to look: an older or
    // newer warden's file, or one written by hand, is not overwritten.
    const std::string aside = file + ".unusable";
    if (::rename(file.c_str(), aside.c_str()) == 0) {
      spdlog::warn("saved homes: {} is not usable ({}); moved to {}, and starting without it", path,
                   homes.error(), aside);
      return true;
    }
    spdlog::error(
        "saved homes: {} is not usable ({}) and cannot be moved aside ({}); starting without it, "
        "and it is not written until it is moved or removed",
        path, homes.error(), std::strerror(errno));
    return false;
  }
  const auto wall = system_clock::now();
  const std::int64_t age_ms = unix_ms(wall) - homes->saved_at_unix_ms;
  if (age_ms >= 0)
    spdlog::info("saved homes: read {}, written {:.0f} s ago", path,
                 static_cast<double>(age_ms) / 1000.0);
  else
    spdlog::warn(
        "saved homes: read {}, written {:.0f} s from now by this host's clock (set back since, or "
        "the file came from another host); the time since it was written is taken as 0",
        path, static_cast<double>(-age_ms) / 1000.0);
  for (const std::string& line : restore_homes(*homes, set, wall, steady_clock::now()))
    spdlog::info("saved homes: {}", line);
  return true;
}

HomeSaver::HomeSaver(Warden& warden, SavedHomesWrites& writes) : warden_(warden), writes_(writes) {}

HomeSaver::~HomeSaver() {
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string HomeSaver::claim() {
  std::lock_guard lock{write_mutex_};
  const auto set = warden_.models();
  if (!set->config.saved_homes) return {};
  return keep_lock(set->config.saved_homes->path);
}

std::string HomeSaver::keep_lock(const std::string& path) {
  const std::string file = file_behind(path);
  if (lock_fd_ >= 0 && locked_ == file) return {};
  let_go();
  FileLock taken = lock_file(path, file);
  if (taken.fd < 0) return taken.reason;
  lock_fd_ = taken.fd;
  locked_ = file;
  if (const auto removed = remove_cut_writes(file); !removed.empty())
    spdlog::warn("saved homes: removed {} file(s) beside {} that writes cut short left ({})",
                 removed.size(), path, fmt::join(removed, ", "));
  return {};
}

void HomeSaver::let_go() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  locked_.clear();
}

void HomeSaver::start() {
  thread_ = std::thread([this] { run(); });
}

void HomeSaver::reconfigured() {
  {
    // The new file's lock now, so that a file another warden keeps is said
    // at the reload, not an interval later.
    std::lock_guard lock{write_mutex_};
    const auto set = warden_.models();
    if (!set->config.saved_homes) {
      let_go();
    } else if (const std::string reason = keep_lock(set->config.saved_homes->path);
               !reason.empty() && reason != failing_) {
      spdlog::error("saved homes: {}; nothing is written there meanwhile (tried again every {} s)",
                    reason, set->config.saved_homes->interval.count() / 1000.0);
      failing_ = reason;
    }
  }
  {
    std::lock_guard lock{mutex_};
    woken_ = true;
  }
  wake_.notify_all();
}

bool HomeSaver::finish() {
  // Never started (the start failed): the file has not been read, and a
  // write now would replace it with an empty table.
  if (!thread_.joinable()) return true;
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  return write(true);
}

bool HomeSaver::write_now() {
  return write(false);
}

void HomeSaver::hold(const std::string& path) {
  std::lock_guard lock{write_mutex_};
  held_ = file_behind(path);
}

void HomeSaver::run() {
  auto last = steady_clock::now();
  std::unique_lock lock{mutex_};
  while (!stopping_) {
    // Only the interval is kept while waiting: a set held here would keep a
    // configuration a reload retired, and its routing state, alive.
    const auto interval = [&]() -> std::optional<config::Millis> {
      const auto set = warden_.models();
      if (!set->config.saved_homes) return std::nullopt;
      return set->config.saved_homes->interval;
    }();
    const auto woken = [&] { return stopping_ || woken_; };
    if (!interval) {
      wake_.wait(lock, woken);
    } else if (!wake_.wait_until(lock, last + *interval, woken)) {
      // Every interval from the start of the last write, however long it took.
      last = steady_clock::now();
      lock.unlock();
      write(false);
      lock.lock();
      continue;
    }
    woken_ = false;
  }
}

bool HomeSaver::write(bool at_stop) {
  std::lock_guard lock{write_mutex_};
  const auto set = warden_.models();
  if (!set->config.saved_homes) return true;
  const std::string& path = set->config.saved_homes->path;
  const std::string file = file_behind(path);
  if (!held_.empty()) {
    if (held_ != file || ::access(held_.c_str(), F_OK) != 0) {
      held_.clear();  // moved or removed, or another path since: written again
    } else {
      writes_.failed.fetch_add(1, std::memory_order_relaxed);
      if (at_stop)
        spdlog::error(
            "saved homes: {} not written at shutdown: it still holds the file that "
            "could not be used at start",
            path);
      return false;
    }
  }
  const auto began = steady_clock::now();
  std::size_t conversations = 0;
  std::size_t responses = 0;
  std::string failure = keep_lock(path);
  if (failure.empty()) {
    const SavedHomes homes = snapshot_homes(*set, system_clock::now(), began);
    for (const SavedModel& m : homes.models) {
      conversations += m.conversations.size();
      responses += m.responses.size();
    }
    failure = replace_file(file, format_saved_homes(homes));
  }
  if (!failure.empty()) {
    writes_.failed.fetch_add(1, std::memory_order_relaxed);
    if (at_stop)
      spdlog::error(
          "saved homes: {}; not written at shutdown, so the next start reads what the "
          "last write that succeeded left there, if anything",
          failure);
    else if (failure != failing_)
      spdlog::error(
          "saved homes: {}; tried again every {} s, and a restart meanwhile loses "
          "the homes since the last write",
          failure, set->config.saved_homes->interval.count() / 1000.0);
    failing_ = failure;
    return false;
  }
  writes_.written.fetch_add(1, std::memory_order_relaxed);
  writes_.last_written_unix_s.store(unix_ms(system_clock::now()) / 1000, std::memory_order_relaxed);
  if (!failing_.empty() && !at_stop) spdlog::info("saved homes: {} written again", path);
  failing_.clear();
  const auto took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - began).count();
  if (at_stop)
    spdlog::info("saved homes: {} conversations and {} stored responses written to {} ({} ms)",
                 conversations, responses, path, took);
  else
    spdlog::debug("saved homes: {} conversations and {} stored responses written to {} ({} ms)",
                  conversations, responses, path, took);
  return true;
}

}  // namespace lmwarden::proxy
