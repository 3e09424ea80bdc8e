// The benchmark end to end: a real warden (`lmwarden serve`) in front of a
// time-scaled simulator (`lmwarden sim`), both child processes, driven by the
// online runner for a few simulated steps; and the command's offline mode.
// Assertions are on the report's contents, never on wall-clock times.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/online.h"
#include "bench/report.h"
#include "sim_test_client.h"

namespace lmwarden::bench {
namespace {

namespace fs = std::filesystem;

// A child `lmwarden sim|serve …` on 127.0.0.1 port 0, and its URL.
class Child {
 public:
  explicit Child(std::vector<std::string> args) : process_(std::move(args)) {}
  std::string url() const { return "http://127.0.0.1:" + std::to_string(process_.port()); }
  std::uint16_t port() const { return process_.port(); }
  void kill() const { process_.signal(SIGKILL); }

 private:
  testing::SimProcess process_;  // SIGTERM, then SIGKILL, on destruction
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

constexpr double kTimeScale = 20;

// Small sessions keep the simulator ahead of the clock under sanitizers.
workload::WorkloadConfig small_workload() {
  return {.seed = 3,
          .system_prompt_tokens = 600,
          .first_user_tokens = 900,
          .followup_turns = 2,
          .followup_tokens = 100,
          .max_output_tokens = 24,
          .tool_seconds = 0.5};
}

// A run of one step whose requests were all served, with first tokens and
// output, and whose conversations kept to their homes.
void expect_one_step_kept_home(const Result<OnlineRun, std::string>& run) {
  ASSERT_TRUE(run) << run.error();
  ASSERT_EQ(run->steps.size(), 1u);
  const auto& s = run->steps[0];
  EXPECT_EQ(s.samples.requests_failed, 0u) << s.samples.first_failure;
  EXPECT_FALSE(s.samples.ttfb_s.empty());
  EXPECT_GT(s.output_tokens, 0);
  ASSERT_TRUE(s.stayed_pct);
  EXPECT_GT(*s.stayed_pct, 90.0);
}

// One arm, "on", against the warden at `target` (no admin token: the warden
// runs as configured), with the small sessions at the tests' time scale.
OnlineOptions as_configured(const std::string& target, std::vector<int> steps, double seconds) {
  OnlineOptions o;
  o.target = target;
  o.model = "qwen3";
  o.workload = small_workload();
  o.steps = std::move(steps);
  o.step_seconds = seconds;
  o.arms = {"on"};
  o.time_scale = kTimeScale;
  return o;
}

TEST(BenchOnline, WardenAndTimeScaledSimulatorProduceACompleteReport) {
  const fs::path dir = temp_dir("lmwarden-bench");
  Child sim(
      {"sim", "--listen", "127.0.0.1:0", "--dp", "2", "--time-scale", std::to_string(kTimeScale)});
  ::setenv("LMWARDEN_BENCH_TEST_TOKEN", "bench-secret", 1);
  const fs::path config = dir / "warden.yaml";
  std::ofstream(config) << "listen: 127.0.0.1:0\n"
                        << "admin_token_env: LMWARDEN_BENCH_TEST_TOKEN\n"
                        << "scrape_interval: 100ms\n"
                        << "models:\n  - name: qwen3\n    backends:\n      - url: " << sim.url()
                        << "\n        data_parallel_size: 2\n";
  Child warden({"serve", "-c", config.string(), "--log-level", "warn"});

  OnlineOptions o;
  o.target = warden.url();
  o.model = "qwen3";
  o.workload = small_workload();
  o.steps = {2, 3};
  o.step_seconds = 40;  // 2 s of wall time per step and arm
  o.arms = {"off", "on"};
  o.time_scale = kTimeScale;
  o.admin_token = "bench-secret";
  int progress_calls = 0;
  auto run = run_online(o, [&](const Progress&) { ++progress_calls; });
  ASSERT_TRUE(run) << run.error();
  EXPECT_GT(progress_calls, 0);
  ASSERT_EQ(run->steps.size(), 4u);
  EXPECT_EQ(run->replicas, 2);
  for (const auto& s : run->steps) {
    SCOPED_TRACE(std::to_string(s.sessions) + " " + s.arm);
    EXPECT_GT(s.samples.requests_sent, 0u);
    EXPECT_EQ(s.samples.requests_failed, 0u);
    // Each request counted ended in the step: those the step's end cut
    // short are not counted.
    EXPECT_EQ(s.samples.requests_sent, s.samples.turn_s.size());
    EXPECT_FALSE(s.samples.ttfb_s.empty());
    EXPECT_TRUE(s.ttfb_p50_s && s.ttfb_p95_s);
    EXPECT_GT(s.output_tokens, 0);
    EXPECT_FALSE(s.samples.replicas_busy.empty());
    ASSERT_TRUE(s.prefix_hit_pct);  // the engines' own counters moved
    EXPECT_GT(*s.prefix_hit_pct, 0.0);
    if (s.arm == "on") {
      ASSERT_TRUE(s.stayed_pct);  // read from the warden's counters
      EXPECT_GT(*s.stayed_pct, 90.0);
    } else {
      EXPECT_FALSE(s.stayed_pct);  // vLLM chose the rank: unknown
    }
  }

  RunInfo info{.mode = "online",
               .workload = o.workload,
               .dialect = "openai",
               .target = o.target,
               .model = o.model,
               .backend_metrics = run->backends,
               .replicas = run->replicas,
               .steps = o.steps,
               .arms = o.arms,
               .step_seconds = o.step_seconds,
               .time_scale = kTimeScale};
  ASSERT_FALSE(write_report(dir.string(), info, run->steps));
  const std::string table = read_file(dir / "report.md");
  EXPECT_TRUE(table.starts_with("Online run against " + warden.url() +
                                " (model qwen3, openai dialect), 40 s per step"))
      << table;
  EXPECT_NE(table.find("| sessions | sessions/h"), std::string::npos);
  EXPECT_NE(table.find("\n| 2 | "), std::string::npos);
  EXPECT_NE(table.find("\n| 3 | "), std::string::npos);
  EXPECT_NE(table.find(" → "), std::string::npos);
  const auto json = nlohmann::json::parse(read_file(dir / "results.json"));
  EXPECT_EQ(json["workload"]["seed"], 3);
  EXPECT_EQ(json["workload"]["time_scale"], kTimeScale);
  ASSERT_EQ(json["steps"].size(), 4u);
  for (const auto& s : json["steps"]) {
    for (const char* key :
         {"sessions", "arm", "duration_s", "sessions_per_hour", "output_tokens_per_min",
          "ttfb_p50_s", "ttfb_p95_s", "replicas_busy", "prefix_hit_pct", "stayed_pct"}) {
      EXPECT_TRUE(s.contains(key)) << key;
    }
    EXPECT_FALSE(s["samples"]["ttfb_s"].empty());
    EXPECT_TRUE(s["samples"]["followups"].is_null()) << "counted offline only";
  }
  const std::string html = read_file(dir / "report.html");
  EXPECT_NE(html.find("uPlot"), std::string::npos);  // the embedded chart library
  EXPECT_NE(html.find("const REPORT = {"), std::string::npos);
  EXPECT_EQ(html.find("<script src="), std::string::npos);  // self-contained
  fs::remove_all(dir);
}

TEST(BenchOnline, AnthropicDialectThroughTheWarden) {
  Child sim(
      {"sim", "--listen", "127.0.0.1:0", "--dp", "2", "--time-scale", std::to_string(kTimeScale)});
  const fs::path dir = temp_dir("lmwarden-bench-anthropic");
  const fs::path config = dir / "warden.yaml";
  std::ofstream(config)
      << "listen: 127.0.0.1:0\nmodels:\n  - name: qwen3\n    backends:\n      - url: " << sim.url()
      << "\n        data_parallel_size: 2\n";
  Child warden({"serve", "-c", config.string(), "--log-level", "warn"});
  OnlineOptions o = as_configured(warden.url(), {2}, 30);
  o.dialect = workload::Dialect::kAnthropic;
  expect_one_step_kept_home(run_online(o));
  fs::remove_all(dir);
}

// Codex's current wire API through the warden. Behind a server per rank each
// conversation stays on its rank. Behind one two-rank server it cannot: vLLM's
// /v1/responses reads no rank header, so the warden sends those requests to
// the server without one, and the report has no "stayed" figure.
TEST(BenchOnline, ResponsesDialectStaysOnlyWhereEachRankIsAServer) {
  const std::string scale = std::to_string(kTimeScale);
  const fs::path dir = temp_dir("lmwarden-bench-responses");
  auto run_behind = [&](const std::vector<const Child*>& sims, int ranks_each) {
    const fs::path config = dir / "warden.yaml";
    std::ofstream out(config);
    out << "listen: 127.0.0.1:0\nmodels:\n  - name: qwen3\n    backends:\n";
    for (const Child* sim : sims) {
      out << "      - url: " << sim->url() << "\n        data_parallel_size: " << ranks_each
          << "\n";
    }
    out.close();
    Child warden({"serve", "-c", config.string(), "--log-level", "warn"});
    OnlineOptions o = as_configured(warden.url(), {2}, 30);
    o.dialect = workload::Dialect::kResponses;
    return run_online(o);
  };
  {
    Child a({"sim", "--listen", "127.0.0.1:0", "--time-scale", scale});
    Child b({"sim", "--listen", "127.0.0.1:0", "--time-scale", scale});
    expect_one_step_kept_home(run_behind({&a, &b}, 1));
  }
  {
    Child sim({"sim", "--listen", "127.0.0.1:0", "--dp", "2", "--time-scale", scale});
    auto run = run_behind({&sim}, 2);
    ASSERT_TRUE(run) << run.error();
    ASSERT_EQ(run->steps.size(), 1u);
    const auto& s = run->steps[0];
    EXPECT_EQ(s.samples.requests_failed, 0u);
    EXPECT_GT(s.output_tokens, 0);
    EXPECT_FALSE(s.stayed_pct);
  }
  fs::remove_all(dir);
}

// Sessions that send no id: anonymous to a warden with the default sources
// (no "stayed" figure: nothing was sticky), kept home by one that lists
// `opening`.
TEST(BenchOnline, WithoutSessionIdsOnlyTheOpeningKeepsConversationsHome) {
  Child sim(
      {"sim", "--listen", "127.0.0.1:0", "--dp", "2", "--time-scale", std::to_string(kTimeScale)});
  const fs::path dir = temp_dir("lmwarden-bench-no-ids");
  for (const bool opening : {false, true}) {
    SCOPED_TRACE(opening ? "opening" : "default sources");
    std::ofstream(dir / "warden.yaml")
        << "listen: 127.0.0.1:0\nmodels:\n  - name: qwen3\n"
        << (opening ? "    session_sources: [opening]\n" : "")
        << "    backends:\n      - url: " << sim.url() << "\n        data_parallel_size: 2\n";
    Child warden({"serve", "-c", (dir / "warden.yaml").string(), "--log-level", "warn"});
    OnlineOptions o = as_configured(warden.url(), {2}, 30);
    o.session_ids = false;
    o.run_id = opening ? "with-opening" : "without";  // no prompt of one run cached for the other
    auto run = run_online(o);
    ASSERT_TRUE(run) << run.error();
    ASSERT_EQ(run->steps.size(), 1u);
    const auto& s = run->steps[0];
    EXPECT_EQ(s.samples.requests_failed, 0u) << s.samples.first_failure;
    EXPECT_GT(s.output_tokens, 0);
    if (opening) {
      ASSERT_TRUE(s.stayed_pct);
      EXPECT_GT(*s.stayed_pct, 90.0);
    } else {
      EXPECT_FALSE(s.stayed_pct);
    }
  }
  fs::remove_all(dir);
}

// Requests the server refuses: the step counts them, keeps why the first one
// failed (the server's own message), and the table lists it.
TEST(BenchOnline, AFailedRequestSaysWhy) {
  Child sim({"sim", "--listen", "127.0.0.1:0", "--time-scale", std::to_string(kTimeScale)});
  const fs::path dir = temp_dir("lmwarden-bench-refused");
  std::ofstream(dir / "warden.yaml") << "listen: 127.0.0.1:0\nmodels:\n  - name: qwen3\n"
                                     << "    backends:\n      - url: " << sim.url() << "\n";
  Child warden({"serve", "-c", (dir / "warden.yaml").string(), "--log-level", "error"});
  OnlineOptions o = as_configured(warden.url(), {1}, 10);
  o.workload.first_user_tokens = 40000;  // over the profile's max_model_len, 32768
  std::string told;
  auto run = run_online(o, [&](const Progress& p) {
    if (told.empty()) told = p.first_failure;
  });
  ASSERT_TRUE(run) << run.error();
  ASSERT_EQ(run->steps.size(), 1u);
  const auto& x = run->steps[0].samples;
  EXPECT_GT(x.requests_failed, 0u);
  EXPECT_EQ(x.requests_failed, x.requests_sent);
  EXPECT_TRUE(x.first_failure.starts_with("HTTP 400: This model's maximum context length is"))
      << x.first_failure;
  EXPECT_EQ(told, x.first_failure);
  const std::string table = markdown_table(run->steps, o.arms);
  EXPECT_NE(table.find(fmt::format("- 1 sessions, arm on: {} of {}; the first: {}\n",
                                   x.requests_failed, x.requests_sent, x.first_failure)),
            std::string::npos)
      << table;
  fs::remove_all(dir);
}

// A warden with an admin token in front of a two-rank simulator, its model
// `qwen3` at a spill threshold of 5 before any run.
struct SwitchableWarden {
  const fs::path dir = temp_dir("lmwarden-bench-switch");
  Child sim{
      {"sim", "--listen", "127.0.0.1:0", "--dp", "2", "--time-scale", std::to_string(kTimeScale)}};
  std::optional<Child> warden;

