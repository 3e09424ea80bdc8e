// Loading and validating the YAML file, section by section; the reading of
// mappings and typed values with their messages is in yaml_reader.h, the
// value parsers (durations, sizes, addresses, URLs) in value_parsers.cpp, the
// shared_homes and saved_homes sections in homes_sections.cpp.
#include "config/config_loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "common/ascii.h"
#include "common/host_port.h"
#include "config/homes_sections.h"
#include "config/yaml_reader.h"
#include "config/yaml_text_checks.h"

namespace lmwarden::config {

using namespace std::literals;

namespace {

// A model's name or alias as a client could send it: not empty, no white
// space at either end (`name: "m "` by mistake) and no control character,
// which no client puts in a model's name.
bool plausible_model_name(std::string_view s) noexcept {
  return !s.empty() && s.front() != ' ' && s.back() != ' ' &&
         std::ranges::none_of(s, ascii_control);
}
constexpr const char* kModelNames = "names without white space at either end or control characters";

// A backend URL as an error shows it: user info, a query and a fragment,
// which may hold a password or a key, each replaced by "…".
std::string shown_url(const YAML::Node& node) {
  if (!node.IsScalar()) return yaml::shown(node);
  std::string url = node.Scalar();
  const std::size_t scheme = url.find("://");
  const std::size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  if (const std::size_t cut = url.find_first_of("?#", start); cut != std::string::npos)
    url = url.substr(0, cut + 1) + "…";
  const std::size_t end = url.find('/', start);
  if (const std::size_t at = url.rfind('@', end); at != std::string::npos && at >= start)
    url = url.substr(0, start) + "…" + url.substr(at);
  return yaml::shown(YAML::Node(url));
}

using yaml::bound_text;
using yaml::child;
using yaml::Entry;
using yaml::index;
using yaml::MapView;
using yaml::shown;

// The largest durations the file may set. Far above any useful setting, and
// far below what a nanosecond steady clock can add without overflowing.
constexpr Millis kMaxTimeout = std::chrono::hours{24 * 30};
constexpr Millis kMaxScrapeInterval = std::chrono::hours{1};
constexpr Millis kMaxSessionTtl = std::chrono::hours{24 * 3650};

// The warden's file, section by section.
class Loader : private HomesSections {
 public:
  Loader(std::string_view file, const ListenAddress* listening)
      : HomesSections(file), listening_(listening) {}

  ConfigResult load(std::string_view text) {
    Config config;
    config.source_file = file_;
    try {
      // A byte-order mark is no part of the YAML (yaml-cpp skips it, and its
      // marks then count from after it).
      if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
      YAML::Node root;
      try {
        root = YAML::Load(std::string(text));
      } catch (const YAML::ParserException& e) {
        const auto [line, message] = yaml::explain_parse_error(text, e.mark.line + 1, e.msg);
        add(line, "", message);
        return finish(std::move(config));
      }
      if (const auto line = yaml::second_document_line(text)) {
        add(*line, "",
            "invalid YAML: a second document (after a `---` line) begins here; the file must "
            "hold one");
        return finish(std::move(config));
      }
      if (const auto line = yaml::unclosed_quote_line(root, text)) {
        add(*line, "", std::string(yaml::kUnclosedQuote));
        return finish(std::move(config));
      }
      read_root(root, config);
      check_opening_keys();
    } catch (const YAML::Exception& e) {
      // yaml-cpp throws from a few accessors on shapes we did not foresee;
      // report it like any other problem rather than crash at start.
      add(e.mark.line + 1, "", fmt::format("unreadable YAML: {}", e.msg));
    }
    return finish(std::move(config));
  }

 private:
  // ----- sections

