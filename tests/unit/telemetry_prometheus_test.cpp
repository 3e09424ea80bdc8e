#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "telemetry/prometheus.h"
#include "telemetry/vllm_snapshot.h"

namespace lmwarden::telemetry {
namespace {

std::string read_fixture(const std::string& relative) {
  std::ifstream in(std::string(LMWARDEN_FIXTURES) + "/" + relative, std::ios::binary);
  EXPECT_TRUE(in.good()) << relative;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PrometheusParser, ReadsHelpTypeAndSamples) {
  const Exposition e = parse_exposition(
      "# HELP http_requests_total The total number of HTTP requests.\n"
      "# TYPE http_requests_total counter\n"
      "http_requests_total{method=\"post\",code=\"200\"} 1027 1395066363000\n"
      "http_requests_total{method=\"post\",code=\"400\"}    3 1395066363000\n"
      "\n"
      "# a free comment\n"
      "metric_without_timestamp_and_labels 12.47\n");
  ASSERT_EQ(e.samples.size(), 3u);
  EXPECT_EQ(e.skipped_lines, 0u);
  EXPECT_EQ(e.samples[0].name, "http_requests_total");
  EXPECT_EQ(e.samples[0].type, MetricType::kCounter);
  EXPECT_EQ(*e.samples[0].label("code"), "200");
  EXPECT_EQ(e.samples[0].value, 1027);
  EXPECT_EQ(e.samples[0].timestamp_ms, 1395066363000);
  EXPECT_EQ(e.samples[1].value, 3);
  EXPECT_EQ(e.samples[2].type, MetricType::kUntyped);
  EXPECT_FALSE(e.samples[2].timestamp_ms);
  EXPECT_TRUE(e.samples[2].labels.empty());
  ASSERT_NE(e.family("http_requests_total"), nullptr);
  EXPECT_EQ(e.family("http_requests_total")->help, "The total number of HTTP requests.");
}

TEST(PrometheusParser, UnescapesLabelValuesAndHelp) {
  const Exposition e = parse_exposition(
      "# HELP m A \\\\ backslash\\nand a newline\n"
      "m{path=\"C:\\\\DIR\\\\FILE.TXT\",quote=\"say \\\"hi\\\"\",nl=\"a\\nb\"} 1\n");
  ASSERT_EQ(e.samples.size(), 1u);
  EXPECT_EQ(*e.samples[0].label("path"), "C:\\DIR\\FILE.TXT");
  EXPECT_EQ(*e.samples[0].label("quote"), "say \"hi\"");
  EXPECT_EQ(*e.samples[0].label("nl"), "a\nb");
  EXPECT_EQ(e.family("m")->help, "A \\ backslash\nand a newline");
}

TEST(PrometheusParser, LabelOrderAndSpacingDoNotMatter) {
  const Exposition e = parse_exposition(
      "m{a=\"1\",b=\"2\"} 1\n"
      "m{ b = \"2\" , a=\"1\", } 2\n"
      "m\t{a=\"1\"}\t3\t-5\r\n"
      "m {} 4\n");
  ASSERT_EQ(e.samples.size(), 4u) << e.first_skipped_line;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(*e.samples[i].label("a"), "1");
    EXPECT_EQ(*e.samples[i].label("b"), "2");
  }
  EXPECT_EQ(e.samples[2].timestamp_ms, -5);
  EXPECT_EQ(e.samples[3].value, 4);
}

TEST(PrometheusParser, SpecialAndExponentValues) {
  const Exposition e =
      parse_exposition("a NaN\nb +Inf\nc -Inf\nd 1.7964e+09\ne -1.5E-3\nf +12\ng Inf\nh nan\n");
  ASSERT_EQ(e.samples.size(), 8u);
  EXPECT_TRUE(std::isnan(e.samples[0].value));
  EXPECT_EQ(e.samples[1].value, std::numeric_limits<double>::infinity());
  EXPECT_EQ(e.samples[2].value, -std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(e.samples[3].value, 1.7964e9);
  EXPECT_DOUBLE_EQ(e.samples[4].value, -1.5e-3);
  EXPECT_EQ(e.samples[5].value, 12);
  EXPECT_EQ(e.samples[6].value, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(e.samples[7].value));
}

// A sample line `many{a0="",a1="",…}` with n labels.
std::string many_labels(int n) {
  std::string line = "many{";
  for (int i = 0; i < n; ++i) line += (i ? ",a" : "a") + std::to_string(i) + "=\"\"";
  return line + "}";
}

TEST(PrometheusParser, SkipsAndCountsGarbageWithoutLosingGoodLines) {
  const std::string text =
      "good 1\n"
      "{no_name=\"x\"} 1\n"        // 2: no name
      "bad{a=\"unterminated} 1\n"  // 3
      "bad{a=\"x\" 1\n"            // 4: no closing brace
      "bad{a=\"\\t\"} 1\n"         // 5: invalid escape
      "bad{a=\"1\",a=\"2\"} 1\n"   // 6: duplicate label
      "bad 1 2 3\n"                // 7: trailing junk
      "bad one\n"                  // 8: not a number
      "bad 1e999\n"                // 9: out of range
      "bad{0a=\"1\"} 1\n"          // 10: label starts with a digit
      "# TYPE bad nonsense\n"      // 11: unknown type
      "bad\n"                      // 12: no value
      "\xff\xfe\x01\n"             // 13: binary
      + many_labels(65) + " 1\n"   // 14: more labels than any exporter writes
      + many_labels(64) + " 4\n"   // as many as are read
      + "good 2\n"
      "good{x=\"\xc3\xa9\"} 3";  // no final newline, UTF-8 value
  const Exposition e = parse_exposition(text);
  ASSERT_EQ(e.samples.size(), 4u);
  EXPECT_EQ(e.samples[1].value, 4);
  EXPECT_EQ(e.samples[1].labels.size(), 64u);
  EXPECT_EQ(e.samples[3].value, 3);
  EXPECT_EQ(*e.samples[3].label("x"), "\xc3\xa9");
  EXPECT_EQ(e.skipped_lines, 13u);
  EXPECT_EQ(e.first_skipped_line, 2u);
}

TEST(PrometheusParser, TypeAppliesToSuffixedSamplesOfTheFamily) {
  const Exposition e = parse_exposition(
      "# TYPE vllm:prefix_cache_hits counter\n"
      "vllm:prefix_cache_hits_total{engine=\"0\"} 5\n"
      "vllm:prefix_cache_hits_created{engine=\"0\"} 1.7e9\n"
      "vllm:prefix_cache_hits_other 1\n"
      "# TYPE ttft histogram\n"
      "ttft_bucket{le=\"+Inf\"} 3\nttft_sum 1.5\nttft_count 3\n");
  ASSERT_EQ(e.samples.size(), 6u);
  EXPECT_EQ(e.samples[0].type, MetricType::kCounter);
  EXPECT_EQ(e.samples[1].type, MetricType::kCounter);
  EXPECT_EQ(e.samples[2].type, MetricType::kUntyped);
  EXPECT_EQ(e.samples[3].type, MetricType::kHistogram);
  EXPECT_EQ(e.samples[5].type, MetricType::kHistogram);
}

TEST(PrometheusParser, ParsesTheDp4FixtureCompletely) {
  const std::string text = read_fixture("vllm/metrics-dp4.txt");
  const Exposition e = parse_exposition(text);
  EXPECT_EQ(e.skipped_lines, 0u) << "first bad line " << e.first_skipped_line;
  EXPECT_GT(e.samples.size(), 100u);
  std::size_t created = 0;
  for (const Sample& s : e.samples) created += s.name.ends_with("_created");
  EXPECT_GT(created, 0u);
}

TEST(VllmSnapshot, ReadsFourEnginesWithCurrentNames) {
  const VllmSnapshot s = extract_vllm_snapshot(read_fixture("vllm/metrics-dp4.txt"));
  ASSERT_EQ(s.ranks.size(), 4u);
  EXPECT_FALSE(s.legacy_names);
  EXPECT_EQ(s.skipped_lines, 0u);
  const RankMetrics* r3 = s.rank(3);
  ASSERT_NE(r3, nullptr);
  EXPECT_EQ(r3->running, 5.0);
  EXPECT_EQ(r3->waiting, 2.0);
  EXPECT_DOUBLE_EQ(*r3->kv_cache_usage, 0.9312);
  EXPECT_EQ(r3->prefix_cache_queries, 2533120.0);  // not the _created timestamp
  EXPECT_EQ(r3->prefix_cache_hits, 1802912.0);
  EXPECT_EQ(r3->prompt_tokens, 2533120.0);
  EXPECT_EQ(r3->generation_tokens, 60120.0);
  EXPECT_EQ(s.rank(0)->running, 3.0);
  EXPECT_EQ(s.rank(1)->prefix_cache_hits, 1003520.0);
  EXPECT_EQ(s.rank(4), nullptr);
}

TEST(VllmSnapshot, ReadsLegacyNamesWithoutEngineLabelAsRankZero) {
  const std::vector<std::string> names{"Qwen/Qwen3-4B-Instruct-2507"};
  const VllmSnapshot s =
      extract_vllm_snapshot(read_fixture("vllm/metrics-legacy-single.txt"), names);
  ASSERT_EQ(s.ranks.size(), 1u);
  EXPECT_TRUE(s.legacy_names);
  const RankMetrics& r = s.ranks[0];
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.running, 2.0);
  EXPECT_EQ(r.waiting, 0.0);
  EXPECT_DOUBLE_EQ(*r.kv_cache_usage, 0.2518);
  EXPECT_EQ(r.prefix_cache_queries, 52480.0);
  EXPECT_EQ(r.prefix_cache_hits, 40960.0);
  EXPECT_EQ(r.prompt_tokens, 52480.0);
  EXPECT_EQ(r.generation_tokens, 3301.0);
}

TEST(VllmSnapshot, CurrentNameWinsOverLegacyInEitherOrder) {
  const VllmSnapshot s = extract_vllm_snapshot(
      "vllm:gpu_cache_usage_perc{engine=\"0\"} 0.9\n"
      "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"
      "vllm:kv_cache_usage_perc{engine=\"1\"} 0.25\n"
      "vllm:gpu_cache_usage_perc{engine=\"1\"} 0.75\n");
  ASSERT_EQ(s.ranks.size(), 2u);
  EXPECT_EQ(s.rank(0)->kv_cache_usage, 0.5);
  EXPECT_EQ(s.rank(1)->kv_cache_usage, 0.25);
  EXPECT_FALSE(s.legacy_names);
}

TEST(VllmSnapshot, FiltersByModelAndIgnoresBadRanks) {
  const VllmSnapshot s = extract_vllm_snapshot(
      "vllm:num_requests_running{model_name=\"a\",engine=\"0\"} 1\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"b\"} 7\n"
      "vllm:num_requests_running{engine=\"x\",model_name=\"a\"} 9\n"
      "vllm:num_requests_running{engine=\"99999999\",model_name=\"a\"} 9\n"
      "vllm:num_requests_running{engine=\"-1\",model_name=\"a\"} 9\n"
      "vllm:num_requests_running{engine=\"00\",model_name=\"a\"} 9\n"
      "vllm:num_requests_running{engine=\"-0\",model_name=\"a\"} 9\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"a\"} NaN\n",
      std::vector<std::string>{"a"});
  ASSERT_EQ(s.ranks.size(), 1u);
  EXPECT_EQ(s.rank(0)->running, 1.0);
  EXPECT_FALSE(s.rank(0)->waiting);
  EXPECT_TRUE(s.unmatched_models.empty());
}

// One server, two models: each model's replicas carry its own load, not the
// sum of both (the scraper passes the model's name and aliases).
TEST(VllmSnapshot, AServerOfTwoModelsGivesEachItsOwnSeries) {
  const std::string text =
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"other\"} 5\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"other\"} 0.75\n"
      "vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 100\n"
      "vllm:prompt_tokens_total{engine=\"0\",model_name=\"other\"} 900\n"
      "vllm:num_requests_waiting{engine=\"0\"} 2\n";  // no model named: read for either
  const std::vector<std::string> m{"m"};
  VllmSnapshot s = extract_vllm_snapshot(text, m);
  ASSERT_EQ(s.ranks.size(), 1u);
  EXPECT_EQ(s.rank(0)->running, 3.0);
  EXPECT_EQ(s.rank(0)->kv_cache_usage, 0.25);
  EXPECT_EQ(s.rank(0)->prompt_tokens, 100.0);
  EXPECT_EQ(s.rank(0)->waiting, 2.0);
  EXPECT_TRUE(s.unmatched_models.empty());
  // Found by an alias.
  const std::vector<std::string> aliased{"model-two", "other"};
  s = extract_vllm_snapshot(text, aliased);
  EXPECT_EQ(s.rank(0)->running, 5.0);
  EXPECT_EQ(s.rank(0)->prompt_tokens, 900.0);
  // Named by neither: everything, summed (KV use the largest), and said.
  const std::vector<std::string> neither{"third"};
  s = extract_vllm_snapshot(text, neither);
  EXPECT_EQ(s.rank(0)->running, 8.0);
  EXPECT_EQ(s.rank(0)->kv_cache_usage, 0.75);
  EXPECT_EQ(s.unmatched_models, (std::vector<std::string>{"m", "other"}));
  // No names asked for: everything, nothing said.
  s = extract_vllm_snapshot(text);
  EXPECT_EQ(s.rank(0)->running, 8.0);
  EXPECT_TRUE(s.unmatched_models.empty());
}

// A model name written with an escape is unescaped into the reader's buffer,
// which the next, longer line reuses and grows: the names said are the
// snapshot's own copies, not views into that buffer.
TEST(VllmSnapshot, ModelNamesWithEscapesOutliveTheLineTheyWereReadFrom) {
  const std::string long_name(512, 'z');
  const std::string text =
      "vllm:num_requests_running{engine=\"0\",model_name=\"a\\\\b\"} 1\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"c\\\"d\"} 1\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"" +
      long_name + "\\n\"} 1\n";
  const std::vector<std::string> names{"m"};
  const VllmSnapshot s = extract_vllm_snapshot(text, names);
  EXPECT_EQ(s.unmatched_models, (std::vector<std::string>{"a\\b", "c\"d", long_name + "\n"}));
}

// vLLM labels every series with its first --served-model-name; a model the
// warden knows by another of them still reads that server's figures.
TEST(VllmSnapshot, AServerNamingItsOneModelOtherwiseIsReadWhole) {
  const std::vector<std::string> names{"qwen3"};
  const VllmSnapshot s = extract_vllm_snapshot(read_fixture("vllm/metrics-dp4.txt"), names);
  ASSERT_EQ(s.ranks.size(), 4u);
  EXPECT_EQ(s.rank(3)->running, 5.0);
  EXPECT_TRUE(s.unmatched_models.empty());
}

// A server with many ranks and a big histogram: the reader must stay linear.
TEST(PrometheusParser, HandlesAFiveMegabyteExposition) {
  std::string text;
  text.reserve(6u << 20);
  text +=
      "# HELP vllm:request_latency_seconds Latency.\n# TYPE vllm:request_latency_seconds "
      "histogram\n";
  std::size_t lines = 0;
  for (int engine = 0; text.size() < (5u << 20); ++engine) {
    for (int b = 0; b < 100; ++b) {
      text += "vllm:request_latency_seconds_bucket{engine=\"" + std::to_string(engine) +
              "\",le=\"" + std::to_string(b * 0.25) +
              "\",model_name=\"Qwen/Qwen3-4B-Instruct-2507\"} " + std::to_string(b * 17) + ".0\n";
      ++lines;
    }
  }
  text += "vllm:num_requests_running{engine=\"7\"} 3\n";
  ExpositionReader reader(text);
  std::size_t samples = 0;
  double last = 0;
  while (const ExpositionEntry* e = reader.next()) {
    if (e->kind == ExpositionEntry::Kind::kSample) {
      ++samples;
      last = e->sample.value;
    }
  }
  EXPECT_EQ(samples, lines + 1);
  EXPECT_EQ(last, 3);
  EXPECT_EQ(reader.skipped_lines(), 0u);
  EXPECT_EQ(extract_vllm_snapshot(text).rank(7)->running, 3.0);
}

}  // namespace
}  // namespace lmwarden::telemetry
