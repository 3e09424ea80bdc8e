// What one step of a benchmark measured, for one arm: the row of DESIGN §9's
// results.json. Filled the same way by the offline evaluator and the online
// runner (raw samples first, then summarize()), so the two tables mean the
// same thing column by column.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lmwarden::evaluator {

// One replica's share of a step.
struct ReplicaStep {
  int replica = 0;
  double prefix_cache_queries = 0;    // Δ tokens looked up over the step
  double prefix_cache_hits = 0;       // Δ tokens found
  double busy_polls = 0;              // polls at which it had running > 0
  std::optional<double> preemptions;  // Δ, where the source reports it
  std::optional<double> requests;     // requests placed here, where known
};

struct StepSamples {
  std::vector<double> ttfb_s;         // per request, to its first streamed token
  std::vector<double> turn_s;         // per finished request, arrival to last token
  std::vector<double> output_tokens;  // per finished request
  std::vector<double> replicas_busy;  // per poll: replicas with running > 0
  std::vector<double> session_end_s;  // when each session completed, since step start
  std::vector<ReplicaStep> replicas;
  std::uint64_t requests_sent = 0;
  std::uint64_t requests_failed = 0;
  std::string first_failure;               // why the step's first failed request failed
  std::uint64_t metrics_polls_failed = 0;  // online: a backend's /metrics that did not answer
  std::uint64_t followups = 0;         // turns after a session's first
  std::uint64_t followups_stayed = 0;  // … served where the previous turn was
  // Online: Δ of the warden's counters (sticky, spilled_in, rehomed).
  std::optional<double> warden_sticky;
  std::optional<double> warden_moved;
};

struct StepResult {
  int sessions = 0;
  std::string arm;     // "off", "on", or a policy spec
  std::string policy;  // what served the arm, e.g. "vllm", "warden(spill=8)"
  double duration_s = 0;

  std::uint64_t sessions_completed = 0;
  double output_tokens = 0;  // streamed within the step

  // Derived by summarize().
  double sessions_per_hour = 0;
  double output_tokens_per_min = 0;
  std::optional<double> ttfb_p50_s;
  std::optional<double> ttfb_p95_s;
  std::optional<double> replicas_busy;
  std::optional<double> prefix_hit_pct;
  std::optional<double> stayed_pct;

  StepSamples samples;
};

// Linear interpolation between closest ranks (numpy's default, R type 7):
// p in [0, 100]; nullopt for no values. `values` need not be sorted.
std::optional<double> percentile(std::vector<double> values, double p);
std::optional<double> mean(const std::vector<double>& values);
// 100 · hits / queries; nullopt when nothing was looked up.
std::optional<double> hit_pct(double queries, double hits);

// Fills the derived fields from the counts and samples:
//   sessions/hour and tokens/min scale the step's counts by its duration;
//   TTFB p50/p95 over samples.ttfb_s; replicas busy = mean of the polls;
//   prefix hit % = Σ hits / Σ queries over the replicas (pooled, so a busy
//   replica weighs more than an idle one); stayed % = Δ warden sticky over
//   sticky + moved when the warden's counters were read, else followups that
//   stayed over followups, else nullopt.
void summarize(StepResult& step);

// Adds `more`, another run of the same cell (sessions and arm, another
// seed), to `into`: counts and durations summed, samples concatenated (each
// session's end still timed from its own run's start), each replica's
// counters added to the same replica's, the first failure kept; the warden's
// counters, and a replica's preemptions and requests, only where both runs
// read them. Then summarizes `into`, so its
// rates are over the runs' pooled time and its percentiles over every
// request, as one run as long as all of them on as many fleets.
void pool(StepResult& into, const StepResult& more);

}  // namespace lmwarden::evaluator
