#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "telemetry/histogram.h"
#include "telemetry/prometheus.h"
#include "telemetry/prometheus_writer.h"
#include "telemetry/warden_metrics.h"

namespace lmwarden::telemetry {
namespace {

TEST(FormatValue, PrometheusSpellings) {
  EXPECT_EQ(format_value(3), "3");
  EXPECT_EQ(format_value(-0.25), "-0.25");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(1e300), "1e+300");
  EXPECT_EQ(format_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(PrometheusWriter, EscapesAndReadsBack) {
  PrometheusWriter w;
  w.family("lmwarden_replica_info", MetricType::kGauge, "Where \\ it lives\nsecond line");
  w.sample(
      "lmwarden_replica_info",
      {{"model", "qwen \"3\""}, {"replica", "0"}, {"url", "http://h:8000\\x\ny"}, {"rank", "2"}},
      1);
  const Exposition e = parse_exposition(w.text());
  EXPECT_EQ(e.skipped_lines, 0u) << w.text();
  ASSERT_EQ(e.samples.size(), 1u);
  EXPECT_EQ(*e.samples[0].label("model"), "qwen \"3\"");
  EXPECT_EQ(*e.samples[0].label("url"), "http://h:8000\\x\ny");
  EXPECT_EQ(e.samples[0].type, MetricType::kGauge);
  EXPECT_EQ(e.family("lmwarden_replica_info")->help, "Where \\ it lives\nsecond line");
}

TEST(PrometheusWriter, HistogramReadsBack) {
  Histogram h;
  h.observe(0.3);
  h.observe(700);
  PrometheusWriter w;
  w.family("lmwarden_time_to_first_byte_seconds", MetricType::kHistogram, "TTFB.");
  const Label model{"model", "m"};
  w.histogram("lmwarden_time_to_first_byte_seconds", std::span(&model, 1), h.snapshot());
  const Exposition e = parse_exposition(w.text());
  EXPECT_EQ(e.skipped_lines, 0u);
  ASSERT_EQ(e.samples.size(), kTimeToFirstByteBuckets.size() + 3);
  const Sample& inf = e.samples[kTimeToFirstByteBuckets.size()];
  EXPECT_EQ(*inf.label("le"), "+Inf");
  EXPECT_EQ(inf.value, 2);
  EXPECT_EQ(*e.samples[3].label("le"), "0.25");
  EXPECT_EQ(e.samples[3].value, 0);
  EXPECT_EQ(e.samples[4].value, 1);
  EXPECT_EQ(e.samples.back().name, "lmwarden_time_to_first_byte_seconds_count");
  EXPECT_EQ(e.samples.back().value, 2);
  for (const Sample& s : e.samples) EXPECT_EQ(s.type, MetricType::kHistogram) << s.name;
}

// Every family of §7.1, written from the declared list, parses back with its
// type and labels.
TEST(WardenMetrics, EveryDeclaredFamilyRoundTrips) {
  PrometheusWriter w;
  Histogram ttfb;
  ttfb.observe(1.5);
  for (const MetricSpec& spec : kWardenMetrics) {
    w.family(spec.name, spec.type, spec.help);
    if (spec.type == MetricType::kHistogram) {
      const Label model{"model", "qwen3-4b-dp4"};
      w.histogram(spec.name, std::span(&model, 1), ttfb.snapshot());
      continue;
    }
    std::vector<std::string> names;
    for (std::size_t pos = 0; pos <= spec.labels.size();) {
      const std::size_t comma = std::min(spec.labels.find(',', pos), spec.labels.size());
      if (comma > pos) names.emplace_back(spec.labels.substr(pos, comma - pos));  // none: ""
      pos = comma + 1;
    }
    std::vector<Label> labels;
    for (const std::string& n : names) labels.push_back({n, n == "replica" ? "1" : "v"});
    w.sample(spec.name, labels, 42);
  }
  const Exposition e = parse_exposition(w.text());
  EXPECT_EQ(e.skipped_lines, 0u);
  EXPECT_EQ(e.families.size(), kWardenMetrics.size());
  for (const MetricSpec& spec : kWardenMetrics) {
    const Family* f = e.family(spec.name);
    ASSERT_NE(f, nullptr) << spec.name;
    EXPECT_EQ(f->type, spec.type);
    bool found = false;
    for (const Sample& s : e.samples) found = found || s.name.starts_with(spec.name);
    EXPECT_TRUE(found) << spec.name;
  }
  for (const Sample& s : e.samples) EXPECT_NE(s.type, MetricType::kUntyped) << s.name;
}

}  // namespace
}  // namespace lmwarden::telemetry
