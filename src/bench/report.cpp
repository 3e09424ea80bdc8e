#include "bench/report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "ui/ui_assets.h"

namespace lmwarden::bench {
namespace {

using evaluator::StepResult;
using nlohmann::ordered_json;

ordered_json opt(const std::optional<double>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}

std::string cell(const std::optional<double>& v, const char* format) {
  return v ? fmt::format(fmt::runtime(format), *v) : std::string("–");
}

// Steps grouped by session count, in the order they ran.
struct Row {
  int sessions = 0;
  std::vector<const StepResult*> arms;  // aligned with the arm list; nullptr if missing
};

std::vector<Row> rows_of(const std::vector<StepResult>& steps,
                         const std::vector<std::string>& arms) {
  std::vector<Row> rows;
  for (const auto& s : steps) {
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](const Row& r) { return r.sessions == s.sessions; });
    if (it == rows.end()) {
      rows.push_back({s.sessions, std::vector<const StepResult*>(arms.size(), nullptr)});
      it = rows.end() - 1;
    }
    const auto a = std::find(arms.begin(), arms.end(), s.arm);
    if (a != arms.end()) it->arms[static_cast<std::size_t>(a - arms.begin())] = &s;
  }
  return rows;
}

struct Column {
  const char* title;
  const char* format;
  std::optional<double> (*get)(const StepResult&);
};

const Column kColumns[] = {
    {"sessions/h", "{:.0f}",
     [](const StepResult& s) { return std::optional(s.sessions_per_hour); }},
    {"output tok/min", "{:.0f}",
     [](const StepResult& s) { return std::optional(s.output_tokens_per_min); }},
    {"TTFB p50 (s)", "{:.2f}", [](const StepResult& s) { return s.ttfb_p50_s; }},
    {"TTFB p95 (s)", "{:.2f}", [](const StepResult& s) { return s.ttfb_p95_s; }},
    {"replicas busy", "{:.1f}", [](const StepResult& s) { return s.replicas_busy; }},
    {"prefix hit %", "{:.1f}", [](const StepResult& s) { return s.prefix_hit_pct; }},
    {"stayed %", "{:.0f}", [](const StepResult& s) { return s.stayed_pct; }},
};

std::string joined_cells(const Row& row, const Column& c) {
  std::string out;
  for (std::size_t a = 0; a < row.arms.size(); ++a) {
    if (a > 0) out += " → ";
    out += row.arms[a] ? cell(c.get(*row.arms[a]), c.format) : "–";
  }
  return out;
}

std::string arms_label(const std::vector<std::string>& arms) {
  std::string out;
  for (std::size_t a = 0; a < arms.size(); ++a) {
    if (a > 0) out += " → ";
    out += arms[a];
  }
  return out;
}

