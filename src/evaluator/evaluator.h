// The offline evaluator (DESIGN §9): the benchmark's workload driven through a
// placement policy and the simulator's engine model in virtual time. No
// sockets, no clocks, no threads: a discrete-event loop over engine steps, so
// a 180-second step of 32 sessions runs in well under a second and the same
// config always gives the same numbers.
//
// One step = one (concurrency, arm) pair on a fresh fleet: N conversations run
// closed-loop for step_seconds of engine time; every replica is scraped once
// per scrape interval (feeding the policy and the "replicas busy" polls).
// Requests still waiting for their first token when the step ends are not in
// the TTFB samples, as online, where the client gives up on them then.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "evaluator/policy.h"
#include "evaluator/step_result.h"
#include "workload/session.h"

namespace lmwarden::evaluator {

inline constexpr int kMaxRepeats = 1000;

struct EvaluatorConfig {
  workload::WorkloadConfig workload;
  std::string profile = "a4000-qwen3-4b";
  int replicas = 4;
  std::vector<int> steps = {4, 8, 16, 24, 32};
  double step_seconds = 180;
  // Runs of each cell, on the workloads of seeds workload.seed,
  // workload.seed + 1, …, pooled into one result (evaluator::pool): one seed
  // draws one set of sessions, and a cell's figures move with it.
  int repeats = 1;
  // Policy specs (policy.h); "off" = vLLM's balancer, "on" = the warden.
  std::vector<std::string> arms = {"off", "on"};
  double scrape_interval_s = 1.0;
  // Overrides of the profile, 0 = keep.
  std::int32_t num_gpu_blocks = 0;

  std::optional<std::string> validate() const;
};

// One step for one arm. `workload` must have been built from config.workload.
Result<StepResult, std::string> run_step(const EvaluatorConfig& config,
                                         const workload::Workload& workload, int sessions,
                                         const std::string& arm);

// The same with a policy built by the caller (tests, experiments); `arm` is
// only the label.
Result<StepResult, std::string> run_step(const EvaluatorConfig& config,
                                         const workload::Workload& workload, int sessions,
                                         const std::string& arm, std::unique_ptr<Policy> policy);

// Every step × arm, steps outer, arms inner (the order of the table), each
// cell pooled over `repeats` seeds. The callback, if any, hears about each
// cell's result as it is done.
Result<std::vector<StepResult>, std::string> run_offline(
    const EvaluatorConfig& config, const std::function<void(const StepResult&)>& on_step = {});

}  // namespace lmwarden::evaluator
