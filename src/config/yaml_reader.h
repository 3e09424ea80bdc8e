// Reading a YAML configuration with messages that name the file, line, key
// and reason: the shape of a mapping, typed values, the errors collected.
// config_loader.cpp reads the sections of the warden's file on top of it.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/ascii.h"
#include "config/config_loader.h"

namespace lmwarden::config::yaml {

struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
};

// One mapping's entries, in file order. find() treats `key:` with no value
// (null) like an absent key, so the default applies.
struct MapView {
  std::vector<Entry> entries;
  YAML::Node node;

  const Entry* find(std::string_view key) const {
    for (const auto& entry : entries)
      if (entry.key == key) return entry.value.IsNull() ? nullptr : &entry;
    return nullptr;
  }
};

inline std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

inline std::string index(const std::string& path, std::size_t i) {
  return fmt::format("{}[{}]", path, i);
}

// A bound as messages state it: "720h (30 days)", "1h", "1500ms".
inline std::string bound_text(Millis bound) {
  const auto hours = std::chrono::duration_cast<std::chrono::hours>(bound);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(bound);
  if (seconds != bound) return fmt::format("{}ms", bound.count());
  if (hours != bound) return fmt::format("{}s", seconds.count());
  if (hours.count() > 24 && hours.count() % 24 == 0)
    return fmt::format("{}h ({} days)", hours.count(), hours.count() / 24);
  return fmt::format("{}h", hours.count());
}

// How a value looked, for "got …" in messages.
inline std::string shown(const YAML::Node& node) {
  if (node.IsNull()) return "nothing";
  if (node.IsSequence()) return node.size() == 0 ? "an empty list" : "a list";
  if (node.IsMap()) return "a mapping";
  std::string text = node.Scalar();
  constexpr std::size_t kMaxShown = 60;
  if (text.size() > kMaxShown) text = text.substr(0, kMaxShown) + "…";
  return fmt::format("\"{}\"", text);
}

// Collects the errors of one file; each read_* reports its own and returns
// nullopt.
class Reader {
 public:
  explicit Reader(std::string_view file) : file_(file) {}

 protected:
  ConfigResult finish(Config config) {
    if (errors_.empty()) return config;
    // In the file's order, to be worked through from the top (errors about
    // the whole file, line 0, first), and along a line by column (`[m, m]`:
    // the first m's error before the second's, whichever check found it
    // first); those of one place as they were found.
    std::ranges::stable_sort(errors_, {},
                             [](const Found& f) { return std::pair(f.line, f.column); });
    ConfigErrors out;
    out.errors.reserve(errors_.size());
    for (Found& f : errors_)
      out.errors.push_back({file_, f.line, std::move(f.key_path), std::move(f.reason)});
    errors_.clear();
    return unexpected(std::move(out));
  }

  void add(int line, std::string key_path, std::string reason, int column = 0) {
    errors_.push_back(
        {std::max(line, 0), std::max(column, 0), std::move(key_path), std::move(reason)});
  }
  void error(const YAML::Node& at, std::string key_path, std::string reason) {
    add(at.Mark().line + 1, std::move(key_path), std::move(reason), at.Mark().column);
  }
  void error(const Entry& at, std::string key_path, std::string reason) {
    const YAML::Mark& mark = at.value.Mark().line >= 0 ? at.value.Mark() : at.key_node.Mark();
    add(mark.line + 1, std::move(key_path), std::move(reason), mark.column);
  }