  SwitchableWarden() {
    ::setenv("LMWARDEN_BENCH_TEST_TOKEN", "bench-secret", 1);
    std::ofstream(dir / "warden.yaml")
        << "listen: 127.0.0.1:0\nadmin_token_env: LMWARDEN_BENCH_TEST_TOKEN\n"
        << "scrape_interval: 100ms\nmodels:\n  - name: qwen3\n    spill_threshold: 5\n"
        << "    backends:\n      - url: " << sim.url() << "\n        data_parallel_size: 2\n";
    warden.emplace(std::vector<std::string>{"serve", "-c", (dir / "warden.yaml").string(),
                                            "--log-level", "warn"});
  }
  ~SwitchableWarden() {
    warden.reset();
    fs::remove_all(dir);
  }
  nlohmann::json card() const {
    return nlohmann::json::parse(
        testing::http_request(warden->port(), "GET", "/api/models/qwen3").body);
  }
  OnlineOptions options() const {
    OnlineOptions o;
    o.target = warden->url();
    o.model = "qwen3";
    o.workload = small_workload();
    o.steps = {2, 3};
    o.step_seconds = 30;
    o.arms = {"off", "on"};
    o.time_scale = kTimeScale;
    o.admin_token = "bench-secret";
    return o;
  }
};

// Ctrl-C mid-run: the step under way is dropped, the steps done are kept,
// and the model is put back as the run found it, not left at the last arm.
TEST(BenchOnline, AnInterruptedRunKeepsItsStepsAndPutsTheWardenBack) {
  SwitchableWarden w;
  OnlineOptions o = w.options();
  o.stop_on_signal = true;
  bool raised = false;
  bool was_off = false;
  std::vector<std::string> done;
  auto run = run_online(
      o,
      [&](const Progress& p) {
        // In the second step, arm on's ("off" was the first arm): stop.
        if (p.index == 1 && p.elapsed_s > 5 && !raised) {
          raised = true;
          ::raise(SIGINT);
        }
      },
      [&](const evaluator::StepResult& s) {
        done.push_back(s.arm);
        was_off = w.card()["affinity"] == false;
      });
  ASSERT_TRUE(run) << run.error();
  EXPECT_TRUE(raised);
  EXPECT_TRUE(was_off) << "the first arm ran with affinity off";
  EXPECT_TRUE(run->interrupted());
  ASSERT_EQ(run->steps.size(), 1u);
  EXPECT_EQ(done, std::vector<std::string>{"off"});
  ASSERT_TRUE(run->stopped);
  EXPECT_NE(run->stopped->find("interrupted; the step under way (2 sessions, arm on) was dropped"),
            std::string::npos)
      << *run->stopped;
  EXPECT_EQ(run->settings_restored, "affinity on, spill threshold 5");
  const auto card = w.card();
  EXPECT_EQ(card["affinity"], true);
  EXPECT_EQ(card["spill_threshold"], 5);
  EXPECT_EQ(card["spill_threshold_auto"], false);
}

// A second signal stops at once, and says the model was not put back. Both
// are raised in one progress call: the second comes while the first's orderly
// end is under way, however soon that end would come.
TEST(BenchOnline, ASecondSignalStopsAtOnceAndSaysTheModelWasNotPutBack) {
  SwitchableWarden w;
  OnlineOptions o = w.options();
  o.stop_on_signal = true;
  int raised = 0;
  auto run = run_online(o, [&](const Progress& p) {
    if (p.index == 0 && p.elapsed_s > 5 && raised == 0) {
      for (; raised < 2; ++raised) ::raise(SIGTERM);
    }
  });
  ASSERT_TRUE(run) << run.error();
  EXPECT_EQ(raised, 2);
  EXPECT_TRUE(run->interrupted());
  EXPECT_EQ(run->signal, SIGTERM);
  EXPECT_EQ(run->stopped, "interrupted twice: stopped at once");
  ASSERT_TRUE(run->settings_not_restored);
  EXPECT_NE(run->settings_not_restored->find("model qwen3 was not put back"), std::string::npos);
  EXPECT_EQ(w.card()["affinity"], false) << "left at the first arm, as it said";
}

// The warden goes away mid-run: the run ends within give_up_after rather
// than count refused connections to the end of every step, and keeps the
// steps it finished.
TEST(BenchOnline, AWardenThatStopsAnsweringEndsTheRunWithTheStepsDone) {
  SwitchableWarden w;
  OnlineOptions o = w.options();
  o.admin_token.reset();  // the model is at the arm already: nothing to switch
  o.arms = {"warden:5"};
  o.steps = {2, 2};
  o.step_seconds = 120;  // 6 s of wall time: the give-up ends the second step long before
  o.give_up_after = std::chrono::seconds(1);
  bool killed = false;
  auto run = run_online(o, [&](const Progress& p) {
    if (p.index == 1 && p.elapsed_s > 10 && !killed) {
      killed = true;
      w.warden->kill();
    }
  });
  ASSERT_TRUE(run) << run.error();
  EXPECT_TRUE(killed);
  EXPECT_EQ(run->steps.size(), 1u);
  ASSERT_TRUE(run->stopped);
  EXPECT_NE(run->stopped->find("at 2 sessions, arm warden:5: the warden at " + o.target +
                               " has accepted no connection for 1 s"),
            std::string::npos)
      << *run->stopped;
  EXPECT_FALSE(run->interrupted());
}

// A backend that dies mid-step is a gap in its figures: the warden moves
// its conversations, and the run goes on to its end.
TEST(BenchOnline, ABackendThatDiesIsAGapNotTheEndOfTheRun) {
  const fs::path dir = temp_dir("lmwarden-bench-gap");
  Child a({"sim", "--listen", "127.0.0.1:0", "--time-scale", std::to_string(kTimeScale)});
  Child b({"sim", "--listen", "127.0.0.1:0", "--time-scale", std::to_string(kTimeScale)});
  std::ofstream(dir / "warden.yaml")
      << "listen: 127.0.0.1:0\nscrape_interval: 100ms\n"
      << "models:\n  - name: qwen3\n    backends:\n      - url: " << a.url()
      << "\n      - url: " << b.url() << "\n";
  Child warden({"serve", "-c", (dir / "warden.yaml").string(), "--log-level", "warn"});
  OnlineOptions o = as_configured(warden.url(), {4, 4}, 40);
  o.give_up_after = std::chrono::seconds(1);
  bool killed = false;
  auto run = run_online(o, [&](const Progress& p) {
    if (p.index == 0 && p.elapsed_s > 10 && !killed) {
      killed = true;
      b.kill();  // at once; the destructor reaps it
    }
  });
  EXPECT_TRUE(killed);
  ASSERT_TRUE(run) << run.error();
  EXPECT_FALSE(run->stopped) << *run->stopped;
  ASSERT_EQ(run->steps.size(), 2u);
  EXPECT_GT(run->steps[1].samples.metrics_polls_failed, 0u);
  EXPECT_GT(run->steps[1].sessions_completed + run->steps[1].samples.ttfb_s.size(), 0u)
      << "the second step was served by the backend left";
  fs::remove_all(dir);
}

// Without the admin token the bench cannot switch the model: an arm the
// model is not at is refused before the run, not measured under its name.
TEST(BenchOnline, AnArmTheWardenIsNotAtNeedsTheToken) {
  SwitchableWarden w;
  OnlineOptions o = w.options();
  o.admin_token.reset();
  o.arms = {"on"};
  auto run = run_online(o);
  ASSERT_FALSE(run);
  EXPECT_EQ(run.error(),
            "arm on: model qwen3 is at affinity on, spill threshold 5, and switching it needs the "
            "warden's admin token; run --arms warden:5, or give the token");
  o.arms = {"warden:5"};
  o.steps = {1};
  o.step_seconds = 10;
  auto matching = run_online(o);
  ASSERT_TRUE(matching) << matching.error();
  EXPECT_EQ(matching->steps.size(), 1u);
  EXPECT_FALSE(matching->settings_restored) << "nothing was switched";

  // At auto (8), a warden:8 arm is served as it is; warden:7 is not.
  ASSERT_EQ(testing::http_request(w.warden->port(), "PATCH", "/api/models/qwen3",
                                  R"({"spill_threshold":"auto"})",
                                  {{"Authorization", "Bearer bench-secret"}})
                .status,
            200);
  o.arms = {"warden:8", "warden:7"};
  auto at_auto = run_online(o);
  ASSERT_FALSE(at_auto);
  EXPECT_EQ(at_auto.error(),
            "arm warden:7: model qwen3 is at affinity on, spill threshold auto, and switching it "
            "needs the warden's admin token; run --arms on, or give the token");
}

TEST(BenchOnline, UnreachableWardenIsAnErrorNotAHang) {
  OnlineOptions o;
  o.target = "http://127.0.0.1:1";
  o.model = "qwen3";
  o.steps = {1};
  o.step_seconds = 1;
  auto run = run_online(o);
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().find("cannot reach the warden"), std::string::npos);
  o.arms = {"sideways"};
  EXPECT_FALSE(run_online(o));
}

// A target that answers but has no such model says which it has; one that
// is no warden (a vLLM server, here the simulator) says so.
TEST(BenchOnline, AWrongTargetOrModelSaysWhichItWas) {
  SwitchableWarden w;
  OnlineOptions o = w.options();
  o.model = "qwen";
  auto wrong_model = run_online(o);
  ASSERT_FALSE(wrong_model);
  EXPECT_EQ(wrong_model.error(), "GET " + w.warden->url() +
                                     "/api/models/qwen: HTTP 404 (is --model right? the warden "
                                     "serves qwen3)");
  o.model = "qwen3";
  o.target = w.sim.url();
  auto not_a_warden = run_online(o);
  ASSERT_FALSE(not_a_warden);
  EXPECT_EQ(not_a_warden.error(),
            "GET " + w.sim.url() +
                "/api/models/qwen3: HTTP 404 (is --target a warden (lmwarden serve)? it has no "
                "/api/models)");
}

// Bad values are refused before anything runs, with exit status 2 and a
// message that says what was wanted.
TEST(BenchCommand, BadFlagsAreRefusedWithWhatWasWanted) {
  const fs::path dir = temp_dir("lmwarden-bench-flags");
  const fs::path plain_file = dir / "a-file";
  std::ofstream(plain_file) << "x";
  struct Case {
    std::string args;
    std::string said;
  };
  const Case cases[] = {
      {"bench --offline --arms off,off", "--arms names off twice"},
      {"bench --offline --out " + plain_file.string(), "--out cannot create"},
      {"bench --offline --num-gpu-blocks 500",
       "fewer than max_model_len 32768, and vLLM refuses to start so: give at least 2048 blocks"},
      {"bench --offline --sessions 0", "--sessions: 0 is not a whole number from 1 to 4096"},
      {"bench --offline --sessions 4,9999", "--sessions: 9999 is not a whole number from 1 to"},
      {"bench --offline --sessions 4,,8", "--sessions: 4,,8 has an empty item"},
      {"bench --offline --sessions 4,", "--sessions: 4, has an empty item"},
      {"bench --offline --arms off,,on", "--arms: off,,on has an empty item"},
      {"bench --target http://127.0.0.1:1 --model m --backend-metrics ,http://127.0.0.1:2",
       "--backend-metrics: ,http://127.0.0.1:2 has an empty item"},
      {"bench --offline --step-seconds nan", "--step-seconds: nan is not a number above 0"},
      {"bench --offline --skew 5", "--skew: 5 is not a number from 0 to 1"},
      {"bench --offline --repeats 0", "--repeats: 0 is not a whole number from 1 to 1000"},
      {"bench --offline --seed -1", "--seed: -1 is not a whole number from 0"},
      {"bench --target http://127.0.0.1:1 --model m --repeats 3",
       "--repeats is for --offline runs"},
      {"bench --target 127.0.0.1:1 --model m", "--target 127.0.0.1:1: must be http://HOST:PORT"},
      {"bench --target https://127.0.0.1:1 --model m",
       "--target https://127.0.0.1:1: the warden serves plain HTTP; give its http:// address"},
      {"bench --target http://127.0.0.1:1/v1 --model m",
       "--target http://127.0.0.1:1/v1: give the warden's root, e.g. http://127.0.0.1:8080 (the "
       "benchmark adds /v1/chat/completions and /api/models/… itself)"},
      {"bench --offline --first-user-tokens 10",
       "--first-user-tokens: 10 is not a whole number from 64 to 1000000"},
      {"bench --target http://127.0.0.1:1 --model m --arms sideways",
       "online arms are off, on and warden:N"},
      {"bench --target http://127.0.0.1:1 --model m --arms warden:2000000",
       "online arms are off, on and warden:N"},
      {"sim --num-gpu-blocks 500 --listen 127.0.0.1:0", "give at least 2048 blocks"},
      {"sim --dp abc", "--dp: abc is not a whole number from 1 to 64"},
      {"sim --dp 64 --num-gpu-blocks 100000000 --listen 127.0.0.1:0",
       "--dp 64 with 100000000 KV blocks per rank is 6400000000 blocks in all, more than the "
       "simulator holds (64000000): give fewer blocks or fewer ranks"},
      {"sim --seed -1", "--seed: -1 is not a whole number from 0"},
      {"sim --early-stop-prob 2", "--early-stop-prob: 2 is not a number from 0 to 1"},
      {"sim --listen 127.0.0.1", "--listen 127.0.0.1: must be HOST:PORT"},
      {"sim --listen 127.0.0.1:99999", "the port must be a number from 0 to 65535"},
      {"sim --listen gpu-box:8000", "the host must be an IPv4 address, [IPv6] or localhost"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const fs::path out = dir / "out.txt";
    const std::string cmd = "timeout 20 " + std::string(LMWARDEN_BINARY) + " " + c.args + " > " +
                            out.string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 2) << read_file(out);
    EXPECT_NE(read_file(out).find(c.said), std::string::npos) << read_file(out);
  }
  fs::remove_all(dir);
}

TEST(BenchCommand, OfflinePrintsTheTableAndWritesTheReport) {
  const fs::path dir = temp_dir("lmwarden-bench-offline");
  const std::string cmd = std::string(LMWARDEN_BINARY) +
                          " bench --offline -q --sessions 2,4 --step-seconds 30 --out " +
                          dir.string() + " > " + (dir / "stdout.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string out = read_file(dir / "stdout.txt");
  EXPECT_NE(out.find("| sessions | sessions/h"), std::string::npos);
  EXPECT_NE(out.find("Each cell: off → on."), std::string::npos);
  const auto json = nlohmann::json::parse(read_file(dir / "results.json"));
  ASSERT_EQ(json["steps"].size(), 4u);
  EXPECT_EQ(json["steps"][0]["arm"], "off");
  EXPECT_EQ(json["steps"][1]["policy"], "warden(spill=8)");
  EXPECT_TRUE(fs::exists(dir / "report.html"));
  fs::remove_all(dir);
}

TEST(BenchCommand, OfflineRepeatsPoolEachCellOverConsecutiveSeeds) {
  const fs::path dir = temp_dir("lmwarden-bench-repeats");
  const std::string cmd = std::string(LMWARDEN_BINARY) +
                          " bench --offline -q --sessions 3 --arms on --step-seconds 30 "
                          "--seed 7 --repeats 3 --out " +
                          dir.string() + " > " + (dir / "stdout.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const auto json = nlohmann::json::parse(read_file(dir / "results.json"));
  EXPECT_EQ(json["workload"]["repeats"], 3);
  EXPECT_EQ(json["workload"]["seed"], 7);
  ASSERT_EQ(json["steps"].size(), 1u);
  EXPECT_EQ(json["steps"][0]["duration_s"], 90.0);
  EXPECT_NE(read_file(dir / "report.md")
                .find("30 s of engine time per step, each cell pooled over 3 runs (seeds 7 to 9)."),
            std::string::npos)
      << read_file(dir / "report.md");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmwarden::bench
