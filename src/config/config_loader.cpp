// Loading and validating the YAML file; the value parsers it uses (durations,
// sizes, addresses, URLs) are in value_parsers.cpp.
#include "config/config_loader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <sstream>

namespace lmwarden::config {

using namespace std::literals;

namespace {

// --------------------------------------------------------------- the loader

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

std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

std::string index(const std::string& path, std::size_t i) {
  return fmt::format("{}[{}]", path, i);
}

// The largest durations the file may set. Far above any useful setting, and
// far below what a nanosecond steady clock can add without overflowing.
constexpr Millis kMaxTimeout = std::chrono::hours{24 * 30};
constexpr Millis kMaxScrapeInterval = std::chrono::hours{1};
constexpr Millis kMaxSessionTtl = std::chrono::hours{24 * 3650};

// "forwarded routes (/v1/chat/completions, …)", for messages.
std::string forwarded_route_list() {
  std::string out = "forwarded routes (";
  for (std::string_view route : kForwardedRoutes) {
    if (out.back() != '(') out += ", ";
    out += route;
  }
  return out + ")";
}

// A bound as messages state it: "720h (30 days)", "1h", "1500ms".
std::string bound_text(Millis bound) {
  const auto hours = std::chrono::duration_cast<std::chrono::hours>(bound);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(bound);
  if (seconds != bound) return fmt::format("{}ms", bound.count());
  if (hours != bound) return fmt::format("{}s", seconds.count());
  if (hours.count() > 24 && hours.count() % 24 == 0)
    return fmt::format("{}h ({} days)", hours.count(), hours.count() / 24);
  return fmt::format("{}h", hours.count());
}

// How a value looked, for "got …" in messages.
std::string shown(const YAML::Node& node) {
  if (node.IsNull()) return "nothing";
  if (node.IsSequence()) return node.size() == 0 ? "an empty list" : "a list";
  if (node.IsMap()) return "a mapping";
  std::string text = node.Scalar();
  constexpr std::size_t kMaxShown = 60;
  if (text.size() > kMaxShown) text = text.substr(0, kMaxShown) + "…";
  return fmt::format("\"{}\"", text);
}

class Loader {
 public:
  explicit Loader(std::string_view file) : file_(file) {}

  ConfigResult load(std::string_view text) {
    Config config;
    config.source_file = file_;
    try {
      YAML::Node root;
      try {
        root = YAML::Load(std::string(text));
      } catch (const YAML::ParserException& e) {
        add(e.mark.line + 1, "", fmt::format("invalid YAML: {}", e.msg));
        return finish(std::move(config));
      }
      read_root(root, config);
    } catch (const YAML::Exception& e) {
      // yaml-cpp throws from a few accessors on shapes we did not foresee;
      // report it like any other problem rather than crash at start.
      add(e.mark.line + 1, "", fmt::format("unreadable YAML: {}", e.msg));
    }
    return finish(std::move(config));
  }

 private:
  ConfigResult finish(Config config) {
    if (errors_.empty()) return config;
    return unexpected(ConfigErrors{std::move(errors_)});
  }

