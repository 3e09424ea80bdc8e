// The benchmark's report (DESIGN §9): a markdown table, results.json and a
// self-contained HTML page with charts. Pure: strings in, strings out; only
// write_report() touches the file system.
//
// The table has one row per step and `off → on` in each cell (with more arms,
// a → b → c in the order they ran), so the effect of the warden reads along
// a row. results.json carries every parameter and every raw sample, so other
// tools can recompute any column. The HTML embeds uPlot — the dashboard's
// charting library, compiled into the binary with the UI — and the data, so
// the page opens from disk with no network.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "evaluator/step_result.h"
#include "workload/session.h"

namespace lmwarden::bench {

// Everything that defines a run, for results.json's "workload" object.
struct RunInfo {
  std::string mode;  // "offline" or "online"
  workload::WorkloadConfig workload;
  std::string dialect;  // online
  bool session_ids = true;  // online: false with --no-session-id
  std::string target;   // online: the warden's URL
  std::string model;
  std::vector<std::string> backend_metrics;  // online
  std::string profile;                       // offline
  int replicas = 0;                          // offline: simulated; online: ranks seen
  std::vector<int> steps;
  std::vector<std::string> arms;
  double step_seconds = 0;
  int repeats = 1;  // offline: seeds pooled per cell (EvaluatorConfig::repeats)
  double time_scale = 1;
  double scrape_interval_s = 1;
  std::string started_at;  // ISO 8601, online; "" offline (keeps output reproducible)
  std::string run_id;      // online: in every session's first line (OnlineOptions::run_id)
  // Why the run ended before its last step; the report holds the steps done.
  std::optional<std::string> stopped;
};

std::string markdown_table(const std::vector<evaluator::StepResult>& steps,
                           const std::vector<std::string>& arms);
std::string results_json(const RunInfo& info, const std::vector<evaluator::StepResult>& steps);
std::string html_report(const RunInfo& info, const std::vector<evaluator::StepResult>& steps);

// Creates `dir` if missing and checks that files can be written there, so
// that a bad --out is said before the run rather than after it.
std::optional<std::string> prepare_report_dir(const std::string& dir);
// Writes report.md, results.json and report.html into `dir` (created if
// missing). An error message on failure.
std::optional<std::string> write_report(const std::string& dir, const RunInfo& info,
                                        const std::vector<evaluator::StepResult>& steps);

}  // namespace lmwarden::bench