  // Checks the shape of a mapping: a mapping, plain keys, no unknown or
  // repeated key. nullopt when it is not a mapping at all.
  std::optional<MapView> read_map(const YAML::Node& node, const std::string& path,
                                  std::initializer_list<std::string_view> known) {
    if (!node.IsMap()) {
      error(node, path, fmt::format("must be a mapping of keys, got {}", shown(node)));
      return std::nullopt;
    }
    MapView view{.node = node};
    for (auto it = node.begin(); it != node.end(); ++it) {
      // Copies: the iterator hands out a temporary pair.
      const YAML::Node key = it->first;
      if (!key.IsScalar()) {
        error(key, path, "keys must be plain words");
        continue;
      }
      const std::string& name = key.Scalar();
      const std::string key_path = child(path, name);
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        error(key, key_path, unknown_key_reason(name, known));
        continue;
      }
      if (std::any_of(view.entries.begin(), view.entries.end(),
                      [&](const Entry& e) { return e.key == name; })) {
        error(key, key_path, "appears twice");
        continue;
      }
      view.entries.push_back({name, key, it->second});
    }
    return view;
  }

  static std::string unknown_key_reason(std::string_view name,
                                        std::initializer_list<std::string_view> known) {
    std::string_view best;
    std::size_t best_distance = std::numeric_limits<std::size_t>::max();
    for (std::string_view candidate : known) {
      const std::size_t d = edit_distance(name, candidate);
      if (d < best_distance) best = candidate, best_distance = d;
    }
    // A near miss, or a known key cut short ("max_body" for "max_body_bytes").
    const bool prefix = name.size() >= 3 && best_distance != 0 &&
                        std::any_of(known.begin(), known.end(), [&](std::string_view k) {
                          if (k.starts_with(name)) best = k;
                          return k.starts_with(name);
                        });
    if (prefix || best_distance <= std::max<std::size_t>(2, name.size() / 4))
      return fmt::format("unknown key (did you mean \"{}\"?)", best);
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    return fmt::format("unknown key (known here: {})", list);
  }

  // ----- typed values; each reports its own error and returns nullopt

  std::optional<std::string> read_string(const Entry& e, const std::string& path) {
    if (!e.value.IsScalar() || e.value.Scalar().empty()) {
      error(e, path, fmt::format("must be a non-empty string, got {}", shown(e.value)));
      return std::nullopt;
    }
    return e.value.Scalar();
  }

  // An absolute path: a service's working directory is rarely the config's.
  std::optional<std::string> read_absolute_path(const Entry& e, const std::string& path) {
    auto text = read_string(e, path);
    if (text && !text->starts_with('/')) {
      error(e, path, fmt::format("must be an absolute path, got {}", shown(e.value)));
      return std::nullopt;
    }
    return text;
  }

  // The directory of an absolute path ("/" for a file at the root).
  static std::string directory_of(const std::string& path) {
    return path.substr(0, std::max<std::size_t>(path.rfind('/'), 1));
  }

  // An absolute path of a file that can be opened for appending, as it is at start and at
  // each reload, which create it when missing. Checked here so that a bad path stops
  // the start, or the reload, with its reason; without creating it, so that a check
  // (serve --check) leaves nothing behind, nor a file owned by whoever ran it.
  std::optional<std::string> read_log_path(const Entry& e, const std::string& path) {
    auto text = read_absolute_path(e, path);
    if (!text) return std::nullopt;
    const int fd = ::open(text->c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd >= 0) {
      ::close(fd);
      return text;
    }
    if (errno != ENOENT) {
      error(e, path, fmt::format("cannot open {} for appending: {}", *text, std::strerror(errno)));
      return std::nullopt;
    }
    // Not there yet: the warden must be able to create it. Tried, as an
    // unnamed file in the directory (O_TMPFILE), which leaves neither a file
    // nor a change to the directory's times behind; where the file system
    // has no such files, as a file made and taken away again. access(2)
    // would answer by the directory's mode alone, which root passes where
    // the file system refuses new files (sysfs, procfs).
    const std::string directory = directory_of(*text);
    if (const int unnamed = ::open(directory.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0640);
        unnamed >= 0) {
      ::close(unnamed);
      return text;
    }
    const int created = ::open(text->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    if (created >= 0) {
      ::close(created);
      ::unlink(text->c_str());
      return text;
    }
    const int why = errno;
    if (why == EEXIST) return text;  // made meanwhile, by a warden starting on it
    struct stat st {};
    if (why == ENOENT && ::stat(directory.c_str(), &st) != 0)
      error(e, path,
            fmt::format("{} does not exist: create it (mkdir -p {}), or name a file in a "
                        "directory that does",
                        directory, directory));
    else
      error(e, path,
            fmt::format("cannot create {} in {}: {}", text->substr(text->rfind('/') + 1), directory,
                        std::strerror(why)));
    return std::nullopt;
  }

  // An absolute path of a file the warden writes whole and replaces (a
  // file beside it, renamed over it): its directory must let the warden
  // create files, and the path, where something is there, be a file.
  std::optional<std::string> read_replaceable_file(const Entry& e, const std::string& path) {
    auto text = read_absolute_path(e, path);
    if (!text) return std::nullopt;
    const std::string directory = directory_of(*text);
    struct stat st {};
    if (text->back() == '/' || (::stat(text->c_str(), &st) == 0 && !S_ISREG(st.st_mode))) {
      error(e, path, fmt::format("{} is not a file", *text));
      return std::nullopt;
    }
    // (access(2) answers EACCES for a plain file there, to root too.)
    if (::stat(directory.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      error(e, path,
            fmt::format("cannot create files in {}: {}", directory, std::strerror(ENOTDIR)));
      return std::nullopt;
    }
    if (::access(directory.c_str(), W_OK | X_OK) != 0) {
      error(e, path, fmt::format("cannot create files in {}: {}", directory, std::strerror(errno)));
      return std::nullopt;
    }
    return text;
  }

  // Whether two paths name one file: the same once links and `..` are
  // resolved, or, both there, the same device and inode (a hard link).
  static bool same_file(const std::string& a, const std::string& b) {
    std::error_code a_error;
    std::error_code b_error;
    const auto a_path = std::filesystem::weakly_canonical(a, a_error);
    const auto b_path = std::filesystem::weakly_canonical(b, b_error);
    if (!a_error && !b_error && a_path == b_path) return true;
    struct stat a_stat {};
    struct stat b_stat {};
    return ::stat(a.c_str(), &a_stat) == 0 && ::stat(b.c_str(), &b_stat) == 0 &&
           a_stat.st_dev == b_stat.st_dev && a_stat.st_ino == b_stat.st_ino;
  }

  // An absolute path of a file that can be read now (a certificate, say),
  // so that a wrong path stops the start, or the reload, with its reason.
  std::optional<std::string> read_readable_file(const Entry& e, const std::string& path) {
    auto text = read_absolute_path(e, path);
    if (!text) return std::nullopt;
    const int fd = ::open(text->c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      error(e, path, fmt::format("cannot read {}: {}", *text, std::strerror(errno)));
      return std::nullopt;
    }
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    ::close(fd);
    if (!regular) {
      error(e, path, fmt::format("{} is not a file", *text));
      return std::nullopt;
    }
    return text;
  }

  std::optional<bool> read_bool(const Entry& e, const std::string& path) {
    if (e.value.IsScalar()) {
      if (auto value = parse_bool(e.value.Scalar())) return value;
    }
    error(e, path, fmt::format("must be true or false, got {}", shown(e.value)));
    return std::nullopt;
  }

  std::optional<long long> read_int(const Entry& e, const std::string& path, long long min,
                                    long long max) {
    std::optional<long long> value;
    if (e.value.IsScalar()) {
      const std::string_view text = e.value.Scalar();
      long long parsed = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
      if (ec == std::errc{} && end == text.data() + text.size()) value = parsed;
    }
    if (value && *value >= min && *value <= max) return value;
    const std::string range = max == std::numeric_limits<long long>::max()
                                  ? fmt::format("an integer >= {}", min)
                                  : fmt::format("an integer from {} to {}", min, max);
    error(e, path, fmt::format("must be {}, got {}", range, shown(e.value)));
    return std::nullopt;
  }

  std::optional<double> read_weight(const Entry& e, const std::string& path) {
    if (e.value.IsScalar()) {
      const std::string_view text = e.value.Scalar();
      double parsed = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
      if (ec == std::errc{} && end == text.data() + text.size() && std::isfinite(parsed) &&
          parsed >= 0)
        return parsed;
    }
    error(e, path, fmt::format("must be a number >= 0, got {}", shown(e.value)));
    return std::nullopt;
  }

  // `max` also guards the clock: the warden adds these durations to
  // steady-clock time points, whose nanosecond count overflows near 292
  // years, and a TTL or deadline that overflowed lies in the past.
  std::optional<Millis> read_duration(const Entry& e, const std::string& path, Millis min,
                                      Millis max) {
    std::optional<Millis> value;
    if (e.value.IsScalar()) value = parse_duration(e.value.Scalar());
    if (!value) {
      // A bare number: most often seconds meant, or a zero with no unit.
      const bool bare = e.value.IsScalar() && !e.value.Scalar().empty() &&
                        e.value.Scalar().find_first_not_of("0123456789.") == std::string::npos;
      error(e, path,
            fmt::format(
                "must be a duration like 500ms, 90s, 30m or 1h, got {}{}", shown(e.value),
                bare ? fmt::format(" (a unit is needed: {}s for seconds)", e.value.Scalar()) : ""));
      return std::nullopt;
    }
    if (*value < min) {
      error(e, path, fmt::format("must be at least {}, got {}", bound_text(min), shown(e.value)));
      return std::nullopt;
    }
    if (*value > max) {
      error(e, path, fmt::format("must be at most {}, got {}", bound_text(max), shown(e.value)));
      return std::nullopt;
    }
    return value;
  }

  std::optional<std::uint64_t> read_size(const Entry& e, const std::string& path, std::uint64_t min,
                                         std::uint64_t max, std::string_view bounds) {
    std::optional<std::uint64_t> value;
    if (e.value.IsScalar()) value = parse_byte_size(e.value.Scalar());
    if (!value) {
      error(e, path,
            fmt::format("must be a size like 65536, 64KiB or 32MiB, got {}", shown(e.value)));
      return std::nullopt;
    }
    if (*value < min || *value > max) {
      error(e, path, fmt::format("must be {}, got {}", bounds, shown(e.value)));
      return std::nullopt;
    }
    return value;
  }

  // A list of scalars that each pass `check`; nullopt if anything is wrong.
  // Items are quoted in errors unless `secret` (an item may be a key written
  // where its variable's name belongs).
  template <typename Check>
  std::optional<std::vector<std::string>> read_string_list(const Entry& e, const std::string& path,
                                                           std::string_view expected, Check check,
                                                           bool secret = false) {
    if (!e.value.IsSequence()) {
      error(e, path, fmt::format("must be a list of {}, got {}", expected, shown(e.value)));
      return std::nullopt;
    }
    std::vector<std::string> out;
    bool ok = true;
    for (std::size_t i = 0; i < e.value.size(); ++i) {
      const YAML::Node item = e.value[i];
      if (!item.IsScalar() || !check(item.Scalar())) {
        error(item, index(path, i),
              secret
                  ? fmt::format("must be {} (the value is not shown: it may be a secret)", expected)
                  : fmt::format("must be {}, got {}", expected, shown(item)));
        ok = false;
        continue;
      }
      if (std::find(out.begin(), out.end(), item.Scalar()) != out.end()) {
        error(item, index(path, i), fmt::format("{} is listed twice", shown(item)));
        ok = false;
        continue;
      }
      out.push_back(item.Scalar());
    }
    if (!ok) return std::nullopt;
    return out;
  }

  std::optional<std::string> read_env_name(const Entry& e, const std::string& path) {
    if (e.value.IsScalar() && is_env_name(e.value.Scalar())) return e.value.Scalar();
    // Not quoted: what is written here by mistake is often the secret itself.
    error(e, path,
          "must be an environment variable name (letters, digits, _); the value is not shown: it "
          "may be a secret");
    return std::nullopt;
  }

  // The value of the variable `name`, read once here; an unset or empty one
  // is an error that says what it would have done. So is one holding a
  // control character (a line end left by the secret file it was read from,
  // most often): sent in a header, a CR or LF would end the line there and
  // start another; a key that holds one could never be sent by a client.
  std::optional<std::string> require_env(const YAML::Node& at, const std::string& path,
                                         const std::string& name, std::string_view consequence) {
    const char* value = std::getenv(name.c_str());
    if (!value || !*value) {
      error(at, path,
            fmt::format("the environment variable {} is {}: {}", name, value ? "empty" : "not set",
                        consequence));
      return std::nullopt;
    }
    const std::string_view v(value);
    const auto control = std::ranges::find_if(v, ascii_control);
    if (control != v.end()) {
      error(at, path,
            fmt::format("the environment variable {} holds a control character (byte {} of {}, "
                        "0x{:02x}; a line end left by the file it came from?); the value is not "
                        "shown: it is a secret",
                        name, control - v.begin() + 1, v.size(),
                        static_cast<unsigned char>(*control)));
      return std::nullopt;
    }
    return std::string(v);
  }

  std::string file_;
  // An error as found, with its column for finish()'s order.
  struct Found {
    int line;
    int column;
    std::string key_path;
    std::string reason;
  };
  std::vector<Found> errors_;
};

}  // namespace lmwarden::config::yaml