  void add(int line, std::string key_path, std::string reason) {
    errors_.push_back({file_, std::max(line, 0), std::move(key_path), std::move(reason)});
  }
  void error(const YAML::Node& at, std::string key_path, std::string reason) {
    add(at.Mark().line + 1, std::move(key_path), std::move(reason));
  }
  void error(const Entry& at, std::string key_path, std::string reason) {
    const int line = at.value.Mark().line >= 0 ? at.value.Mark().line : at.key_node.Mark().line;
    add(line + 1, std::move(key_path), std::move(reason));
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

  // An absolute path (a service's working directory is rarely the config's)
  // of a file that can be opened for appending, as it is at start and at
  // each reload; created when missing. Checked here so that a bad path stops
  // the start, or the reload, with its reason.
  std::optional<std::string> read_log_path(const Entry& e, const std::string& path) {
    auto text = read_string(e, path);
    if (!text) return std::nullopt;
    if (!text->starts_with('/')) {
      error(e, path, fmt::format("must be an absolute path, got {}", shown(e.value)));
      return std::nullopt;
    }
    const int fd = ::open(text->c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
      error(e, path, fmt::format("cannot open {} for appending: {}", *text, std::strerror(errno)));
      return std::nullopt;
    }
    ::close(fd);
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
      error(e, path,
            fmt::format("must be a duration like 500ms, 90s, 30m or 1h, got {}", shown(e.value)));
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
  template <typename Check>
  std::optional<std::vector<std::string>> read_string_list(const Entry& e, const std::string& path,
                                                           std::string_view expected, Check check) {
    if (!e.value.IsSequence()) {
      error(e, path, fmt::format("must be a list of {}, got {}", expected, shown(e.value)));
      return std::nullopt;
    }
    std::vector<std::string> out;
    bool ok = true;
    for (std::size_t i = 0; i < e.value.size(); ++i) {
      const YAML::Node item = e.value[i];
      if (!item.IsScalar() || !check(item.Scalar())) {
        error(item, index(path, i), fmt::format("must be {}, got {}", expected, shown(item)));
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

  // ----- sections

  void read_root(const YAML::Node& root, Config& config) {
    if (!root.IsDefined() || root.IsNull()) {
      add(1, "models", "is required: the file is empty");
      return;
    }
    const auto map =
        read_map(root, "",
                 {"listen", "threads", "limits", "timeouts", "retries", "admin_token_env",
                  "admin_token", "scrape_interval", "unhealthy_after", "eject_after_5xx",
                  "eject_for", "access_log", "models"});
    if (!map) return;

    if (const Entry* e = map->find("listen")) {
      if (auto text = read_string(*e, "listen")) {
        auto address = parse_listen_address(*text);
        if (address) {
          config.listen_host = address->host;
          config.listen_port = address->port;
        } else {
          error(*e, "listen", fmt::format("{}, got {}", address.error(), shown(e->value)));
        }
      }
    }
    if (const Entry* e = map->find("threads"))
      if (auto v = read_int(*e, "threads", 0, 1024)) config.threads = static_cast<int>(*v);
    if (const Entry* e = map->find("limits")) read_limits(*e, config.limits);
    if (const Entry* e = map->find("timeouts")) read_timeouts(*e, config.timeouts);
    if (const Entry* e = map->find("retries"))
      if (auto v = read_int(*e, "retries", 0, 16)) config.retries = static_cast<int>(*v);
    if (const Entry* e = map->find("admin_token_env"))
      if (auto v = read_env_name(*e, "admin_token_env")) config.admin_token_env = *v;
    if (const Entry* e = map->find("admin_token")) {
      if (auto v = read_string(*e, "admin_token")) config.admin_token = *v;
      if (map->find("admin_token_env"))
        error(*e, "admin_token", "set admin_token or admin_token_env, not both");
    }
    if (const Entry* e = map->find("scrape_interval"))
      if (auto v = read_duration(*e, "scrape_interval", Millis{100}, kMaxScrapeInterval))
        config.scrape_interval = *v;
    if (const Entry* e = map->find("unhealthy_after"))
      if (auto v = read_int(*e, "unhealthy_after", 1, 1000))
        config.unhealthy_after = static_cast<int>(*v);
    if (const Entry* e = map->find("eject_after_5xx"))
      if (auto v = read_int(*e, "eject_after_5xx", 0, 1000))
        config.eject_after_5xx = static_cast<int>(*v);
    if (const Entry* e = map->find("eject_for"))
      if (auto v = read_duration(*e, "eject_for", Millis{1'000}, Millis{3'600'000}))
        config.eject_for = *v;
    if (const Entry* e = map->find("access_log"))
      if (auto v = read_log_path(*e, "access_log")) config.access_log = *v;

    own_address_ = ListenAddress{config.listen_host, config.listen_port};

    const Entry* models = map->find("models");
    if (!models) {
      add(root.Mark().line + 1, "models", "is required: list at least one model");
      return;
    }
    if (!models->value.IsSequence() || models->value.size() == 0) {
      error(*models, "models",
            fmt::format("must be a list of at least one model, got {}", shown(models->value)));
      return;
    }
    for (std::size_t i = 0; i < models->value.size(); ++i) {
      ModelConfig model;
      if (read_model(models->value[i], index("models", i), model))
        config.models.push_back(std::move(model));
    }
    check_unique_names(models->value);
  }

  std::optional<std::string> read_env_name(const Entry& e, const std::string& path) {
    if (e.value.IsScalar() && is_env_name(e.value.Scalar())) return e.value.Scalar();
    error(e, path,
          fmt::format("must be an environment variable name (letters, digits, _), got {}",
                      shown(e.value)));
    return std::nullopt;
  }

  // The value of the variable `name`, read once here; an unset or empty one
  // is an error that says what it would have done.
  std::optional<std::string> require_env(const YAML::Node& at, const std::string& path,
                                         const std::string& name, std::string_view consequence) {
    const char* value = std::getenv(name.c_str());
    if (value && *value) return std::string(value);
    error(at, path,
          fmt::format("the environment variable {} is {}: {}", name, value ? "empty" : "not set",
                      consequence));
    return std::nullopt;
  }

  void read_limits(const Entry& section, Limits& limits) {
    const auto map = read_map(section.value, "limits",
                              {"max_header_bytes", "max_body_bytes", "max_connections"});
    if (!map) return;
    constexpr std::uint64_t kKiB = 1024, kMiB = 1024 * kKiB, kGiB = 1024 * kMiB;
    if (const Entry* e = map->find("max_header_bytes"))
      if (auto v = read_size(*e, "limits.max_header_bytes", kKiB, 16 * kMiB, "from 1KiB to 16MiB"))
        limits.max_header_bytes = *v;
    // simdjson reads documents up to 4 GiB; 1 GiB leaves room and is already
    // far beyond any context window.
    if (const Entry* e = map->find("max_body_bytes"))
      if (auto v = read_size(*e, "limits.max_body_bytes", kKiB, kGiB, "from 1KiB to 1GiB"))
        limits.max_body_bytes = *v;
    if (const Entry* e = map->find("max_connections"))
      if (auto v = read_int(*e, "limits.max_connections", 1, 1'000'000))
        limits.max_connections = static_cast<std::size_t>(*v);
  }

  void read_timeouts(const Entry& section, Timeouts& timeouts) {
    const auto map = read_map(section.value, "timeouts",
                              {"connect", "first_byte", "idle", "client_read", "client_idle",
                               "shutdown_grace"});
    if (!map) return;
    const std::pair<std::string_view, Millis*> positive[] = {
        {"connect", &timeouts.connect},
        {"first_byte", &timeouts.first_byte},
        {"idle", &timeouts.idle},
        {"client_read", &timeouts.client_read},
        {"client_idle", &timeouts.client_idle}};
    for (const auto& [key, target] : positive)
      if (const Entry* e = map->find(key))
        if (auto v = read_duration(*e, child("timeouts", key), Millis{1}, kMaxTimeout))
          *target = *v;
    if (const Entry* e = map->find("shutdown_grace"))
      if (auto v = read_duration(*e, "timeouts.shutdown_grace", Millis{0}, kMaxTimeout))
        timeouts.shutdown_grace = *v;
  }

  bool read_model(const YAML::Node& node, const std::string& path, ModelConfig& model) {
    const auto map =
        read_map(node, path,
                 {"name", "aliases", "affinity", "spill_threshold", "session_ttl",
                  "max_conversations", "session_sources", "honor_client_rank", "weights",
                  "inject_stream_usage", "api_keys_env", "unranked_routes", "backends"});
    if (!map) return false;
    const std::size_t errors_before = errors_.size();

    if (const Entry* e = map->find("name")) {
      if (auto v = read_string(*e, child(path, "name"))) model.name = *v;
    } else {
      error(node, child(path, "name"), "is required");
    }
    if (const Entry* e = map->find("aliases"))
      if (auto v = read_string_list(*e, child(path, "aliases"), "non-empty names",
                                    [](std::string_view s) { return !s.empty(); }))
        model.aliases = std::move(*v);
    if (const Entry* e = map->find("affinity"))
      if (auto v = read_bool(*e, child(path, "affinity"))) model.affinity = *v;
    if (const Entry* e = map->find("spill_threshold")) read_spill_threshold(*e, path, model);
    if (const Entry* e = map->find("session_ttl"))
      if (auto v = read_duration(*e, child(path, "session_ttl"), Millis{1000}, kMaxSessionTtl))
        model.session_ttl = std::chrono::duration_cast<Seconds>(*v);
    if (const Entry* e = map->find("max_conversations"))
      if (auto v = read_int(*e, child(path, "max_conversations"), 1, 100'000'000))
        model.max_conversations = static_cast<std::size_t>(*v);
    if (const Entry* e = map->find("session_sources")) read_session_sources(*e, path, model);
    if (const Entry* e = map->find("honor_client_rank"))
      if (auto v = read_bool(*e, child(path, "honor_client_rank"))) model.honor_client_rank = *v;
    if (const Entry* e = map->find("weights"))
      read_weights(*e, child(path, "weights"), model.weights);
    if (const Entry* e = map->find("inject_stream_usage"))
      if (auto v = read_bool(*e, child(path, "inject_stream_usage")))
        model.inject_stream_usage = *v;
    if (const Entry* e = map->find("api_keys_env"))
      if (auto v = read_string_list(*e, child(path, "api_keys_env"), "environment variable names",
                                    is_env_name)) {
        // A key that is not there would leave the model open while the file
        // says it is closed: refused here rather than found out by a client.
        for (std::size_t i = 0; i < v->size(); ++i)
          require_env(e->value[i], index(child(path, "api_keys_env"), i), (*v)[i],
                      "the key it should hold cannot be checked");
        model.api_keys_env = std::move(*v);
      }

    if (const Entry* e = map->find("unranked_routes"))
      if (auto v = read_string_list(
              *e, child(path, "unranked_routes"), forwarded_route_list(), [](std::string_view s) {
                return std::ranges::find(kForwardedRoutes, s) != kForwardedRoutes.end();
              }))
        model.unranked_routes = std::move(*v);

    const Entry* backends = map->find("backends");
    if (!backends) {
      error(node, child(path, "backends"), "is required: list at least one backend");
    } else if (!backends->value.IsSequence() || backends->value.size() == 0) {
      error(*backends, child(path, "backends"),
            fmt::format("must be a list of at least one backend, got {}", shown(backends->value)));
    } else {
      for (std::size_t i = 0; i < backends->value.size(); ++i) {
        BackendConfig backend;
        const YAML::Node item = backends->value[i];
        const std::string item_path = index(child(path, "backends"), i);
        if (!read_backend(item, item_path, backend)) continue;
        const bool repeated =
            std::any_of(model.backends.begin(), model.backends.end(), [&](const auto& b) {
              return b.host == backend.host && b.port == backend.port &&
                     b.base_path == backend.base_path;
            });
        if (repeated) {
          error(item, child(item_path, "url"),
                "the same server is listed twice; use data_parallel_size for its ranks");
          continue;
        }
        model.backends.push_back(std::move(backend));
      }
    }
    return errors_.size() == errors_before;
  }

  void read_spill_threshold(const Entry& e, const std::string& model_path, ModelConfig& model) {
    if (e.value.IsScalar()) {
      const std::string& text = e.value.Scalar();
      if (text == "auto") {
        model.spill_threshold.reset();
        return;
      }
      int v = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec == std::errc{} && end == text.data() + text.size() && v >= 1 &&
          v <= kMaxSpillThreshold) {
        model.spill_threshold = v;
        return;
      }
    }
    error(e, child(model_path, "spill_threshold"),
          fmt::format("must be an integer from 1 to {} or \"auto\", got {}", kMaxSpillThreshold,
                      shown(e.value)));
  }

  void read_session_sources(const Entry& e, const std::string& model_path, ModelConfig& model) {
    const std::string path = child(model_path, "session_sources");
    if (!e.value.IsSequence()) {
      error(e, path,
            fmt::format("must be a list such as [\"header:session-id\", "
                        "\"body:prompt_cache_key\", \"claude-user-id\"], got {}",
                        shown(e.value)));
      return;
    }
    std::vector<SessionSource> sources;
    bool ok = true;
    for (std::size_t i = 0; i < e.value.size(); ++i) {
      const YAML::Node item = e.value[i];
      auto source = item.IsScalar() ? parse_session_source(item.Scalar())
                                    : Result<SessionSource, std::string>(unexpected(std::string(
                                          "must be \"header:NAME\", \"body:dotted.path\" or "
                                          "\"claude-user-id\"")));
      if (!source) {
        error(item, index(path, i), fmt::format("{}, got {}", source.error(), shown(item)));
        ok = false;
      } else if (std::find(sources.begin(), sources.end(), *source) != sources.end()) {
        error(item, index(path, i), fmt::format("{} is listed twice", shown(item)));
        ok = false;
      } else {
        sources.push_back(std::move(*source));
      }
    }
    if (ok) model.session_sources = std::move(sources);
  }

  void read_weights(const Entry& section, const std::string& path, LoadWeights& weights) {
    const auto map = read_map(section.value, path, {"in_flight", "kv_used", "live_conversations"});
    if (!map) return;
    const std::pair<std::string_view, double*> fields[] = {
        {"in_flight", &weights.in_flight},
        {"kv_used", &weights.kv_used},
        {"live_conversations", &weights.live_conversations}};
    for (const auto& [key, target] : fields)
      if (const Entry* e = map->find(key))
        if (auto v = read_weight(*e, child(path, key))) *target = *v;
    // With every weight 0 every replica scores 0: a busy home never has a
    // less loaded replica to spill to, so spill_threshold would do nothing.
    if (weights.in_flight == 0 && weights.kv_used == 0 && weights.live_conversations == 0)
      error(section, path,
            "must not all be 0: every replica would score 0 and a busy home would never spill");
  }

  bool read_backend(const YAML::Node& node, const std::string& path, BackendConfig& backend) {
    const auto map = read_map(node, path, {"url", "data_parallel_size", "api_key_env"});
    if (!map) return false;
    const std::size_t errors_before = errors_.size();
    if (const Entry* e = map->find("url")) {
      if (auto text = read_string(*e, child(path, "url"))) {
        auto parsed = parse_backend_url(*text);
        if (parsed && is_own_address(own_address_, *parsed)) {
          error(*e, child(path, "url"),
                fmt::format("is this warden's own listen address: every request would come back "
                            "to it, got {}",
                            shown(e->value)));
        } else if (parsed) {
          backend = std::move(*parsed);
        } else {
          error(*e, child(path, "url"), fmt::format("{}, got {}", parsed.error(), shown(e->value)));
        }
      }
    } else {
      error(node, child(path, "url"), "is required, e.g. http://127.0.0.1:8000");
    }
    if (const Entry* e = map->find("data_parallel_size"))
      if (auto v = read_int(*e, child(path, "data_parallel_size"), 1, 1024))
        backend.data_parallel_size = static_cast<int>(*v);
    if (const Entry* e = map->find("api_key_env"))
      if (auto v = read_env_name(*e, child(path, "api_key_env"))) {
        if (auto key = require_env(e->value, child(path, "api_key_env"), *v,
                                   "the server would be sent an empty key"))
          backend.api_key = std::move(*key);
        backend.api_key_env = *v;
      }
    return errors_.size() == errors_before;
  }

  // Every model name and alias routes one model, so each may appear once.
  void check_unique_names(const YAML::Node& models) {
    std::map<std::string, std::string, std::less<>> owner;  // name -> models[i]
    for (std::size_t i = 0; i < models.size(); ++i) {
      const YAML::Node model = models[i];
      if (!model.IsMap()) continue;
      const std::string path = index("models", i);
      auto claim = [&](const YAML::Node& name_node, const std::string& key_path) {
        if (!name_node.IsScalar() || name_node.Scalar().empty()) return;
        const auto [it, inserted] = owner.emplace(name_node.Scalar(), path);
        if (!inserted)
          error(name_node, key_path,
                fmt::format("{} is already the name or an alias of {}", shown(name_node),
                            it->second));
      };
      if (model["name"]) claim(model["name"], child(path, "name"));
      const YAML::Node aliases = model["aliases"];
      if (!aliases || !aliases.IsSequence()) continue;
      std::vector<std::string> seen;  // a repeat inside the list was reported as such
      for (std::size_t j = 0; j < aliases.size(); ++j) {
        const YAML::Node alias = aliases[j];
        if (!alias.IsScalar()) continue;
        if (std::find(seen.begin(), seen.end(), alias.Scalar()) != seen.end()) continue;
        seen.push_back(alias.Scalar());
        claim(alias, index(child(path, "aliases"), j));
      }
    }
  }

  std::string file_;
  std::vector<ConfigError> errors_;
  ListenAddress own_address_;
};

}  // namespace

// ------------------------------------------------------------------ errors

std::string ConfigError::message() const {
  std::string out = file;
  if (line > 0) out += fmt::format(":{}", line);
  out += ": ";
  if (!key_path.empty()) out += key_path + ": ";
  out += reason;
  return out;
}

std::string ConfigErrors::message() const {
  std::string out;
  for (const auto& e : errors) {
    if (!out.empty()) out += '\n';
    out += e.message();
  }
  return out;
}

// ------------------------------------------------------------------ loading

ConfigResult load_config_string(std::string_view text, std::string_view source_name) {
  return Loader(source_name).load(text);
}

ConfigResult load_config_file(const std::string& path) {
  // (An ifstream opens a directory, and reads it as empty.)
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return unexpected(ConfigErrors{{{path, 0, "", "cannot open: it is a directory"}}});
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return unexpected(
        ConfigErrors{{{path, 0, "", fmt::format("cannot open: {}", std::strerror(errno))}}});
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return unexpected(ConfigErrors{{{path, 0, "", "cannot read the file"}}});
  return load_config_string(text.str(), path);
}

}  // namespace lmwarden::config
