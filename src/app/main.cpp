#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <spdlog/spdlog.h>

#include "app/commands.h"
#include "app/journal.h"
#include "config/config_loader.h"

#ifdef LMWARDEN_WITH_JEMALLOC
// jemalloc gives freed pages back to the kernel once they have lain unused for
// its decay time (dirty_decay_ms, 10 s), but only when an allocation outside a
// thread's cache comes to check: under a load of small requests, or none, the
// pages of an earlier burst of large bodies stayed resident for good (71 MB
// after 512 connections of 100 KB requests, unchanged 20 s later). Its own
// purging thread checks on time, at no cost to requests/s we could measure
// (docs/performance-history.md, round 23). Read before MALLOC_CONF, which
// overrides it.
extern "C" {
const char* malloc_conf = "background_thread:true";
}
#endif

namespace {

// Coding agents send 100 KB bodies and more, allocated and freed per request.
// glibc hands the free top of a thread's heap back to the kernel (madvise)
// once more than M_TRIM_THRESHOLD (128 KiB by default) is free there, so the
// next body faults its pages in again: under load that took a 100 KB request
// to about half its throughput (docs/performance-history.md, "What changed,
// and why"). Keep up to 64 MiB free for reuse, and take blocks up to 16 MiB
// from the heaps rather than from a fresh mapping each (fixing the first
// threshold stops glibc adapting the second). An operator's own
// GLIBC_TUNABLES or MALLOC_*_ settings win. A build on jemalloc (the default,
// LMWARDEN_ALLOCATOR) leaves glibc's allocator unused: jemalloc keeps freed
// pages for reuse on its own (docs/configuration.md).
void keep_freed_memory_for_reuse() {
#if defined(__GLIBC__) && !defined(LMWARDEN_WITH_JEMALLOC)
  for (const char* name : {"GLIBC_TUNABLES", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"})
    if (const char* value = std::getenv(name); value && *value) return;
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

// A first word that names no command: CLI11 would say only that a command
// is required. `help` and `version` are taken as the flags, the rest named,
// with the nearest command when it is one letter or two away. nullopt: parse.
std::optional<int> unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-' || argv[1][0] == '\0') return std::nullopt;
  const std::string_view word = argv[1];
  std::string names;
  std::string nearest;
  std::size_t nearest_distance = 3;
  for (const CLI::App* command : app.get_subcommands({})) {
    const std::string& name = command->get_name();
    if (name == word) return std::nullopt;
    names += (names.empty() ? "" : ", ") + name;
    if (const std::size_t d = lmwarden::config::edit_distance(word, name); d < nearest_distance) {
      nearest_distance = d;
      nearest = name;
    }
  }
  if (word == "help") {
    std::printf("%s", app.help().c_str());
    return 0;
  }
  if (word == "version") {
    std::printf("%s\n", app.version().c_str());
    return 0;
  }
  std::fprintf(stderr, "lmwarden: no command %.*s%s; the commands are %s (lmwarden --help)\n",
               static_cast<int>(word.size()), word.data(),
               nearest.empty() ? "" : (" (did you mean " + nearest + "?)").c_str(), names.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory_for_reuse();
  lmwarden::app::set_log_format();
  CLI::App app{"LM Warden: keeps each agent conversation on the vLLM replica that caches it",
               "lmwarden"};
  app.set_version_flag("--version", "lmwarden 0.1.0");
  app.require_subcommand(1);
  lmwarden::app::add_serve_command(app);
  lmwarden::app::add_sim_command(app);
  lmwarden::app::add_bench_command(app);
  if (const auto status = unknown_command(app, argc, argv)) return *status;
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return app.exit(e);  // a command's own exit status
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a command line that does not parse (an
    // unknown flag, a value out of range) exits 2, as other usage errors do.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    lmwarden::app::say_error(e.what());
    return 1;
  }
  return 0;
}
