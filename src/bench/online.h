// The online benchmark (DESIGN §9): the workload against a running warden over
// real HTTP, while polling the backends' /metrics and the warden's counters.
// This header keeps Asio out of its users; online_runner.cpp holds all the
// socket code, in one translation unit.
//
// Per step and arm: switch the warden (PATCH /api/models/{model}), start N
// closed-loop sessions with streamed requests, poll every backend's /metrics
// once per (simulated) second, stop after step_seconds, close what is still
// in flight (the warden then aborts it upstream), and compute the row from
// the samples and the counters' deltas. With a time-scaled simulator behind
// the warden, every duration is in simulated seconds: wall time × time_scale.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "evaluator/step_result.h"
#include "workload/session.h"
#include "workload/wire.h"

namespace lmwarden::bench {

struct OnlineOptions {
  std::string target;  // the warden, e.g. http://127.0.0.1:8080
  std::string model;
  workload::WorkloadConfig workload;
  workload::Dialect dialect = workload::Dialect::kOpenAi;
  // false: requests carry no session id (workload::build_request).
  bool session_ids = true;
  std::vector<int> steps = {4, 8, 16, 24, 32};
  double step_seconds = 180;  // simulated seconds when time_scale != 1
  // "off" (affinity off), "on" (affinity on, spill threshold auto) or
  // "warden:N" (affinity on, spill threshold N).
  std::vector<std::string> arms = {"off", "on"};
  double time_scale = 1;
  std::optional<std::string> admin_token;  // needed to switch arms
  // Base URLs whose /metrics are polled; empty = the model's backends as the
  // warden lists them.
  std::vector<std::string> backend_metrics;
  double poll_interval_s = 1;
  std::chrono::seconds request_timeout{600};  // wall; per read, first byte included
  // Part of every session's first line, with the arm and the step, so that a
  // run's prompts are its own and no earlier run's cache serves them.
  std::string run_id;
  // SIGINT and SIGTERM end the run: the step under way is dropped, the
  // warden's settings are put back, and the steps done are returned.
  bool stop_on_signal = false;
  // Without a metrics poll or a connection that works for this long (wall),
  // the step ends the run rather than count failures to its end.
  std::chrono::seconds give_up_after{10};
};

struct Progress {
  int index = 0;  // step × arm, 0-based
  int total = 0;
  int sessions = 0;
  std::string arm;
  double elapsed_s = 0;  // simulated
  double duration_s = 0;
  std::uint64_t requests = 0;
  std::uint64_t failed = 0;
  std::string first_failure;  // why the step's first failed request failed
  std::uint64_t sessions_completed = 0;
  std::optional<double> ttfb_p50_s;
  std::optional<double> replicas_busy;  // latest poll
};

struct OnlineRun {
  std::vector<evaluator::StepResult> steps;  // the steps done, in order
  int replicas = 0;                          // ranks seen in the backends' metrics
  std::vector<std::string> backends;         // polled base URLs
  // Why the run ended before its last step (a failure, or a signal); the
  // steps done are still in `steps`.
  std::optional<std::string> stopped;
  int signal = 0;  // SIGINT or SIGTERM when one interrupted the run, else 0
  bool interrupted() const { return signal != 0; }
  // With the admin token: the model's settings as the run found them, put
  // back at its end ("affinity on, spill threshold auto"), or why they could
  // not be. Without it nothing was switched, and both are empty.
  std::optional<std::string> settings_restored;
  std::optional<std::string> settings_not_restored;
};

// Arms the online runner understands (see OnlineOptions::arms); an error
// message for anything else.
std::optional<std::string> validate_online_arm(const std::string& arm);

// An error when the run could not start (bad options, the warden not
// reachable, an arm the warden is not at and cannot be switched to);
// otherwise the run, complete or `stopped`.
Result<OnlineRun, std::string> run_online(
    const OnlineOptions& options, const std::function<void(const Progress&)>& on_progress = {},
    const std::function<void(const evaluator::StepResult&)>& on_step = {});

}  // namespace lmwarden::bench