  void read_root(const YAML::Node& root, Config& config) {
    if (!root.IsDefined() || root.IsNull()) {
      add(1, "models", "is required: the file is empty");
      return;
    }
    // Not quoted: a file that is one value is most likely another file given
    // by mistake, such as the service's environment file, tokens and all
    // (`LMWARDEN_ADMIN_TOKEN=…` reads as one value), and this goes to the
    // journal.
    if (root.IsScalar()) {
      error(root, "",
            "must be a mapping of keys (\"listen: …\", \"models:\" and so on), got a single "
            "value (not shown: it may hold a secret); is this the configuration file?");
      return;
    }
    // `NAME=value: …` reads as a key: the same mistake, with a colon in a value.
    if (root.IsMap()) {
      for (auto it = root.begin(); it != root.end(); ++it) {
        const YAML::Node key = it->first;
        if (key.IsScalar() && key.Scalar().find('=') != std::string::npos) {
          error(key, "",
                "has a key with '=' in it, as an environment file's NAME=value line (not shown: "
                "it may hold a secret); is this the configuration file?");
          return;
        }
      }
    }
    const auto map =
        read_map(root, "",
                 {"listen", "threads", "limits", "timeouts", "retries", "admin_token_env",
                  "admin_token", "scrape_interval", "unhealthy_after", "eject_after_5xx",
                  "eject_for", "access_log", "shared_homes", "saved_homes", "models"});
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
      if (auto v = read_string(*e, "admin_token")) {
        if (const auto why = unsendable_token(*v); !why.empty())
          error(*e, "admin_token", fmt::format("{} (the value is not shown: it is a secret)", why));
        else
          config.admin_token = *v;
      }
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
    if (const Entry* e = map->find("access_log")) {
      if (auto v = read_log_path(*e, "access_log")) {
        // Appended to, it would be read as YAML no more: the next reload
        // and the next start refused.
        if (same_file(*v, file_))
          error(*e, "access_log", *v + " is this configuration file: name a file of its own");
        else
          config.access_log = *v;
      }
    }
    if (const Entry* e = map->find("shared_homes")) read_shared_homes(*e, config);
    if (const Entry* e = map->find("saved_homes")) read_saved_homes(*e, config);

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
                 {"name", "aliases", "affinity", "spill_threshold", "session_ttl", "active_window",
                  "max_conversations", "session_sources", "honor_client_rank", "weights",
                  "inject_stream_usage", "api_keys_env", "unranked_routes", "backends"});
    if (!map) return false;
    const std::size_t errors_before = errors_.size();

