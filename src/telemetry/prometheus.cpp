#include "telemetry/prometheus.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <system_error>

namespace lmwarden::telemetry {
namespace {

// Labels on one sample line at most. vLLM's carry a few (seven at most in
// tests' four-engine fixture); a line with
// thousands (a broken or hostile exporter) is skipped, so that the check for
// duplicates, which compares each label with those before it, stays cheap.
constexpr std::size_t kMaxLabels = 64;

constexpr bool is_blank(char c) noexcept {
  return c == ' ' || c == '\t';
}
constexpr bool is_alpha_(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
constexpr bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}
constexpr bool is_metric_start(char c) noexcept {
  return is_alpha_(c) || c == ':';
}
constexpr bool is_metric_char(char c) noexcept {
  return is_metric_start(c) || is_digit(c);
}
constexpr bool is_label_char(char c) noexcept {
  return is_alpha_(c) || is_digit(c);
}

// Cursor over one line; every read is bounds-checked, so no input can walk it
// past the end.
struct Cursor {
  std::string_view s;
  std::size_t i = 0;

  bool done() const noexcept { return i >= s.size(); }
  char peek() const noexcept { return done() ? '\0' : s[i]; }
  std::size_t skip_blanks() noexcept {
    const std::size_t from = i;
    while (!done() && is_blank(s[i])) ++i;
    return i - from;
  }
  std::string_view take_while(bool (*pred)(char) noexcept) noexcept {
    const std::size_t from = i;
    while (!done() && pred(s[i])) ++i;
    return s.substr(from, i - from);
  }
  std::string_view take_token() noexcept {
    const std::size_t from = i;
    while (!done() && !is_blank(s[i])) ++i;
    return s.substr(from, i - from);
  }
};

std::string_view take_metric_name(Cursor& c) noexcept {
  if (!is_metric_start(c.peek())) return {};
  return c.take_while([](char ch) noexcept { return is_metric_char(ch); });
}

// Go's strconv.ParseFloat, as Prometheus uses it: decimal and exponent forms,
// "NaN", "Inf", "+Inf", "-Inf" in any case. from_chars accepts all of these but
// a leading '+'. Out-of-range values are errors there, so they are here too.
bool parse_float(std::string_view token, double& out) noexcept {
  if (token.size() > 1 && token[0] == '+' && token[1] != '-' && token[1] != '+') {
    token.remove_prefix(1);
  }
  if (token.empty()) return false;
  const char* end = token.data() + token.size();
  const auto [ptr, ec] = std::from_chars(token.data(), end, out, std::chars_format::general);
  return ec == std::errc{} && ptr == end;
}

bool parse_int64(std::string_view token, std::int64_t& out) noexcept {
  if (token.empty()) return false;
  const char* end = token.data() + token.size();
  const auto [ptr, ec] = std::from_chars(token.data(), end, out);
  return ec == std::errc{} && ptr == end;
}

bool belongs_to_family(std::string_view sample, std::string_view family) noexcept {
  if (family.empty() || !sample.starts_with(family)) return false;
  static constexpr std::array<std::string_view, 8> kSuffixes = {
      "", "_total", "_created", "_bucket", "_sum", "_count", "_gsum", "_gcount"};
  const std::string_view suffix = sample.substr(family.size());
  return std::find(kSuffixes.begin(), kSuffixes.end(), suffix) != kSuffixes.end();
}

}  // namespace

std::string_view to_string(MetricType type) noexcept {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
    case MetricType::kSummary:
      return "summary";
    case MetricType::kUntyped:
      break;
  }
  return "untyped";
}

std::optional<MetricType> parse_metric_type(std::string_view word) noexcept {
  if (word == "counter") return MetricType::kCounter;
  if (word == "gauge") return MetricType::kGauge;
  if (word == "histogram") return MetricType::kHistogram;
  if (word == "summary") return MetricType::kSummary;
  if (word == "untyped" || word == "unknown") return MetricType::kUntyped;
  return std::nullopt;
}

