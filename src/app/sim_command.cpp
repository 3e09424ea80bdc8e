// `lmwarden sim`: one simulated vLLM server with N data-parallel ranks.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "common/ascii.h"
#include "common/host_port.h"
#include "config/config_loader.h"
#include "engine/engine.h"
#include "engine/hardware_profile.h"
#include "sim/sim_server.h"

namespace lmwarden::app {
namespace {

struct SimArgs {
  std::string listen = "127.0.0.1:8000";
  int dp = 1;
  std::string model = "Qwen/Qwen3-4B-Instruct-2507";
  std::string profile{engine::kDefaultProfile};
  double time_scale = 1.0;
  std::uint64_t seed = 0;
  double early_stop_prob = 0.0;
  int num_gpu_blocks = 0;
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
  bool no_prefix_caching = false;
  bool no_prompt_tokens_details = false;
  bool strict_model = false;
  bool responses_store = false;
  bool list_profiles = false;
};

constexpr const char* kResponsesStoreEnv = "VLLM_ENABLE_RESPONSES_API_STORE";

// The store switch as vLLM reads it, bool(int(value)): any integer, non-zero
// meaning on; and, beyond vLLM, true or false in any case. Empty for anything
// else, on which vLLM fails to start (and so does the simulator).
std::optional<bool> responses_store_env(std::string_view text) {
  auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  if (ascii_iequals(text, "true")) return true;
  if (ascii_iequals(text, "false")) return false;
  std::string_view digits = text;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return digits.find_first_not_of('0') != std::string_view::npos;
}

void print_profiles() {
  for (const auto& p : engine::hardware_profiles()) {
    std::printf(
        "%-16s %s\n  blocks %d × %d tokens, max_num_seqs %d, max_num_batched_tokens %d, "
        "max_model_len %d\n  step = %.4f s + %.3g s/prefill token + %.3g s/context token + "
        "%.3g s/seq\n",
        std::string(p.name).c_str(), std::string(p.description).c_str(), p.num_gpu_blocks,
        p.block_size, p.max_num_seqs, p.max_num_batched_tokens, p.max_model_len, p.step_time.fixed,
        p.step_time.per_prefill_token, p.step_time.per_context_token, p.step_time.per_sequence);
  }
}

int run_sim(const SimArgs& args) {
  if (args.list_profiles) {
    print_profiles();
    return 0;
  }
  const engine::HardwareProfile* profile = engine::find_hardware_profile(args.profile);
  if (!profile) {
    std::fprintf(stderr, "lmwarden sim: unknown profile '%s' (see --list-profiles)\n",
                 args.profile.c_str());
    return 2;
  }
  sim::SimOptions options;
  options.model = args.model;
  options.strict_model = args.strict_model;
  options.dp_size = args.dp;
  options.profile = args.profile;
  options.time_scale = args.time_scale;
  options.engine = engine::EngineConfig::from_profile(*profile);
  options.engine.seed = args.seed;
  options.engine.early_stop_probability = args.early_stop_prob;
  options.engine.enable_prefix_caching = !args.no_prefix_caching;
  options.prompt_tokens_details = !args.no_prompt_tokens_details;
  options.responses_store = args.responses_store;
  if (const char* env = std::getenv(kResponsesStoreEnv)) {
    const std::optional<bool> on = responses_store_env(env);
    if (!on) {
      std::fprintf(stderr, "lmwarden sim: %s=%s: want an integer (0 off, else on), true or false\n",
                   kResponsesStoreEnv, env);
      return 2;
    }
    options.responses_store = options.responses_store || *on;
  }
  if (args.num_gpu_blocks > 0) options.engine.num_gpu_blocks = args.num_gpu_blocks;
  if (args.max_num_seqs > 0) options.engine.max_num_seqs = args.max_num_seqs;
  if (args.max_num_batched_tokens > 0)
    options.engine.max_num_batched_tokens = args.max_num_batched_tokens;
  // Each rank's blocks are held from the start: a bound on them all, so that
  // two flags each in range cannot take the host's memory (a GPU has tens
  // of thousands of blocks; the bound is a thousand times that).
  constexpr long long kMostBlocks = 64'000'000;
  if (const long long all = static_cast<long long>(args.dp) * options.engine.num_gpu_blocks;
      all > kMostBlocks) {
    std::fprintf(stderr,
                 "lmwarden sim: --dp %d with %d KV blocks per rank is %lld blocks in all, more "
                 "than the simulator holds (%lld): give fewer blocks or fewer ranks\n",
                 args.dp, options.engine.num_gpu_blocks, all, kMostBlocks);
    return 2;
  }
  if (auto shortfall = engine::cache_shortfall(options.engine)) {
    std::fprintf(stderr, "lmwarden sim: --num-gpu-blocks %d: %s\n", args.num_gpu_blocks,
                 shortfall->c_str());
    return 2;
  }

  // Checked as serve checks its own: an address, never a name to resolve.
  const auto address = config::parse_listen_address(args.listen);
  if (!address) {
    std::fprintf(stderr, "lmwarden sim: --listen %s: %s\n", args.listen.c_str(),
                 address.error().c_str());
    return 2;
  }

  keep_serving_without_a_reader();
  sim::SimServer server(options);
  sim::SimServer::Address bound;
  try {
    bound = server.listen(host_port(address->host, address->port));
  } catch (const std::system_error& e) {  // the address is in use, or cannot be bound
    std::fprintf(stderr, "lmwarden sim: %s\n", e.what());
    return 1;
  }
  server.start();
  std::printf("lmwarden sim: %d rank(s) of %s, profile %s, time scale %g, seed %llu\n", args.dp,
              args.model.c_str(), args.profile.c_str(), args.time_scale,
              static_cast<unsigned long long>(args.seed));
  // Tests and scripts read the port from this line.
  std::printf("listening on %s\n", bound.url().c_str());
  std::fflush(stdout);
  server.wait_for_shutdown_signal();
  std::printf("lmwarden sim: shutting down\n");
  std::fflush(stdout);
  server.stop();
  return 0;
}

}  // namespace

void add_sim_command(CLI::App& app) {
  auto args = std::make_shared<SimArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sim", "Run a simulated vLLM server (data-parallel ranks on a virtual GPU)");
  cmd->add_option("--listen", args->listen, "HOST:PORT to listen on (port 0 picks a free one)")
      ->capture_default_str();
  cmd->add_option("--dp,--data-parallel-size", args->dp, "data-parallel ranks (replicas)")
      ->check(whole_number(1, 64))
      ->capture_default_str();
  cmd->add_option("--model,--served-model-name", args->model, "served model name")
      ->capture_default_str();
  cmd->add_option("--profile", args->profile, "hardware profile (see --list-profiles)")
      ->capture_default_str();
  cmd->add_option("--time-scale", args->time_scale, "engine seconds per wall second (S× faster)")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of the generated output")
      ->check(whole_number(0, std::numeric_limits<std::int64_t>::max()))
      ->capture_default_str();
  cmd->add_option("--early-stop-prob", args->early_stop_prob,
                  "chance that a reply stops before max_tokens (finish_reason stop)")
      ->check(fraction())
      ->capture_default_str();
  cmd->add_option("--num-gpu-blocks", args->num_gpu_blocks,
                  "override the profile's KV blocks per rank (they must hold max_model_len)")
      ->check(whole_number(1, 100'000'000));
  cmd->add_option("--max-num-seqs", args->max_num_seqs, "override the profile's max_num_seqs")
      ->check(whole_number(1, 65'536));
  cmd->add_option("--max-num-batched-tokens", args->max_num_batched_tokens,
                  "override the profile's max_num_batched_tokens")
      ->check(whole_number(1, 100'000'000));
  cmd->add_flag("--no-enable-prefix-caching", args->no_prefix_caching, "disable prefix caching");
  cmd->add_flag("--no-enable-prompt-tokens-details", args->no_prompt_tokens_details,
                "usage without the prompt's cached count, as vLLM started without "
                "--enable-prompt-tokens-details");
  cmd->add_flag("--strict-model", args->strict_model,
                "answer 404 for model names other than --model (as vLLM does)");
  cmd->add_flag("--enable-responses-store", args->responses_store,
                "keep /v1/responses replies so that previous_response_id can continue them, as "
                "vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1 (that variable turns it on too); "
                "the newest 100,000 are kept");
  cmd->add_flag("--list-profiles", args->list_profiles, "print the hardware profiles and exit");
  cmd->callback([args] {
    const int rc = run_sim(*args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace lmwarden::app