    if (const Entry* e = map->find("name")) {
      if (auto v = read_string(*e, child(path, "name"))) {
        if (plausible_model_name(*v))
          model.name = *v;
        else
          error(*e, child(path, "name"),
                fmt::format("must be a name without white space at either end or control "
                            "characters, got {:?}",
                            *v));
      }
    } else {
      error(node, child(path, "name"), "is required");
    }
    if (const Entry* e = map->find("aliases"))
      if (auto v = read_string_list(*e, child(path, "aliases"), kModelNames, plausible_model_name))
        model.aliases = std::move(*v);
    if (const Entry* e = map->find("affinity"))
      if (auto v = read_bool(*e, child(path, "affinity"))) model.affinity = *v;
    if (const Entry* e = map->find("spill_threshold")) read_spill_threshold(*e, path, model);
    if (const Entry* e = map->find("session_ttl"))
      if (auto v = read_whole_seconds(*e, child(path, "session_ttl"))) model.session_ttl = *v;
    if (const Entry* e = map->find("active_window"))
      if (auto v = read_whole_seconds(*e, child(path, "active_window"))) model.active_window = *v;
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
                                    is_env_name, /*secret=*/true)) {
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
        const auto repeated = std::find_if(model.backends.begin(), model.backends.end(),
                                           [&](const auto& b) { return same_server(b, backend); });
        if (repeated != model.backends.end()) {
          error(item, child(item_path, "url"),
                fmt::format(
                    "the same server is listed twice{}; use data_parallel_size for its ranks",
                    repeated->host == backend.host
                        ? ""
                        : fmt::format(" ({} and {} are one host)", repeated->host, backend.host)));
          continue;
        }
        model.backends.push_back(std::move(backend));
      }
    }
    return errors_.size() == errors_before;
  }

  // session_ttl and active_window are whole seconds (ModelConfig, and the
  // card and reload lines that show them), so 1500ms would quietly be 1s.
  std::optional<Seconds> read_whole_seconds(const Entry& e, const std::string& path) {
    const auto v = read_duration(e, path, Millis{1000}, kMaxSessionTtl);
    if (!v) return std::nullopt;
    if (v->count() % 1000 != 0) {
      error(e, path, fmt::format("must be whole seconds, got {}", shown(e.value)));
      return std::nullopt;
    }
    return std::chrono::duration_cast<Seconds>(*v);
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
      // `- header: NAME` is a mapping to YAML: say how to write it.
      std::string hint;
      if (item.IsMap() && item.size() == 1) {
        const auto pair = item.begin();
        hint =
            fmt::format(" (write \"{}:{}\" in quotes: a colon and a space make a mapping)",
                        pair->first.Scalar(), pair->second.IsScalar() ? pair->second.Scalar() : "");
      }
      auto source = item.IsScalar() ? parse_session_source(item.Scalar())
                                    : Result<SessionSource, std::string>(unexpected(
                                          "must be \"header:NAME\", \"body:dotted.path\", "
                                          "\"claude-user-id\" or \"opening\"" +
                                          hint));
      if (!source) {
        error(item, index(path, i), fmt::format("{}, got {}", source.error(), shown(item)));
        ok = false;
      } else if (std::find(sources.begin(), sources.end(), *source) != sources.end()) {
        error(item, index(path, i), fmt::format("{} is listed twice", shown(item)));
        ok = false;
      } else {
        if (source->kind == SessionSource::Kind::kOpening && !opening_model_)
          opening_model_ = model_path;
        if (source->kind == SessionSource::Kind::kBody) {
          const std::string_view first =
              std::string_view(source->name).substr(0, std::string_view(source->name).find('.'));
          if (std::ranges::find(kOpeningKeys, first) != kOpeningKeys.end())
            under_opening_keys_.push_back({item, index(path, i)});
        }
        sources.push_back(std::move(*source));
      }
    }
    if (ok) model.session_sources = std::move(sources);
  }

  // The body is scanned once for every model, and a top-level key is read
  // either as a body source's path or as part of an opening, not both.
  static constexpr std::array<std::string_view, 4> kOpeningKeys = {"system", "instructions",
                                                                   "messages", "input"};
  void check_opening_keys() {
    if (!opening_model_) return;
    for (const auto& [node, path] : under_opening_keys_)
      error(node, path,
            fmt::format("{} reads inside a key that the \"opening\" source of {} reads ({}): "
                        "one pass over the body cannot do both; drop one of them",
                        shown(node), *opening_model_, fmt::join(kOpeningKeys, ", ")));
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
                            shown_url(e->value)));
        } else if (parsed && listening_ && is_own_address(*listening_, *parsed)) {
          error(*e, child(path, "url"),
                fmt::format("is the address this warden listens on ({}, until a restart): every "
                            "request would come back to it, got {}",
                            host_port(listening_->host, listening_->port), shown_url(e->value)));
        } else if (parsed) {
          backend = std::move(*parsed);
        } else {
          error(*e, child(path, "url"),
                fmt::format("{}, got {}", parsed.error(), shown_url(e->value)));
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
        if (!inserted && it->second == path)  // a repeat within the aliases is skipped below
          error(name_node, key_path,
                fmt::format("{} is already this model's name", shown(name_node)));
        else if (!inserted)
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

  ListenAddress own_address_;
  const ListenAddress* listening_;            // on a reload, the address in force
  std::optional<std::string> opening_model_;  // models[i] of the first `opening` source
  std::vector<std::pair<YAML::Node, std::string>> under_opening_keys_;  // body sources there
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

ConfigResult load_config_string(std::string_view text, std::string_view source_name,
                                const ListenAddress* listening) {
  return Loader(source_name, listening).load(text);
}

ConfigResult load_config_file(const std::string& path, const ListenAddress* listening) {
  // (An ifstream opens a directory, and reads it as empty.)
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return unexpected(ConfigErrors{{{path, 0, "", "cannot open: it is a directory"}}});
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return unexpected(
        ConfigErrors{{{path, 0, "", fmt::format("cannot open: {}", std::strerror(errno))}}});
  }
  // Read up to a bound: a path to a device (/dev/zero, /dev/urandom) or a
  // huge file given by mistake would otherwise be read until memory ran out.
  std::string text;
  std::array<char, 64 * 1024> chunk;
  while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0) {
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxConfigBytes)
      return unexpected(ConfigErrors{
          {{path, 0, "",
            fmt::format("is larger than {} MiB, where a configuration takes a few KiB: is it "
                        "the right file?",
                        kMaxConfigBytes >> 20)}}});
  }
  if (in.bad()) return unexpected(ConfigErrors{{{path, 0, "", "cannot read the file"}}});
  return load_config_string(text, path, listening);
}

}  // namespace lmwarden::config
