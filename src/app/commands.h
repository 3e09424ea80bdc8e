// Subcommands of the `lmwarden` binary. Each registers itself on the CLI11 app
// and runs when selected; main.cpp only wires them together.
#pragma once

#include <CLI/CLI.hpp>

namespace lmwarden::app {

void add_serve_command(CLI::App& app);  // the affinity-routing proxy
void add_sim_command(CLI::App& app);    // the vLLM-compatible simulator
void add_bench_command(CLI::App& app);  // the benchmark and the offline policy evaluator

// For the servers (serve, sim): a write to an output nothing reads any more
// (`lmwarden serve | tee log` after a Ctrl-C that ended tee first, a closed
// terminal) fails rather than raising SIGPIPE, whose default action would end
// the process there, before its drain, with its saved homes unwritten.
void keep_serving_without_a_reader();

}  // namespace lmwarden::app
