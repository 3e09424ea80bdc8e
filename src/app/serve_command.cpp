// `lmwarden serve`: load the configuration, start the warden, run until a
// signal. SIGINT/SIGTERM stop accepting, let requests in flight finish within
// the grace period (a second signal ends it at once), then exit 0. SIGHUP
// reloads the configuration file; SIGUSR1 reopens the access log.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/signal_set.hpp>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "app/commands.h"
#include "app/journal.h"
#include "common/host_port.h"
#include "common/result.h"
#include "config/config_loader.h"
#include "homes/home_store.h"
#include "net/socket_activation.h"
#include "proxy/api.h"
#include "proxy/home_saver.h"
#include "proxy/runtime.h"

#ifdef LMWARDEN_WITH_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

namespace lmwarden::app {
namespace {

// The memory allocator this binary runs on (a build option:
// LMWARDEN_ALLOCATOR), as the startup log names it.
std::string allocator_name() {
#ifdef LMWARDEN_WITH_JEMALLOC
  const char* version = nullptr;
  std::size_t length = sizeof(version);
  std::string name = "jemalloc";
  if (mallctl("version", &version, &length, nullptr, 0) == 0 && version)
    name += std::string(" ") + version;
  // How soon memory freed and left unused goes back to the kernel.
  ssize_t decay_ms = -1;
  std::size_t decay_length = sizeof(decay_ms);
  bool purging_thread = false;
  std::size_t flag_length = sizeof(purging_thread);
  if (mallctl("arenas.dirty_decay_ms", &decay_ms, &decay_length, nullptr, 0) == 0 &&
      mallctl("background_thread", &purging_thread, &flag_length, nullptr, 0) == 0) {
    if (decay_ms < 0)
      name += ", freed memory kept";
    else
      name += ", freed memory returned after " + std::to_string(decay_ms) + " ms unused" +
              (purging_thread ? "" : " (checked only as the process allocates)");
  }
  return name;
#elif defined(__SANITIZE_ADDRESS__)
  return "AddressSanitizer's (a sanitizer build: not for production)";
#elif defined(__SANITIZE_THREAD__)
  return "ThreadSanitizer's (a sanitizer build: not for production)";
#else
  return "system malloc";
#endif
}

// Names in the startup log the scheduling policy the I/O threads run under:
// the process's, which every thread inherits; the warden never sets one of
// its own. Under SCHED_BATCH or SCHED_IDLE a woken thread does not preempt
// the task running on its CPU, so on a busy CPU each wakeup can wait for a
// scheduler tick (docs/configuration.md, "CPUs shared with the servers"):
// said as a warning, since an operator may not know the warden inherited it.
void log_scheduling_policy() {
  const int flagged = ::sched_getscheduler(0);
  if (flagged < 0) return;  // not readable here: nothing to say
  const int policy = flagged & ~SCHED_RESET_ON_FORK;
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, 0);
  const std::string niceness = errno == 0 ? fmt::format("nice {}", nice) : "nice unknown";
  switch (policy) {
    case SCHED_OTHER:
      spdlog::info("scheduling policy: SCHED_OTHER, {}", niceness);
      return;
    case SCHED_BATCH:
    case SCHED_IDLE:
      spdlog::warn(
          "scheduling policy: {}, {}: a woken I/O thread does not preempt a busy CPU's task and "
          "can wait for a scheduler tick (docs/configuration.md, \"CPUs shared with the servers\")",
          policy == SCHED_BATCH ? "SCHED_BATCH" : "SCHED_IDLE", niceness);
      return;
    case SCHED_FIFO:
    case SCHED_RR: {
      sched_param param{};
      ::sched_getparam(0, &param);
      spdlog::info("scheduling policy: {}, priority {}",
                   policy == SCHED_FIFO ? "SCHED_FIFO" : "SCHED_RR", param.sched_priority);
      return;
    }
    default:
      spdlog::info("scheduling policy: {}", policy);
  }
}

struct ServeOptions {
  std::string config_path;
  std::optional<std::string> listen;  // --listen, when given (an empty value is refused)
  std::string log_level = "info";
  bool check = false;  // load the file, say what it sets, and exit
  // The address of the socket a service manager passed, which is served in
  // place of the file's listen and --listen, at start and at each reload.
  std::optional<config::ListenAddress> passed_socket;
};

// A model as the start's log and --check describe it.
std::string model_summary(const config::ModelConfig& m) {
  // Where requests go without a rank: said only where a server has ranks
  // and affinity would give one.
  std::string unranked;
  if (m.affinity &&
      std::ranges::any_of(m.backends, [](const auto& b) { return b.data_parallel_size > 1; }))
    for (const std::string& route : m.unranked_routes)
      unranked += (unranked.empty() ? "; without a rank on multi-rank servers: " : ", ") + route;
  return "model " + m.names() + ": " + std::to_string(m.replica_count()) + " replica(s) on " +
         std::to_string(m.backends.size()) + " server(s), affinity " + (m.affinity ? "on" : "off") +
         ", spill threshold " + config::spill_threshold_text(m.spill_threshold) + unranked;
}

// The first backend of `cfg` that is the warden itself listening on
// `address`, as "model M's backend URL"; empty when none is.
std::string backend_at(const config::ListenAddress& address, const config::Config& cfg) {
  for (const auto& model : cfg.models)
    for (const auto& backend : model.backends)
      if (config::is_own_address(address, backend))
        return "model " + model.name + "'s backend " + backend.url;
  return {};
}

// The configuration file with --listen applied, or why it cannot be used.
// `in_force`, on a reload: the address the warden listens on, which a reload
// does not change; no backend may be it (the loader checks it, as it checks
// the file's own listen address).
Result<config::Config, std::string> load(const ServeOptions& opts,
                                         const config::ListenAddress* in_force = nullptr) {
  // --listen is read first, so that a wrong one is told beside the file's
  // errors rather than once they are mended.
  const std::string given =
      opts.listen ? "--listen " + (opts.listen->empty() ? "''" : *opts.listen) : "";
  std::optional<config::ListenAddress> address;
  std::string flag_error;
  if (opts.listen) {
    auto parsed = config::parse_listen_address(*opts.listen);
    if (parsed)
      address = *parsed;
    else
      flag_error = given + ": " + parsed.error();
  }
  auto loaded = config::load_config_file(opts.config_path, in_force);
  if (!loaded)
    return unexpected("invalid configuration\n" + (flag_error.empty() ? "" : flag_error + "\n") +
                      loaded.error().message());
  if (!flag_error.empty()) return unexpected(flag_error);
  config::Config cfg = std::move(loaded).value();
  if (address) {
    cfg.listen_host = address->host;
    cfg.listen_port = address->port;
    if (const auto loop = backend_at(*address, cfg); !loop.empty())
      return unexpected(given + ": " + loop +
                        " is that address: every request would come back to it");
  }
  if (opts.passed_socket) {
    cfg.listen_host = opts.passed_socket->host;
    cfg.listen_port = opts.passed_socket->port;
  }
  return cfg;
}

// A reload's changes for its log line: "KEY BEFORE → AFTER" for each key
// whose text changed, joined by ", ".
class ChangeList {
 public:
  void add(std::string_view key, const std::string& before, const std::string& after) {
    if (before != after)
      text_ += fmt::format("{}{} {} → {}", text_.empty() ? "" : ", ", key, before, after);
  }
  std::string text() && { return std::move(text_); }