std::optional<std::string_view> SampleView::label(std::string_view label_name) const noexcept {
  for (std::size_t i = 0; i < label_count; ++i) {
    if (labels[i].name == label_name) return labels[i].value;
  }
  return std::nullopt;
}

const ExpositionEntry* ExpositionReader::next() {
  while (pos_ < text_.size()) {
    const std::size_t nl = text_.find('\n', pos_);
    const std::size_t end = nl == std::string_view::npos ? text_.size() : nl;
    std::string_view line = text_.substr(pos_, end - pos_);
    pos_ = nl == std::string_view::npos ? text_.size() : nl + 1;
    ++line_number_;

    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    while (!line.empty() && is_blank(line.front())) line.remove_prefix(1);
    while (!line.empty() && is_blank(line.back())) line.remove_suffix(1);
    if (line.empty()) continue;

    // Views handed out for this line point into scratch_; reserving the line's
    // length up front means unescaping (which only shrinks) never reallocates.
    scratch_.clear();
    scratch_.reserve(line.size());
    labels_.clear();

    if (line.front() == '#') {
      if (parse_comment(line)) return &entry_;
      continue;
    }
    if (parse_sample(line)) return &entry_;
    skip_line();
  }
  return nullptr;
}

void ExpositionReader::skip_line() noexcept {
  ++skipped_lines_;
  if (first_skipped_line_ == 0) first_skipped_line_ = line_number_;
}

// Returns true when the line produced an entry. Ordinary comments are ignored;
// a # HELP or # TYPE line that does not parse is counted as skipped.
bool ExpositionReader::parse_comment(std::string_view line) {
  Cursor c{line, 1};
  c.skip_blanks();
  const std::string_view keyword = c.take_token();
  if (keyword != "HELP" && keyword != "TYPE") return false;
  if (c.skip_blanks() == 0) {
    skip_line();
    return false;
  }
  const std::string_view family = take_metric_name(c);
  if (family.empty() || (!c.done() && !is_blank(c.peek()))) {
    skip_line();
    return false;
  }
  c.skip_blanks();

  entry_ = ExpositionEntry{};
  entry_.family = family;
  if (keyword == "TYPE") {
    const std::string_view word = c.take_token();
    c.skip_blanks();
    const auto type = parse_metric_type(word);
    if (!type || !c.done()) {
      skip_line();
      return false;
    }
    family_name_.assign(family);
    family_type_ = *type;
    entry_.kind = ExpositionEntry::Kind::kType;
    entry_.type = *type;
    return true;
  }

  // HELP text escapes only "\\" and "\n"; any other backslash is kept as
  // written rather than rejecting a line that is only documentation.
  const std::string_view raw = line.substr(c.i);
  if (raw.find('\\') == std::string_view::npos) {
    entry_.help = raw;
  } else {
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\\' && i + 1 < raw.size() && (raw[i + 1] == '\\' || raw[i + 1] == 'n')) {
        scratch_.push_back(raw[i + 1] == 'n' ? '\n' : '\\');
        ++i;
      } else {
        scratch_.push_back(raw[i]);
      }
    }
    entry_.help = scratch_;
  }
  entry_.kind = ExpositionEntry::Kind::kHelp;
  return true;
}