std::string stopped_note(const std::string& why) {
  return "Stopped before its last step (" + why + "): the rows are the steps done.";
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// JSON inside <script>: "</" would close the element early.
std::string script_safe(std::string json) {
  for (std::size_t at = json.find("</"); at != std::string::npos; at = json.find("</", at + 2)) {
    json.replace(at, 2, "<\\/");
  }
  return json;
}

ordered_json workload_json(const RunInfo& info) {
  const auto& w = info.workload;
  ordered_json j{{"mode", info.mode},
                 {"seed", w.seed},
                 {"system_prompt_tokens", w.system_prompt_tokens},
                 {"first_user_tokens", w.first_user_tokens},
                 {"followup_turns", w.followup_turns},
                 {"followup_tokens", w.followup_tokens},
                 {"max_output_tokens", w.max_output_tokens},
                 {"tool_seconds", w.tool_seconds},
                 {"heavy_share", w.heavy_share},
                 {"heavy_factor", w.heavy_factor},
                 {"typical_context_tokens", w.typical_context_tokens()},
                 {"steps", info.steps},
                 {"arms", info.arms},
                 {"step_seconds", info.step_seconds},
                 {"scrape_interval_s", info.scrape_interval_s}};
  if (info.mode == "online") {
    j["target"] = info.target;
    j["model"] = info.model;
    j["dialect"] = info.dialect;
    j["session_ids"] = info.session_ids;
    j["backend_metrics"] = info.backend_metrics;
    j["time_scale"] = info.time_scale;
    j["started_at"] = info.started_at;
    j["run_id"] = info.run_id;
  } else {
    j["profile"] = info.profile;
    j["replicas"] = info.replicas;
    j["repeats"] = info.repeats;
  }
  return j;
}

// `online`: followups are counted by the evaluator only (the online runner
// reads the warden's counters instead), so they are null there, not 0.
ordered_json step_json(const StepResult& s, bool online) {
  const auto& x = s.samples;
  ordered_json replicas = ordered_json::array();
  for (const auto& r : x.replicas) {
    replicas.push_back(
        {{"replica", r.replica},
         {"prefix_cache_queries", r.prefix_cache_queries},
         {"prefix_cache_hits", r.prefix_cache_hits},
         {"prefix_hit_pct", opt(evaluator::hit_pct(r.prefix_cache_queries, r.prefix_cache_hits))},
         {"busy_polls", r.busy_polls},
         {"preemptions", opt(r.preemptions)},
         {"requests", opt(r.requests)}});
  }
  return {{"sessions", s.sessions},
          {"arm", s.arm},
          {"policy", s.policy},
          {"duration_s", s.duration_s},
          {"sessions_per_hour", s.sessions_per_hour},
          {"output_tokens_per_min", s.output_tokens_per_min},
          {"ttfb_p50_s", opt(s.ttfb_p50_s)},
          {"ttfb_p95_s", opt(s.ttfb_p95_s)},
          {"replicas_busy", opt(s.replicas_busy)},
          {"prefix_hit_pct", opt(s.prefix_hit_pct)},
          {"stayed_pct", opt(s.stayed_pct)},
          {"sessions_completed", s.sessions_completed},
          {"output_tokens", s.output_tokens},
          {"samples",
           {{"ttfb_s", x.ttfb_s},
            {"turn_s", x.turn_s},
            {"output_tokens", x.output_tokens},
            {"replicas_busy", x.replicas_busy},
            {"session_end_s", x.session_end_s},
            {"replicas", replicas},
            {"requests_sent", x.requests_sent},
            {"requests_failed", x.requests_failed},
            {"first_failure",
             x.first_failure.empty() ? ordered_json(nullptr) : ordered_json(x.first_failure)},
            {"metrics_polls_failed", x.metrics_polls_failed},
            {"followups", online ? ordered_json(nullptr) : ordered_json(x.followups)},
            {"followups_stayed", online ? ordered_json(nullptr) : ordered_json(x.followups_stayed)},
            {"warden_sticky", opt(x.warden_sticky)},
            {"warden_moved", opt(x.warden_moved)}}}};
}

constexpr std::string_view kPage = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>LM Warden benchmark</title>
<style>{uplot_css}</style>
<style>
body{{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#1d2330;padding:0 16px}}
h1{{font-size:20px}} h2{{font-size:16px;margin-top:28px}}
table{{border-collapse:collapse;margin:8px 0}} td,th{{border:1px solid #d5d9e0;padding:4px 8px;text-align:right}}
th{{background:#f3f5f8}} td:first-child,th:first-child{{text-align:left}}
.grid{{display:grid;grid-template-columns:repeat(auto-fit,minmax(500px,1fr));gap:18px}}
.note{{color:#5a6270}} code{{background:#f3f5f8;padding:1px 4px}}
</style></head><body>
<h1>LM Warden benchmark — {arms}</h1>
<p class="note">{summary}</p>
<h2>Results (each cell: {arms})</h2>
{table}
<h2>Charts</h2>
<div class="grid" id="charts"></div>
<p class="note">{charts_note}</p>
<h2>Parameters</h2>
<pre>{params}</pre>
<script>{uplot_js}</script>
<script>
const REPORT = {data};
(function () {{
  if (typeof uPlot === 'undefined') return;
  const colors = ['#8a8f98', '#2f7ed8', '#d9822b', '#3aa655', '#a44fb6', '#c23b3b'];
  const x = REPORT.sessions.every((v, i, a) => i === 0 || v > a[i - 1]) ? REPORT.sessions
          : REPORT.sessions.map((_, i) => i + 1);
  function chart(title, metrics, opts) {{
    const series = [{{label: 'sessions'}}];
    const data = [x];
    REPORT.arms.forEach((arm, a) => metrics.forEach((m, k) => {{
      series.push({{label: arm + (metrics.length > 1 ? ' ' + m.label : ''), stroke: colors[a % colors.length],
                   width: 2, dash: k ? [6, 4] : undefined, points: {{size: 7}}}});
      data.push(REPORT.values[m.key][arm]);
    }}));
    const div = document.createElement('div');
    document.getElementById('charts').appendChild(div);
    new uPlot({{title, width: 520, height: 300, series,
      scales: {{x: {{time: false}}, y: opts.log ? {{distr: 3}} : {{range: opts.range}}}},
      axes: [{{label: 'concurrent sessions', splits: () => x,
               values: (u, v) => v.map(t => REPORT.sessions[x.indexOf(t)] ?? '')}},
             {{label: opts.unit, size: 70}}]}}, data, div);
  }}
  chart('Time to first token (log scale)', [{{key: 'ttfb_p50_s', label: 'p50'}}, {{key: 'ttfb_p95_s', label: 'p95'}}], {{log: true, unit: 'seconds'}});
  chart('Replicas busy', [{{key: 'replicas_busy', label: ''}}], {{unit: 'replicas', range: [0, (REPORT.replicas || 4) + 0.2]}});
  chart('Prefix-cache hit rate', [{{key: 'prefix_hit_pct', label: ''}}], {{unit: '%', range: [0, 100]}});
  chart('Output tokens per minute', [{{key: 'output_tokens_per_min', label: ''}}], {{unit: 'tokens/min'}});
}})();
</script>
</body></html>
)html";

}  // namespace

std::string markdown_table(const std::vector<StepResult>& steps,
                           const std::vector<std::string>& arms) {
  std::string out = "| sessions";
  for (const auto& c : kColumns) out += fmt::format(" | {}", c.title);
  out += " |\n|---:";
  for (std::size_t i = 0; i < std::size(kColumns); ++i) out += "|---:";
  out += "|\n";
  for (const Row& row : rows_of(steps, arms)) {
    out += fmt::format("| {}", row.sessions);
    for (const auto& c : kColumns) out += " | " + joined_cells(row, c);
    out += " |\n";
  }
  out += fmt::format("\nEach cell: {}.\n", arms_label(arms));
  // Failed requests are in no column: say how many, and why the first failed.
  bool listed = false;
  for (const StepResult& s : steps) {
    const auto& x = s.samples;
    if (x.requests_failed == 0) continue;
    if (!listed) out += "\nFailed requests:\n";
    listed = true;
    out += fmt::format("- {} sessions, arm {}: {} of {}", s.sessions, s.arm, x.requests_failed,
                       x.requests_sent);
    out += x.first_failure.empty() ? "\n" : fmt::format("; the first: {}\n", x.first_failure);
  }
  return out;
}

std::string results_json(const RunInfo& info, const std::vector<StepResult>& steps) {
  ordered_json j{{"workload", workload_json(info)},
                 {"stopped", info.stopped ? ordered_json(*info.stopped) : ordered_json(nullptr)},
                 {"steps", ordered_json::array()}};
  for (const auto& s : steps) j["steps"].push_back(step_json(s, info.mode == "online"));
  return j.dump(1) + "\n";
}

namespace {

// What was run, in one sentence: the reports' first line.
std::string summary_line(const RunInfo& info) {
  return info.mode == "online"
             ? fmt::format(
                   "Online run against {} (model {}, {} dialect{}), {} s per step{}.", info.target,
                   info.model, info.dialect, info.session_ids ? "" : " without session ids",
                   info.step_seconds,
                   info.time_scale != 1
                       ? fmt::format(", simulator time scale {} (times in simulated seconds)",
                                     info.time_scale)
                       : "")
             : fmt::format(
                   "Offline evaluation: profile {}, {} replicas, {} s of engine time per step{}.",
                   info.profile, info.replicas, info.step_seconds,
                   info.repeats > 1
                       ? fmt::format(
                             ", each cell pooled over {} runs (seeds {} to {})", info.repeats,
                             info.workload.seed,
                             info.workload.seed + static_cast<std::uint64_t>(info.repeats) - 1)
                       : "");
}

}  // namespace

std::string html_report(const RunInfo& info, const std::vector<StepResult>& steps) {
  const std::vector<Row> rows = rows_of(steps, info.arms);
  // The chart data: one value per step and arm for each plotted metric.
  ordered_json values;
  ordered_json sessions = ordered_json::array();
  for (const Row& row : rows) sessions.push_back(row.sessions);
  const std::pair<const char*, std::optional<double> (*)(const StepResult&)> metrics[] = {
      {"ttfb_p50_s", [](const StepResult& s) { return s.ttfb_p50_s; }},
      {"ttfb_p95_s", [](const StepResult& s) { return s.ttfb_p95_s; }},
      {"replicas_busy", [](const StepResult& s) { return s.replicas_busy; }},
      {"prefix_hit_pct", [](const StepResult& s) { return s.prefix_hit_pct; }},
      {"output_tokens_per_min",
       [](const StepResult& s) { return std::optional(s.output_tokens_per_min); }},
  };
  for (const auto& [key, get] : metrics) {
    for (std::size_t a = 0; a < info.arms.size(); ++a) {
      ordered_json series = ordered_json::array();
      for (const Row& row : rows)
        series.push_back(row.arms[a] ? opt(get(*row.arms[a])) : ordered_json(nullptr));
      values[key][info.arms[a]] = series;
    }
  }
  const ordered_json data{
      {"sessions", sessions}, {"arms", info.arms}, {"replicas", info.replicas}, {"values", values}};

  std::string table = "<table><tr><th>sessions</th>";
  for (const auto& c : kColumns) table += fmt::format("<th>{}</th>", html_escape(c.title));
  table += "</tr>\n";
  for (const Row& row : rows) {
    table += fmt::format("<tr><td>{}</td>", row.sessions);
    for (const auto& c : kColumns) table += "<td>" + html_escape(joined_cells(row, c)) + "</td>";
    table += "</tr>\n";
  }
  table += "</table>";

  const auto js = ui::find_asset("vendor/uPlot.iife.min.js");
  const auto css = ui::find_asset("vendor/uPlot.min.css");
  const bool charts = js && css;
  const std::string summary = summary_line(info);
  const std::string stopped = info.stopped ? stopped_note(*info.stopped) : "";
  const std::string first_arm = info.arms.empty() ? "" : info.arms.front();
  return fmt::format(
      kPage, fmt::arg("uplot_css", charts ? css->body : std::string_view{}),
      fmt::arg("arms", html_escape(arms_label(info.arms))),
      fmt::arg("summary", html_escape(summary + (stopped.empty() ? "" : " " + stopped))),
      fmt::arg("table", table),
      fmt::arg("charts_note",
               charts ? fmt::format("Solid lines: p50; dashed: p95. Grey: the first arm ({}{}).",
                                    first_arm, first_arm == "off" ? ", vLLM's balancer" : "")
                      : "Charts unavailable: this build has no embedded chart library."),
      fmt::arg("params", html_escape(workload_json(info).dump(1))),
      fmt::arg("uplot_js", charts ? js->body : std::string_view{}),
      fmt::arg("data", script_safe(data.dump())));
}

std::optional<std::string> prepare_report_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fmt::format("cannot create {}: {}", dir, ec.message());
  if (::access(dir.c_str(), W_OK) != 0)
    return fmt::format("cannot write in {}: {}", dir, std::strerror(errno));
  return std::nullopt;
}

std::optional<std::string> write_report(const std::string& dir, const RunInfo& info,
                                        const std::vector<StepResult>& steps) {
  if (auto error = prepare_report_dir(dir)) return error;
  std::string table = summary_line(info) + "\n\n" + markdown_table(steps, info.arms);
  if (info.stopped) table += "\n" + stopped_note(*info.stopped) + "\n";
  const std::pair<const char*, std::string> files[] = {
      {"report.md", table},
      {"results.json", results_json(info, steps)},
      {"report.html", html_report(info, steps)},
  };
  // Each file whole or not at all: written beside, then renamed over the old.
  for (const auto& [name, text] : files) {
    const auto path = std::filesystem::path(dir) / name;
    auto partial = path;
    partial += ".partial";
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) return fmt::format("cannot write {}", partial.string());
    std::error_code ec;
    std::filesystem::rename(partial, path, ec);
    if (ec) return fmt::format("cannot write {}: {}", path.string(), ec.message());
  }
  return std::nullopt;
}

}  // namespace lmwarden::bench