 private:
  std::string text_;
};

// What a reload changed of a kept model's routing policy, for its log line:
// "spill_threshold auto → 1, affinity on → off"; "" when nothing.
std::string policy_changes(const config::ModelConfig& was, const config::ModelConfig& now) {
  ChangeList changed;
  const auto on = [](bool b) { return std::string(b ? "on" : "off"); };
  const auto list = [](const std::vector<std::string>& items) {
    return fmt::format("[{}]", fmt::join(items, ", "));
  };
  const auto sources = [&](const config::ModelConfig& m) {
    std::vector<std::string> labels;
    for (const auto& source : m.session_sources) labels.push_back(source.label());
    return list(labels);
  };
  changed.add("affinity", on(was.affinity), on(now.affinity));
  changed.add("spill_threshold", config::spill_threshold_text(was.spill_threshold),
              config::spill_threshold_text(now.spill_threshold));
  changed.add("session_ttl", fmt::format("{}s", was.session_ttl.count()),
              fmt::format("{}s", now.session_ttl.count()));
  changed.add("active_window", fmt::format("{}s", was.active_window.count()),
              fmt::format("{}s", now.active_window.count()));
  changed.add("session_sources", sources(was), sources(now));
  changed.add("honor_client_rank", on(was.honor_client_rank), on(now.honor_client_rank));
  changed.add("weights.in_flight", fmt::format("{}", was.weights.in_flight),
              fmt::format("{}", now.weights.in_flight));
  changed.add("weights.kv_used", fmt::format("{}", was.weights.kv_used),
              fmt::format("{}", now.weights.kv_used));
  changed.add("weights.live_conversations", fmt::format("{}", was.weights.live_conversations),
              fmt::format("{}", now.weights.live_conversations));
  changed.add("inject_stream_usage", on(was.inject_stream_usage), on(now.inject_stream_usage));
  changed.add("unranked_routes", list(was.unranked_routes), list(now.unranked_routes));
  changed.add("aliases", list(was.aliases), list(now.aliases));
  changed.add("max_conversations", std::to_string(was.max_conversations),
              std::to_string(now.max_conversations));
  changed.add("api_keys_env", list(was.api_keys_env), list(now.api_keys_env));
  return std::move(changed).text();
}

// What a reload changed of the settings that apply to every model and take
// effect at once (those that wait for a restart are said apart, as are
// saved_homes and the admin token): "retries 1 → 2, timeouts.idle 120s → 60s".
std::string settings_changes(const config::Config& was, const config::Config& now) {
  ChangeList changed;
  const auto duration = [](config::Millis d) {
    return d.count() % 1000 == 0 ? fmt::format("{}s", d.count() / 1000)
                                 : fmt::format("{}ms", d.count());
  };
  changed.add("retries", std::to_string(was.retries), std::to_string(now.retries));
  changed.add("eject_after_5xx", std::to_string(was.eject_after_5xx),
              std::to_string(now.eject_after_5xx));
  changed.add("eject_for", duration(was.eject_for), duration(now.eject_for));
  changed.add("timeouts.connect", duration(was.timeouts.connect), duration(now.timeouts.connect));
  changed.add("timeouts.first_byte", duration(was.timeouts.first_byte),
              duration(now.timeouts.first_byte));
  changed.add("timeouts.idle", duration(was.timeouts.idle), duration(now.timeouts.idle));
  changed.add("timeouts.shutdown_grace", duration(was.timeouts.shutdown_grace),
              duration(now.timeouts.shutdown_grace));
  const auto log = [](const std::string& path) { return path.empty() ? std::string("off") : path; };
  changed.add("access_log", log(was.access_log), log(now.access_log));
  return std::move(changed).text();
}

// SIGHUP: a configuration that does not load is refused, and the one in force
// keeps serving; requests in flight finish under the configuration they began
// with. Returns the shutdown grace now in force (`grace` when refused).
config::Millis reload(proxy::WardenRuntime& runtime, const ServeOptions& opts,
                      const config::ListenAddress& in_force, config::Millis grace) {
  auto cfg = load(opts, &in_force);
  if (!cfg) {
    // One log line per problem, each with its time and level (the loader's
    // "invalid configuration" heading dropped: the first line says it).
    std::vector<std::string_view> problems;
    for (std::string_view rest = cfg.error(); !rest.empty();) {
      const std::size_t end = rest.find('\n');
      problems.push_back(rest.substr(0, end));
      rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    }
    if (problems.size() > 1 && problems.front() == "invalid configuration")
      problems.erase(problems.begin());
    for (std::size_t i = 0; i < problems.size(); ++i)
      spdlog::error("reload of {} refused{}: {}", opts.config_path,
                    i == 0 ? "; still serving the previous configuration" : "", problems[i]);
    runtime.warden().reload_refused({problems.begin(), problems.end()});
    return grace;
  }
  // Each model, with what the reload changed of its policy (a model kept by
  // name; one renamed or whose replicas changed has lines of its own), then
  // the settings it changed.
  const auto before = runtime.warden().models();
  std::string summary;
  for (const auto& m : cfg->models) {
    summary += (summary.empty() ? "" : ", ") + m.name;
    const auto was = std::ranges::find(before->config.models, m.name, &config::ModelConfig::name);
    if (was == before->config.models.end()) {
      summary += " (new)";
    } else if (const std::string changed = policy_changes(*was, m); !changed.empty()) {
      summary += " (" + changed + ")";
    }
  }
  if (const std::string changed = settings_changes(before->config, *cfg); !changed.empty())
    summary += "; " + changed;
  grace = cfg->timeouts.shutdown_grace;
  for (const auto& line : runtime.reload(std::move(cfg).value())) spdlog::warn("reload: {}", line);
  spdlog::info("reloaded {}: models {}", opts.config_path, summary);
  return grace;
}

// Each client connection may hold an upstream connection as well: the soft
// limit on open files is raised to the hard one. Returns what to say of a
// limit that limits.max_connections may still outgrow, "" when none.
std::string fit_descriptor_limit(std::size_t max_connections) {
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0) return {};
  if (nofile.rlim_cur < nofile.rlim_max) {
    rlimit raised = nofile;
    raised.rlim_cur = nofile.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) nofile = raised;
  }
  const rlim_t needed = 2 * static_cast<rlim_t>(max_connections) + 64;
  if (nofile.rlim_cur == RLIM_INFINITY || nofile.rlim_cur >= needed) return {};
  return fmt::format(
      "open-file limit {} is below the {} that limits.max_connections {} may need (a client and an "
      "upstream descriptor each); raise it (ulimit -n, systemd LimitNOFILE=) or lower "
      "max_connections",
      static_cast<unsigned long long>(nofile.rlim_cur), static_cast<unsigned long long>(needed),
      max_connections);
}

