// Subcommands of the `lmwarden` binary. Each registers itself on the CLI11 app
// and runs when selected; main.cpp only wires them together.
#pragma once

#include <CLI/CLI.hpp>

namespace lmwarden::app {

void add_serve_command(CLI::App& app);  // the affinity-routing proxy
void add_sim_command(CLI::App& app);    // the vLLM-compatible simulator
void add_bench_command(CLI::App& app);  // the benchmark and the offline policy evaluator

}  // namespace lmwarden::app
