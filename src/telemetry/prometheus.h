// Reader for the Prometheus text exposition format (version 0.0.4), as served by
// vLLM's /metrics and by the warden's own.
//
// The reader is a pull parser over a borrowed buffer: it yields one entry per
// sample or metadata line with views into the input, so a 5 MB scrape is parsed
// without building a copy of it. Label values are unescaped into a scratch
// buffer owned by the reader; every view in an entry stays valid until the next
// call to next().
//
// Grammar (https://prometheus.io/docs/instrumenting/exposition_formats/):
//   sample  = name [ "{" label ( "," label )* [ "," ] "}" ] value [ timestamp ]
//   label   = label_name "=" '"' escaped_value '"'
//   comment = "# HELP " name " " escaped_help | "# TYPE " name " " type | "#" anything
// Names may contain colons; labels come in any order; values are Go floats
// ("NaN", "+Inf", "-Inf", exponents); timestamps are integer milliseconds.
// Blanks between tokens may be spaces or tabs, lines end in "\n" or "\r\n".
//
// Hostile input never crashes the reader: a line that does not parse is skipped
// and counted (skipped_lines()), and parsing goes on with the next line, which
// is what Prometheus itself cannot do but a router that must keep routing
// should. Not supported (skipped as malformed): the UTF-8 quoted-name syntax of
// Prometheus 3 (`{"my.metric"}`), which vLLM does not emit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lmwarden::telemetry {

enum class MetricType : std::uint8_t {
  kUntyped,  // no # TYPE line, or "untyped"/"unknown"
  kCounter,
  kGauge,
  kHistogram,
  kSummary,
};

// "counter", "gauge", … as written after "# TYPE name".
std::string_view to_string(MetricType type) noexcept;
std::optional<MetricType> parse_metric_type(std::string_view word) noexcept;

struct LabelView {
  std::string_view name;
  std::string_view value;  // unescaped
};

struct SampleView {
  std::string_view name;  // full sample name, e.g. "vllm:prefix_cache_hits_total"
  const LabelView* labels = nullptr;
  std::size_t label_count = 0;
  double value = 0.0;
  std::optional<std::int64_t> timestamp_ms;
  // Family declared by the closest preceding "# TYPE" whose name this sample
  // belongs to (the name itself or name + _total/_created/_bucket/_sum/_count…);
  // kUntyped when none.
  MetricType type = MetricType::kUntyped;

  // Value of label `label_name`, or nullopt when the sample does not carry it.
  std::optional<std::string_view> label(std::string_view label_name) const noexcept;
};

struct ExpositionEntry {
  enum class Kind : std::uint8_t { kSample, kHelp, kType };
  Kind kind = Kind::kSample;
  SampleView sample;                       // kSample
  std::string_view family;                 // kHelp, kType: the metric family named by the comment
  std::string_view help;                   // kHelp, unescaped
  MetricType type = MetricType::kUntyped;  // kType
};

class ExpositionReader {
 public:
  // `text` must outlive the reader.
  explicit ExpositionReader(std::string_view text) noexcept : text_(text) {}

  // Next sample, # HELP or # TYPE line; nullptr at end of input. Other comments
  // and blank lines are passed over; malformed lines are skipped and counted.
  const ExpositionEntry* next();

  std::size_t lines_read() const noexcept { return line_number_; }
  std::size_t skipped_lines() const noexcept { return skipped_lines_; }
  // 1-based number of the first malformed line (0 when none), for one log line
  // that lets an operator find the culprit without flooding the log.
  std::size_t first_skipped_line() const noexcept { return first_skipped_line_; }

 private:
  bool parse_sample(std::string_view line);
  bool parse_comment(std::string_view line);
  void skip_line() noexcept;

  std::string_view text_;
  std::size_t pos_ = 0;
  std::size_t line_number_ = 0;
  std::size_t skipped_lines_ = 0;
  std::size_t first_skipped_line_ = 0;
  // The family of the last "# TYPE"; samples inherit its type.
  std::string family_name_;
  MetricType family_type_ = MetricType::kUntyped;
  std::vector<LabelView> labels_;
  std::string scratch_;  // unescaped label values / help text of the current line
  ExpositionEntry entry_;
};

// Owning form for tests, tools and small inputs: every sample and family of the
// text, in order. The scraper should prefer ExpositionReader.
struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // exposition order
  double value = 0.0;
  std::optional<std::int64_t> timestamp_ms;
  MetricType type = MetricType::kUntyped;

  const std::string* label(std::string_view label_name) const noexcept;
};

struct Family {
  std::string name;
  MetricType type = MetricType::kUntyped;
  std::string help;
};

struct Exposition {
  std::vector<Sample> samples;
  std::vector<Family> families;  // one per name seen in # HELP or # TYPE, first-seen order
  std::size_t skipped_lines = 0;
  std::size_t first_skipped_line = 0;

  const Family* family(std::string_view name) const noexcept;
};

Exposition parse_exposition(std::string_view text);

}  // namespace lmwarden::telemetry