bool ExpositionReader::parse_sample(std::string_view line) {
  Cursor c{line};
  const std::string_view name = take_metric_name(c);
  if (name.empty()) return false;

  const std::size_t blanks_after_name = c.skip_blanks();
  if (c.peek() == '{') {
    ++c.i;
    while (true) {
      c.skip_blanks();
      if (c.peek() == '}') break;
      const std::string_view label_name =
          c.take_while([](char ch) noexcept { return is_label_char(ch); });
      if (label_name.empty() || is_digit(label_name.front())) return false;
      c.skip_blanks();
      if (c.peek() != '=') return false;
      ++c.i;
      c.skip_blanks();
      if (c.peek() != '"') return false;
      ++c.i;

      // Fast path: a value without escapes is a view into the input.
      const std::size_t value_start = c.i;
      bool escaped = false;
      while (!c.done() && c.peek() != '"') {
        if (c.peek() == '\\') {
          escaped = true;
          break;
        }
        ++c.i;
      }
      std::string_view value;
      if (!escaped) {
        if (c.done()) return false;
        value = line.substr(value_start, c.i - value_start);
      } else {
        const std::size_t out_start = scratch_.size();
        scratch_.append(line.substr(value_start, c.i - value_start));
        while (!c.done() && c.peek() != '"') {
          char ch = line[c.i++];
          if (ch == '\\') {
            if (c.done()) return false;
            const char esc = line[c.i++];
            if (esc == 'n') {
              ch = '\n';
            } else if (esc == '\\' || esc == '"') {
              ch = esc;
            } else {
              return false;  // Prometheus rejects other escapes too
            }
          }
          scratch_.push_back(ch);
        }
        if (c.done()) return false;
        value = std::string_view(scratch_).substr(out_start);
      }
      ++c.i;  // closing quote

      if (labels_.size() == kMaxLabels) return false;
      for (const LabelView& seen : labels_) {
        if (seen.name == label_name) return false;  // duplicate label
      }
      labels_.push_back({label_name, value});

      c.skip_blanks();
      if (c.peek() == ',') {
        ++c.i;
        continue;
      }
      if (c.peek() == '}') break;
      return false;
    }
    ++c.i;  // closing brace
    c.skip_blanks();
  } else if (blanks_after_name == 0) {
    return false;  // "name@" or similar: the name ran into garbage
  }

  double value = 0.0;
  if (!parse_float(c.take_token(), value)) return false;

  std::optional<std::int64_t> timestamp;
  if (c.skip_blanks() > 0 && !c.done()) {
    std::int64_t ts = 0;
    if (!parse_int64(c.take_token(), ts)) return false;
    timestamp = ts;
    c.skip_blanks();
  }
  if (!c.done()) return false;

  entry_ = ExpositionEntry{};
  entry_.kind = ExpositionEntry::Kind::kSample;
  entry_.sample.name = name;
  entry_.sample.labels = labels_.data();
  entry_.sample.label_count = labels_.size();
  entry_.sample.value = value;
  entry_.sample.timestamp_ms = timestamp;
  entry_.sample.type = belongs_to_family(name, family_name_) ? family_type_ : MetricType::kUntyped;
  return true;
}

const std::string* Sample::label(std::string_view label_name) const noexcept {
  for (const auto& [k, v] : labels) {
    if (k == label_name) return &v;
  }
  return nullptr;
}

const Family* Exposition::family(std::string_view name) const noexcept {
  for (const Family& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

Exposition parse_exposition(std::string_view text) {
  Exposition out;
  ExpositionReader reader(text);
  auto family_slot = [&out](std::string_view name) -> Family& {
    for (Family& f : out.families) {
      if (f.name == name) return f;
    }
    return out.families.emplace_back(Family{.name = std::string(name)});
  };
  while (const ExpositionEntry* e = reader.next()) {
    switch (e->kind) {
      case ExpositionEntry::Kind::kSample: {
        Sample& s = out.samples.emplace_back();
        s.name.assign(e->sample.name);
        s.labels.reserve(e->sample.label_count);
        for (std::size_t i = 0; i < e->sample.label_count; ++i) {
          s.labels.emplace_back(e->sample.labels[i].name, e->sample.labels[i].value);
        }
        s.value = e->sample.value;
        s.timestamp_ms = e->sample.timestamp_ms;
        s.type = e->sample.type;
        break;
      }
      case ExpositionEntry::Kind::kHelp:
        family_slot(e->family).help.assign(e->help);
        break;
      case ExpositionEntry::Kind::kType:
        family_slot(e->family).type = e->type;
        break;
    }
  }
  out.skipped_lines = reader.skipped_lines();
  out.first_skipped_line = reader.first_skipped_line();
  return out;
}

}  // namespace lmwarden::telemetry
