// `lmwarden bench`: the benchmark of DESIGN §9 — online against a warden, or
// offline (--offline) through the evaluator — and its report.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "bench/online.h"
#include "bench/report.h"
#include "common/ascii.h"
#include "config/config_loader.h"
#include "evaluator/evaluator.h"
#include "evaluator/policy.h"
#include "workload/wire.h"

namespace lmwarden::app {
namespace {

struct BenchArgs {
  bool offline = false;
  std::string target;
  std::string model;
  std::vector<int> sessions = {4, 8, 16, 24, 32};
  double step_seconds = 180;
  std::vector<std::string> arms = {"off", "on"};
  double time_scale = 1;
  std::string out;
  std::string admin_token_env = "LMWARDEN_ADMIN_TOKEN";
  std::vector<std::string> backend_metrics;
  std::string dialect = "openai";
  bool no_session_id = false;
  workload::WorkloadConfig workload;
  std::string profile = "a4000-qwen3-4b";
  int replicas = 4;
  int num_gpu_blocks = 0;
  int repeats = 1;  // offline
  bool quiet = false;
  std::string run_id;  // online; empty: a random one
};

std::string now_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string fmt_opt(const std::optional<double>& v, const char* unit) {
  return v ? fmt::format("{:.2f}{}", *v, unit) : std::string("–");
}

int finish(const BenchArgs& a, const bench::RunInfo& info,
           const std::vector<evaluator::StepResult>& steps) {
  std::printf("%s", bench::markdown_table(steps, info.arms).c_str());
  if (!a.out.empty()) {
    if (auto err = bench::write_report(a.out, info, steps)) {
      std::fprintf(stderr, "lmwarden bench: %s\n", err->c_str());
      return 1;
    }
    std::printf("\nReport: %s/report.md, %s/results.json, %s/report.html\n", a.out.c_str(),
                a.out.c_str(), a.out.c_str());
  }
  return 0;
}

// Eight hex digits, new for each run.
std::string random_run_id() {
  std::random_device rd;
  return fmt::format("{:08x}", rd());
}

int run_offline(const BenchArgs& a) {
  evaluator::EvaluatorConfig c;
  c.workload = a.workload;
  c.profile = a.profile;
  c.replicas = a.replicas;
  c.steps = a.sessions;
  c.step_seconds = a.step_seconds;
  c.arms = a.arms;
  c.num_gpu_blocks = a.num_gpu_blocks;
  c.repeats = a.repeats;
  const auto started = std::chrono::steady_clock::now();
  auto results = evaluator::run_offline(c, [&](const evaluator::StepResult& s) {
    if (a.quiet) return;
    std::fprintf(stderr, "  %3d sessions  %-16s hit %5.1f%%  TTFB p50 %s\n", s.sessions,
                 s.policy.c_str(), s.prefix_hit_pct.value_or(0),
                 fmt_opt(s.ttfb_p50_s, " s").c_str());
  });
  if (!results) {
    std::fprintf(stderr, "lmwarden bench: %s\n", results.error().c_str());
    return 2;
  }
  if (!a.quiet) {
    std::fprintf(stderr, "offline: %zu runs in %.1f s of wall time\n\n",
                 results->size() * static_cast<std::size_t>(a.repeats),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  bench::RunInfo info{.mode = "offline",
                      .workload = a.workload,
                      .profile = a.profile,
                      .replicas = a.replicas,
                      .steps = a.sessions,
                      .arms = a.arms,
                      .step_seconds = a.step_seconds,
                      .repeats = a.repeats};
  return finish(a, info, *results);
}

int run_online(const BenchArgs& a) {
  if (a.target.empty() || a.model.empty()) {
    std::fprintf(stderr, "lmwarden bench: --target and --model are required (or use --offline)\n");
    return 2;
  }
  bench::OnlineOptions o;
  o.target = a.target;
  o.model = a.model;
  o.workload = a.workload;
  o.dialect = *workload::parse_dialect(a.dialect);
  o.session_ids = !a.no_session_id;
  o.steps = a.sessions;
  o.step_seconds = a.step_seconds;
  o.arms = a.arms;
  o.time_scale = a.time_scale;
  o.backend_metrics = a.backend_metrics;
  o.run_id = a.run_id.empty() ? random_run_id() : a.run_id;
  o.stop_on_signal = true;
  if (const char* token = std::getenv(a.admin_token_env.c_str()); token && *token)
    o.admin_token = token;
  if (!o.admin_token && a.arms.size() > 1) {
    std::fprintf(stderr,
                 "lmwarden bench: switching arms needs the warden's admin token in $%s "
                 "(--admin-token-env), or run a single arm\n",
                 a.admin_token_env.c_str());
    return 2;
  }
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  // Off a terminal (a log file, CI) a line per 10 s of wall time is plenty.
  auto last_line = std::chrono::steady_clock::now() - std::chrono::hours(1);
  int failure_told = -1;  // the step whose first failure was printed
  auto progress = [&](const bench::Progress& p) {
    if (a.quiet) return;
    if (!p.first_failure.empty() && p.index != failure_told) {
      failure_told = p.index;
      std::fprintf(stderr, "%s[%d/%d] a request failed: %s\n", tty ? "\r\033[K" : "", p.index + 1,
                   p.total, p.first_failure.c_str());
    }
    const auto now = std::chrono::steady_clock::now();
    if (!tty && now - last_line < std::chrono::seconds(10)) return;
    last_line = now;
    std::fprintf(
        stderr,
        "%s[%d/%d] %d sessions, arm %s: %.0f/%.0f s, %llu requests (%llu failed), "
        "%llu sessions done, TTFB p50 %s, busy %s   %s",
        tty ? "\r" : "", p.index + 1, p.total, p.sessions, p.arm.c_str(), p.elapsed_s, p.duration_s,
        static_cast<unsigned long long>(p.requests), static_cast<unsigned long long>(p.failed),
        static_cast<unsigned long long>(p.sessions_completed), fmt_opt(p.ttfb_p50_s, " s").c_str(),
        fmt_opt(p.replicas_busy, "").c_str(), tty ? "" : "\n");
    std::fflush(stderr);
  };
  bench::RunInfo info{.mode = "online",
                      .workload = a.workload,
                      .dialect = a.dialect,
                      .session_ids = !a.no_session_id,
                      .target = a.target,
                      .model = a.model,
                      .backend_metrics = a.backend_metrics,
                      .steps = a.sessions,
                      .arms = a.arms,
                      .step_seconds = a.step_seconds,
                      .time_scale = a.time_scale,
                      .started_at = now_iso8601(),
                      .run_id = o.run_id};
  // Each step done is in the report at once, so a run that fails later, or
  // is interrupted, keeps what it measured.
  std::vector<evaluator::StepResult> done;
  const std::size_t planned = a.sessions.size() * a.arms.size();
  auto step_done = [&](const evaluator::StepResult& s) {
    done.push_back(s);
    info.replicas = std::max(info.replicas, static_cast<int>(s.samples.replicas.size()));
    // Until the run ends its report says so: one left behind by a killed
    // run does not pass for complete.
    info.stopped = fmt::format("still running: {} of {} steps done", done.size(), planned);
    if (!a.out.empty()) {
      if (auto err = bench::write_report(a.out, info, done))
        std::fprintf(stderr, "%slmwarden bench: %s\n", tty ? "\n" : "", err->c_str());
    }
    if (a.quiet) return;
    std::fprintf(stderr, "%s  %3d sessions  arm %-4s hit %s  TTFB p50 %s  stayed %s\n",
                 tty ? "\n" : "", s.sessions, s.arm.c_str(), fmt_opt(s.prefix_hit_pct, "%").c_str(),
                 fmt_opt(s.ttfb_p50_s, " s").c_str(), fmt_opt(s.stayed_pct, "%").c_str());
  };
  auto run = bench::run_online(o, progress, step_done);
  if (!run) {
    std::fprintf(stderr, "%slmwarden bench: %s\n", tty ? "\n" : "", run.error().c_str());
    return 1;
  }
  if (run->settings_restored) {
    std::fprintf(stderr, "%smodel %s put back as the run found it: %s\n", tty ? "\n" : "",
                 a.model.c_str(), run->settings_restored->c_str());
  } else if (run->settings_not_restored) {
    std::fprintf(stderr, "%slmwarden bench: warning: %s\n", tty ? "\n" : "",
                 run->settings_not_restored->c_str());
  }
  if (run->stopped) std::fprintf(stderr, "lmwarden bench: %s\n", run->stopped->c_str());
  if (!run->backends.empty()) info.backend_metrics = run->backends;
  info.stopped = run->stopped;
  std::printf("\n");
  // The steps as they were reported: a run stopped by a second signal
  // returns none of its own.
  const int rc = finish(a, info, done);
  if (run->interrupted()) return 128 + run->signal;  // as a shell reports the signal
  if (rc != 0 || run->stopped || run->settings_not_restored) return 1;
  return 0;
}

// What is wrong with the arguments taken together, before anything runs (each
// flag's own range is checked as it is parsed).
std::optional<std::string> usage_error(const BenchArgs& a) {
  if (auto err = a.workload.validate()) return err;
  for (std::size_t i = 0; i < a.arms.size(); ++i) {
    if (!a.offline) {
      if (auto err = bench::validate_online_arm(a.arms[i])) return "--arms: " + *err;
    }
    if (std::find(a.arms.begin(), a.arms.begin() + static_cast<std::ptrdiff_t>(i), a.arms[i]) !=
        a.arms.begin() + static_cast<std::ptrdiff_t>(i))
      return "--arms names " + a.arms[i] + " twice";
  }
  if (!a.offline && a.repeats != 1)
    return "--repeats is for --offline runs: an online step runs once, against the engines";
  if (!a.offline && !a.target.empty()) {
    // The warden's address, not a server's: said in its own terms where the
    // backends' parser would speak of vLLM and probes.
    if (ascii_istarts_with(a.target, "https://"))
      return "--target " + a.target + ": the warden serves plain HTTP; give its http:// address";
    auto target = config::parse_backend_url(a.target);
    if (!target && ascii_lowercase(a.target).find("/v1") != std::string::npos)
      return "--target " + a.target +
             ": give the warden's root, e.g. http://127.0.0.1:8080 (the benchmark adds "
             "/v1/chat/completions and /api/models/… itself)";
    if (!target) return "--target " + a.target + ": " + target.error();
  }
  if (!a.out.empty()) {
    if (auto err = bench::prepare_report_dir(a.out)) return "--out " + *err;
  }
  return std::nullopt;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Benchmark agent sessions against a warden (or offline, in simulated time)");
  cmd->add_flag("--offline", a->offline,
                "run the offline evaluator (routing core + engine model, virtual time) instead");
  cmd->add_option("--target", a->target, "the warden's URL, e.g. http://127.0.0.1:8080");
  cmd->add_option("--model", a->model, "model name to send (as configured in the warden)");
  cmd->add_option_function<std::vector<std::string>>(
         "--sessions",
         [a](const std::vector<std::string>& values) {
           a->sessions.clear();
           for (const auto& item : list_items(values)) a->sessions.push_back(std::stoi(item));
         },
         "concurrent sessions per step")
      ->check(list_of(whole_number(1, 4096)))
      ->default_str("4,8,16,24,32");
  cmd->add_option("--step-seconds", a->step_seconds,
                  "duration of each step and arm (simulated seconds)")
      ->check(positive_number())
      ->capture_default_str();
  std::string arms_help =
      "arms, compared in each cell: off (vLLM's balancer), on (the warden), "
      "warden:N (spill threshold N); offline also:";
  for (const auto& p : evaluator::known_policies()) arms_help += fmt::format(" {}", p.spec);
  cmd->add_option_function<std::vector<std::string>>(
         "--arms", [a](const std::vector<std::string>& values) { a->arms = list_items(values); },
         arms_help)
      ->check(list_of(any_text("ARM")))
      ->default_str("off,on");
  cmd->add_option(
         "--time-scale", a->time_scale,
         "the simulator's --time-scale behind the warden: times are reported in simulated seconds")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--out", a->out, "directory for report.md, results.json and report.html");
  cmd->add_option("--admin-token-env", a->admin_token_env,
                  "environment variable with the warden's admin token (to switch arms)")
      ->capture_default_str();
  cmd->add_option_function<std::vector<std::string>>(
         "--backend-metrics",
         [a](const std::vector<std::string>& values) { a->backend_metrics = list_items(values); },
         "base URLs of the backends whose /metrics to poll (default: the model's backends)")
      ->check(list_of(any_text("URL")));
  cmd->add_flag("--no-session-id", a->no_session_id,
                "online: send no session id, as agents that send only their messages (for the "
                "warden's `opening` session source)");
  cmd->add_option("--dialect", a->dialect, "wire dialect of the sessions")
      ->check(CLI::IsMember({"openai", "anthropic", "responses"}))
      ->capture_default_str();
  cmd->add_option("--seed", a->workload.seed, "workload seed (both arms draw the same sessions)")
      ->check(whole_number(0, std::numeric_limits<std::int64_t>::max()))
      ->capture_default_str();
  cmd->add_option("--repeats", a->repeats,
                  "offline: runs of each cell, with seeds --seed, --seed + 1, …, pooled")
      ->check(whole_number(1, evaluator::kMaxRepeats))
      ->capture_default_str();
  cmd->add_option("--system-tokens", a->workload.system_prompt_tokens, "shared system prompt size")
      ->check(whole_number(0, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--first-user-tokens", a->workload.first_user_tokens,
                  "first user message size (unique per session)")
      ->check(whole_number(64, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--followup-turns", a->workload.followup_turns, "turns after the first")
      ->check(whole_number(0, 10'000))
      ->capture_default_str();
  cmd->add_option("--followup-tokens", a->workload.followup_tokens, "new tokens per later turn")
      ->check(whole_number(1, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--max-output-tokens", a->workload.max_output_tokens, "max_tokens per turn")
      ->check(whole_number(1, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--tool-seconds", a->workload.tool_seconds,
                  "mean seconds an agent runs a tool between a reply and its next turn")
      ->check(finite_number(0, 3600, false))
      ->capture_default_str();
  cmd->add_option("--skew", a->workload.heavy_share,
                  "share of heavy sessions (first message --heavy-factor times longer)")
      ->check(fraction())
      ->capture_default_str();
  cmd->add_option("--heavy-factor", a->workload.heavy_factor, "size factor of heavy sessions")
      ->check(finite_number(1, 100, false))
      ->capture_default_str();
  cmd->add_option("--profile", a->profile, "offline: hardware profile of the simulated replicas")
      ->capture_default_str();
  cmd->add_option("--replicas", a->replicas, "offline: replicas (data-parallel ranks)")
      ->check(whole_number(1, 64))
      ->capture_default_str();
  cmd->add_option("--num-gpu-blocks", a->num_gpu_blocks,
                  "offline: override the profile's KV blocks per replica")
      ->check(whole_number(1, 100'000'000));
  cmd->add_option("--run-id", a->run_id,
                  "online: text in every session's first line, so that no earlier run's cache "
                  "serves this one's prompts (default: random); repeat one to replay its prompts");
  cmd->add_flag("-q,--quiet", a->quiet, "no progress output");
  cmd->callback([a] {
    if (auto err = usage_error(*a)) {
      std::fprintf(stderr, "lmwarden bench: %s\n", err->c_str());
      throw CLI::RuntimeError(2);
    }
    const int rc = a->offline ? run_offline(*a) : run_online(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace lmwarden::app
