#include <cstdio>
#include <exception>

#include "app/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"LM Warden: keeps each agent conversation on the vLLM replica that caches it"};
  app.set_version_flag("--version", "lmwarden 0.1.0");
  app.require_subcommand(1);
  lmwarden::app::add_serve_command(app);
  lmwarden::app::add_sim_command(app);
  lmwarden::app::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lmwarden: %s\n", e.what());
    return 1;
  }
  return 0;
}
