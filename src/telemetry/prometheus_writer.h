// Writer of the Prometheus text exposition format (0.0.4) for the warden's
// own GET /metrics. Output re-reads with ExpositionReader (tested).
//
//   PrometheusWriter w;
//   w.family("lmwarden_in_flight", MetricType::kGauge, "Requests in flight.");
//   w.sample("lmwarden_in_flight", {{"model", "qwen"}, {"replica", "0"}}, 3);
//   respond(w.text());
//
// Label values and help text are escaped here; names are the caller's
// constants (warden_metrics.h) and are written as given.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "telemetry/histogram.h"
#include "telemetry/prometheus.h"

namespace lmwarden::telemetry {

struct Label {
  std::string_view name;
  std::string_view value;
};

// A sample value as Prometheus writes it: "NaN", "+Inf", "-Inf", integers
// without a fraction, everything else in the shortest form that reads back
// to the same double.
std::string format_value(double value);

class PrometheusWriter {
 public:
  // "# HELP" and "# TYPE" lines; call once per family, before its samples.
  void family(std::string_view name, MetricType type, std::string_view help);
  void sample(std::string_view name, std::span<const Label> labels, double value);
  void sample(std::string_view name, std::initializer_list<Label> labels, double value) {
    sample(name, std::span<const Label>(labels.begin(), labels.size()), value);
  }
  // name_bucket{…,le="…"} for each bound and +Inf, then name_sum and name_count.
  void histogram(std::string_view name, std::span<const Label> labels,
                 const HistogramSnapshot& snapshot);

  const std::string& text() const noexcept { return out_; }
  std::string take() noexcept { return std::move(out_); }

 private:
  void write_labels(std::span<const Label> labels, const Label* extra);
  std::string out_;
};

}  // namespace lmwarden::telemetry
