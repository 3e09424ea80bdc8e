// The shared_homes and saved_homes sections of the warden's file.
#include "config/homes_sections.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/host_port.h"
#include "homes/home_store.h"

namespace lmwarden::config {

using yaml::Entry;
using yaml::MapView;
using yaml::shown;

void HomesSections::read_shared_homes(const Entry& section, Config& config) {
  // Not quoted, unlike other shapes' errors: written as a string, it is
  // most likely the Redis URL, password and all.
  if (section.value.IsScalar()) {
    error(section, "shared_homes",
          "must be a mapping of keys, e.g. \"redis: redis://HOST:6379\" on the next line, "
          "indented; got a single value (not shown: it may hold a password)");
    return;
  }
  const auto map = read_map(section.value, "shared_homes",
                            {"redis", "password_env", "key_prefix", "timeout", "tls_ca_file",
                             "tls_cert_file", "tls_key_file", "tls_server_name"});
  if (!map) return;
  SharedHomes homes;
  const std::size_t errors_before = errors_.size();
  bool tls = false;
  bool user_without_password = false;
  if (const Entry* e = map->find("redis")) {
    if (auto text = read_string(*e, "shared_homes.redis")) {
      // The error never quotes the URL: it may hold a password.
      if (auto address = homes::parse_redis_url(*text)) {
        homes.redis = *text;
        tls = address->tls;
        user_without_password = !address->username.empty() && address->password.empty();
      } else {
        error(*e, "shared_homes.redis", address.error());
      }
    }
  } else {
    add(section.value.Mark().line + 1, "shared_homes.redis",
        "is required: the Redis the wardens share, e.g. redis://127.0.0.1:6379");
  }
  if (const Entry* e = map->find("password_env"))
    if (auto v = read_env_name(*e, "shared_homes.password_env")) {
      if (auto password = require_env(e->value, "shared_homes.password_env", *v,
                                      "Redis would be sent an empty password"))
        homes.password = std::move(*password);
      homes.password_env = *v;
    }
  if (user_without_password && !map->find("password_env"))
    error(*map->find("redis"), "shared_homes.redis",
          "the redis URL names a user but no password: write it after the ':' "
          "(redis://USER:PASSWORD@HOST), or name the variable that holds it in "
          "shared_homes.password_env (redis://USER:@HOST)");
  if (const Entry* e = map->find("key_prefix"))
    if (auto v = read_string(*e, "shared_homes.key_prefix")) homes.key_prefix = *v;
  if (const Entry* e = map->find("timeout"))
    if (auto v = read_duration(*e, "shared_homes.timeout", Millis{1}, Millis{10'000}))
      homes.timeout = *v;
  read_redis_tls(*map, tls, homes);
  if (errors_.size() == errors_before) config.shared_homes = std::move(homes);
}

void HomesSections::read_saved_homes(const Entry& section, Config& config) {
  if (section.value.IsScalar()) {
    error(section, "saved_homes",
          fmt::format("must be a mapping of keys, e.g. \"path: /var/lib/lmwarden/homes.json\" on "
                      "the next line, indented; got {}",
                      shown(section.value)));
    return;
  }
  const auto map = read_map(section.value, "saved_homes", {"path", "interval"});
  if (!map) return;
  SavedHomesFile file;
  const std::size_t errors_before = errors_.size();
  if (const Entry* e = map->find("path")) {
    if (auto v = read_replaceable_file(*e, "saved_homes.path")) {
      file.path = *v;
      check_homes_path(*e, file.path, config);
    }
  } else {
    add(section.value.Mark().line + 1, "saved_homes.path",
        "is required: the file the homes are kept in, e.g. /var/lib/lmwarden/homes.json");
  }
  if (const Entry* e = map->find("interval"))
    if (auto v = read_duration(*e, "saved_homes.interval", Millis{1'000}, Millis{86'400'000}))
      file.interval = *v;
  if (errors_.size() == errors_before) config.saved_homes = std::move(file);
}

void HomesSections::check_homes_path(const Entry& e, const std::string& path,
                                     const Config& config) {
  static constexpr const char* kKey = "saved_homes.path";
  // The names the warden gives beside a homes file. Taken as a homes file,
  // such a path would have another warden's lock moved aside as unusable.
  const std::string name = std::filesystem::path(path).filename().string();
  const bool cut_write = name.size() > 11 && name.compare(name.size() - 11, 5, ".tmp.") == 0;
  if (name.ends_with(".lock") || name.ends_with(".unusable") || cut_write) {
    error(e, kKey,
          fmt::format("{} is a name the warden gives beside a homes file (its lock, a file moved "
                      "aside, a write under way): name the homes file itself",
                      path));
    return;
  }
  // The file, its lock, and where an unusable file is moved: none of them
  // the access log or this configuration file, however they are written.
  const std::pair<std::string_view, std::string_view> beside[] = {
      {"", ""}, {".lock", "the warden's lock"}, {".unusable", "where an unusable file is moved"}};
  for (const auto& [suffix, role] : beside) {
    const std::string other = path + std::string(suffix);
    const std::string which =
        suffix.empty() ? std::string() : fmt::format("{}, {} beside it, ", other, role);
    if (!config.access_log.empty() && same_file(other, config.access_log))
      error(e, kKey, which + "is the access_log's file: give each its own");
    else if (same_file(other, file_))
      error(e, kKey, which + "is this configuration file: name a file of its own");
  }
  // A lock file that is there must be one the warden can open and lock:
  // what a start would otherwise refuse, said at load.
  const std::string lock = path + ".lock";
  struct stat st {};
  if (::lstat(lock.c_str(), &st) != 0) return;
  if (S_ISLNK(st.st_mode))
    error(e, kKey,
          fmt::format("{}, the warden's lock beside it, is a symbolic link: remove it (the "
                      "warden makes its lock itself)",
                      lock));
  else if (!S_ISREG(st.st_mode))
    error(e, kKey, fmt::format("{}, the warden's lock beside it, is not a file: remove it", lock));
  else if (::access(lock.c_str(), W_OK) != 0)
    error(e, kKey,
          fmt::format("{}, the warden's lock beside it, cannot be opened for writing: {}", lock,
                      std::strerror(errno)));
}

void HomesSections::read_redis_tls(const MapView& map, bool tls, SharedHomes& homes) {
  const std::pair<const char*, std::string*> files[] = {{"tls_ca_file", &homes.tls_ca_file},
                                                        {"tls_cert_file", &homes.tls_cert_file},
                                                        {"tls_key_file", &homes.tls_key_file}};
  for (const auto& [key, out] : files) {
    const Entry* e = map.find(key);
    if (!e) continue;
    const std::string path = std::string("shared_homes.") + key;
    if (!tls && !homes.redis.empty()) {
      error(*e, path, "needs a rediss:// URL in shared_homes.redis (Redis over TLS)");
      continue;
    }
    if (auto v = read_readable_file(*e, path)) *out = *v;
  }
  if (const Entry* e = map.find("tls_server_name")) {
    if (!tls && !homes.redis.empty()) {
      error(*e, "shared_homes.tls_server_name",
            "needs a rediss:// URL in shared_homes.redis (Redis over TLS)");
    } else if (auto name = read_string(*e, "shared_homes.tls_server_name")) {
      // A fully qualified name's final dot: certificates never carry it.
      if (name->size() > 1 && name->back() == '.' && !is_ipv4(*name)) name->pop_back();
      if (!is_certificate_name(*name))
        error(*e, "shared_homes.tls_server_name",
              fmt::format("must be a host name or an IP address that Redis's certificate "
                          "carries, e.g. redis.internal; got {}",
                          shown(e->value)));
      else
        homes.tls_server_name = *name;
    }
  }
  const Entry* cert = map.find("tls_cert_file");
  const Entry* key = map.find("tls_key_file");
  if (tls && (cert == nullptr) != (key == nullptr)) {
    const Entry& given = cert ? *cert : *key;
    error(given, cert ? "shared_homes.tls_cert_file" : "shared_homes.tls_key_file",
          "set tls_cert_file and tls_key_file together: the warden's certificate and its key");
  }
}

}  // namespace lmwarden::config
