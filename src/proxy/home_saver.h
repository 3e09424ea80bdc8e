// Conversation homes kept across a restart (config `saved_homes`).
//
// Without Redis a warden's conversation table lives in its memory only, so a
// restart (an upgrade, a new host) places every live conversation again, on
// the least-loaded replica, which is most often not the one holding its
// prefix: each pays a cold prefill of its whole history. With `saved_homes`
// the warden writes every model's conversations and stored responses (each
// on its server and rank, with how long it has been idle) to a file, every
// `interval` while serving and once more when it stops, and reads the file
// back at its next start: those on a server and rank the model still has go
// home again; those idle past `session_ttl` by then are forgotten.
//
// The file is written beside its path and renamed over it, so a reader, or a
// crash, never sees half of one. The format is in proxy/saved_homes.h.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "proxy/saved_homes.h"

namespace lmwarden::proxy {

struct ModelSet;
class Warden;

// What became of the writes, for /metrics.
struct SavedHomesWrites {
  std::atomic<std::uint64_t> written{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::int64_t> last_written_unix_s{0};  // 0: none yet
};

// Every model's homes in `set` as they stand at `now` (`wall` the same
// moment by the system clock), those idle past their TTL left out. Takes
// each model's lock while it copies its table.
SavedHomes snapshot_homes(const ModelSet& set, std::chrono::system_clock::time_point wall,
                          std::chrono::steady_clock::time_point now);

// Gives the models of `set` the homes saved in `homes`: each on the replica
// of the same server (by name) and rank, at the last use it had, the time
// since the file was written counted as idle. Returns a line per model to
// log, saying what was taken back and what was not.
std::vector<std::string> restore_homes(const SavedHomes& homes, const ModelSet& set,
                                       std::chrono::system_clock::time_point wall,
                                       std::chrono::steady_clock::time_point now);

// Writes `text` to `path` whole: to a file of its own beside it
// (PATH.tmp.XXXXXX), synced, then renamed over it. Returns "" or why it
// could not.
std::string replace_file(const std::string& path, std::string_view text);

// The file a path names: a symbolic link followed, `..` resolved (the path
// itself when it cannot be resolved).
std::string file_behind(const std::string& path);

// The process that keeps the homes file at `path` now (holds its lock, as
// HomeSaver::claim() takes it), as /proc/locks names it (0: a process in
// another PID namespace); nullopt when none does. Takes no lock itself.
std::optional<int> lock_holder(const std::string& path);

// At start: reads the configuration's file, when there is one, into `set`'s
// models, and logs what it took back, or why the file was not used: a
// missing file is the first start; one that cannot be read or parsed is
// moved aside to PATH.unusable, never overwritten. False when it could not
// be moved aside either: the path must then not be written (HomeSaver::hold).
bool restore_saved_homes(const ModelSet& set);

// The thread that writes the file every interval of the configuration in
// force (a reload may set, change or remove `saved_homes`), and once more at
// finish().
class HomeSaver {
 public:
  HomeSaver(Warden& warden, SavedHomesWrites& writes);
  ~HomeSaver();
  HomeSaver(const HomeSaver&) = delete;
  HomeSaver& operator=(const HomeSaver&) = delete;

  // Takes the lock that keeps the configuration's file to this warden
  // (PATH.lock; see lock_file in home_saver.cpp), before the file is read.
  // Returns "" or why not: another warden keeps it, or the lock cannot be
  // made. A reload to another file takes that file's lock (reconfigured()),
  // and a write finding it not held tries again.
  std::string claim();
  void start();
  // After a reload: the interval or path may have changed.
  void reconfigured();
  // Stops the thread and, when the configuration names a file, writes it a
  // last time. Returns whether that write succeeded (true when none is due,
  // and when start() was never called: the file was not read then, and is
  // left as it is).
  bool finish();
  // Writes the file now, when the configuration names one; false on failure
  // (logged).
  bool write_now();
  // Writes nothing to `path` while the file there stays (restore_saved_homes
  // could neither use it nor move it aside): each write counts as failed.
  void hold(const std::string& path);

 private:
  void run();
  // write_now(), or finish()'s last write (logged at info, with its counts).
  bool write(bool at_stop);
  // The lock of `path`'s file held, a previous file's let go: "" or why not.
  // Both with write_mutex_ held.
  std::string keep_lock(const std::string& path);
  void let_go();

  Warden& warden_;
  SavedHomesWrites& writes_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;   // guarded by mutex_
  bool woken_ = false;      // guarded by mutex_
  std::mutex write_mutex_;  // one write at a time
  std::string failing_;     // guarded by write_mutex_: the last failure logged, "" after a success
  std::string held_;        // guarded by write_mutex_: the file hold() keeps, "" when none
  int lock_fd_ = -1;        // guarded by write_mutex_: the lock of locked_, -1 when none
  std::string locked_;      // guarded by write_mutex_
  std::thread thread_;
};

}  // namespace lmwarden::proxy