// Whether a start could bind the listen address now, bound as the server
// binds it (SO_REUSEADDR) and closed at once, never listening: 0 or the
// errno. Port 0 (any free port) always can.
int bind_error(const std::string& host, std::uint16_t port) {
  if (port == 0) return 0;
  addrinfo hints{};
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return 0;
  int error = 0;
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      ::bind(fd, found->ai_addr, found->ai_addrlen) != 0)
    error = errno;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return error;
}

// What the file cannot settle but a start now would meet: the listen
// address taken, the homes file kept by another warden. Notes, not
// problems: the warden a reload is meant for holds both.
void print_start_notes(const config::Config& cfg) {
  const std::string listen = host_port(cfg.listen_host, cfg.listen_port);
  if (const int error = bind_error(cfg.listen_host, cfg.listen_port); error == EADDRINUSE)
    std::printf(
        "note: %s is in use now: a start would fail until it is free (a warden listening "
        "there keeps it across a reload)\n",
        listen.c_str());
  else if (error != 0)
    std::printf("note: cannot bind %s now (%s): a start would fail the same way\n", listen.c_str(),
                std::strerror(error));
  if (!cfg.saved_homes) return;
  const std::string& path = cfg.saved_homes->path;
  if (const auto holder = proxy::lock_holder(path))
    std::printf(
        "note: %s is kept now by %s: a start would fail while it runs (a reload of that "
        "warden keeps the file)\n",
        path.c_str(),
        *holder > 0 ? ("process " + std::to_string(*holder)).c_str()
                    : "a process of another PID namespace");
}

int serve(ServeOptions opts) {
  auto loaded = load(opts);
  if (!loaded) {
    say_error(loaded.error());
    return 2;
  }
  config::Config cfg = std::move(loaded).value();
  if (opts.check) {
    // What a start would take, without starting: nothing bound, nothing
    // connected, no signal sent (a running warden rereads the file on SIGHUP).
    std::printf("%s: the configuration is valid; it listens on %s\n", opts.config_path.c_str(),
                host_port(cfg.listen_host, cfg.listen_port).c_str());
    for (const auto& m : cfg.models) std::printf("%s\n", model_summary(m).c_str());
    std::printf("%s\n", proxy::run_time_control(cfg).c_str());
    if (!cfg.access_log.empty()) std::printf("access log: %s\n", cfg.access_log.c_str());
    if (cfg.saved_homes)
      std::printf("saved homes: %s, written every %g s\n", cfg.saved_homes->path.c_str(),
                  static_cast<double>(cfg.saved_homes->interval.count()) / 1000.0);
    if (const auto& shared = cfg.shared_homes) {
      // The URL as the logs show it: never its password.
      const auto address = homes::parse_redis_url(shared->redis);  // checked at load
      std::printf("shared homes: %s, keys under %s%s\n",
                  address ? homes::describe(*address).c_str() : "?", shared->key_prefix.c_str(),
                  shared->tls_server_name.empty()
                      ? ""
                      : (", its certificate checked for " + shared->tls_server_name).c_str());
    }
    print_start_notes(cfg);
    // As at a start, on this process's limit (a service manager may set another).
    if (const std::string low = fit_descriptor_limit(cfg.limits.max_connections); !low.empty())
      std::printf("note: %s\n", low.c_str());
    return 0;
  }
  spdlog::set_level(spdlog::level::from_str(opts.log_level));
  keep_serving_without_a_reader();

  // A socket passed by a service manager (packaging/lmwarden.socket) is
  // served instead of the configured address, and outlives this process.
  std::optional<net::PassedSocket> passed;
  try {
    passed = net::take_passed_socket();
  } catch (const std::runtime_error& e) {
    say_error(e.what());
    return 1;
  }
  std::string configured;  // the address the passed socket replaces, when another
  if (passed) {
    const config::ListenAddress address{passed->host, passed->port};
    if (const auto loop = backend_at(address, cfg); !loop.empty()) {
      say_error("the passed socket listens on " + host_port(address.host, address.port) +
                ", which is " + loop + ": every request would come back to it");
      return 2;
    }
    if (address != config::ListenAddress{cfg.listen_host, cfg.listen_port})
      configured = host_port(cfg.listen_host, cfg.listen_port);
    cfg.listen_host = address.host;
    cfg.listen_port = address.port;
    opts.passed_socket = address;
  }

  if (const std::string low = fit_descriptor_limit(cfg.limits.max_connections); !low.empty())
    spdlog::warn("{}", low);
  proxy::WardenRuntime runtime{cfg};
  if (passed) runtime.use_passed_socket(passed->fd);
  // SIGHUP reloads the configuration file; SIGUSR1 reopens the access log
  // (as nginx's does: logrotate's habit, which would otherwise end the
  // process); SIGINT/SIGTERM stop accepting.
  // Handled from before the port opens, so an early signal never kills it.
  net::asio::io_context signals_ctx{1};
  net::asio::signal_set signals{signals_ctx, SIGINT, SIGTERM, SIGHUP};
  signals.add(SIGUSR1);
  bool stopping = false;  // a first SIGINT/SIGTERM: the grace period runs
  bool give_up = false;   // a second one: end the grace period now
  // The configuration's, as last reloaded (also during the grace period).
  config::Millis grace = cfg.timeouts.shutdown_grace;
  // Where it listens: the port the OS picked once the port is open.
  config::ListenAddress listening{cfg.listen_host, cfg.listen_port};
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
          grace = reload(runtime, opts, listening, grace);
        } else if (sig == SIGUSR1) {
          if (runtime.reopen_access_log())
            spdlog::info("SIGUSR1: reopening the access log");
          else
            spdlog::info("SIGUSR1: no access_log to reopen (SIGHUP reloads the configuration)");
        } else if (stopping) {
          spdlog::warn("signal {} again: not waiting for requests in flight", sig);
          give_up = true;
        } else {
          spdlog::info("signal {}: no longer accepting; waiting for requests in flight", sig);
          stopping = true;
          runtime.stop_accepting();
          signals_ctx.stop();
        }
        signals.async_wait(on_signal);
      };
  net::tcp::endpoint bound;
  try {
    bound = runtime.start();
    listening.port = bound.port();
  } catch (const std::runtime_error& e) {  // the port, or the homes file another warden keeps
    say_error(e.what());
    return 1;
  }
  say_info("lmwarden listening on http://" + host_port(bound.address().to_string(), bound.port()));
  if (passed)
    spdlog::info(
        "the listening socket is the service manager's (socket activation): connections "
        "wait in it while no warden runs{}",
        configured.empty() ? "" : "; listen " + configured + " is not used");
  spdlog::info("memory allocator: {}", allocator_name());
  log_scheduling_policy();
  spdlog::info("{}", proxy::run_time_control(cfg));
  for (const auto& m : cfg.models) spdlog::info("{}", model_summary(m));

  signals.async_wait(on_signal);
  signals_ctx.run();

  // Grace period: requests in flight finish (a second signal cuts it short;
  // SIGHUP still reloads, and a new shutdown_grace counts from the signal);
  // then everything is torn down.
  const auto stop_signalled = std::chrono::steady_clock::now();
  signals_ctx.restart();
  while ((runtime.in_flight() > 0 || runtime.requests_under_way() > 0) && !give_up &&
         std::chrono::steady_clock::now() < stop_signalled + grace) {
    signals_ctx.run_for(std::chrono::milliseconds(50));
    if (signals_ctx.stopped()) signals_ctx.restart();
  }
  if (const int left = runtime.in_flight(); left > 0) {
    spdlog::warn("grace period over with {} request(s) in flight; ending them with an error",
                 left);
    // Each ends as a failed request does: an error for its client, its line
    // in the access log. Asked again while some remain (one may have been
    // connecting); a client that reads nothing more is not waited for long.
    const auto cut_until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (runtime.in_flight() > 0 && std::chrono::steady_clock::now() < cut_until) {
      runtime.cut_in_flight();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  runtime.shutdown();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto opts = std::make_shared<ServeOptions>();
  auto* cmd =
      app.add_subcommand("serve", "Run the affinity-routing proxy in front of vLLM replicas");
  cmd->add_option("-c,--config", opts->config_path,
                  "YAML configuration (see docs/configuration.md)")
      ->required();  // a file that cannot be read is reported as the loader's other problems are
  auto* listen = cmd->add_option("-l,--listen",
                                 "Override the listen address, HOST:PORT (port 0: any free port)")
                     ->type_name("HOST:PORT");
  // As the log names its levels too: [warning].
  cmd->add_option("--log-level", opts->log_level,
                  "trace, debug, info, warn (or warning), error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "warning", "error", "off"}))
      ->capture_default_str();
  cmd->add_flag("-t,--check", opts->check,
                "Check the configuration (with --listen) and exit: 0 and what it sets when a "
                "start would take it, 2 and every problem when not; nothing is started");
  cmd->callback([opts, listen] {
    if (listen->count() > 0) opts->listen = listen->as<std::string>();
    std::exit(serve(*opts));
  });
}

void keep_serving_without_a_reader() {
  std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace lmwarden::app
