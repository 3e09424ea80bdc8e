#include "telemetry/prometheus_writer.h"

#include <charconv>
#include <cmath>
#include <vector>

namespace lmwarden::telemetry {
namespace {

void append_escaped(std::string& out, std::string_view s, bool escape_quote) {
  for (char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '"':
        if (escape_quote) {
          out += "\\\"";
          break;
        }
        [[fallthrough]];
      default:
        out.push_back(c);
    }
  }
}

}  // namespace

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[32];
  // Whole numbers below 2^53 print as integers (counters, gauges of requests);
  // the rest take the shortest round-trip form.
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(value));
    return std::string(buf, ptr);
  }
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, ptr);
}

void PrometheusWriter::family(std::string_view name, MetricType type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  append_escaped(out_, help, /*escape_quote=*/false);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += to_string(type);
  out_ += '\n';
}

void PrometheusWriter::write_labels(std::span<const Label> labels, const Label* extra) {
  if (labels.empty() && extra == nullptr) return;
  out_ += '{';
  bool first = true;
  const auto one = [&](const Label& l) {
    if (!first) out_ += ',';
    first = false;
    out_ += l.name;
    out_ += "=\"";
    append_escaped(out_, l.value, /*escape_quote=*/true);
    out_ += '"';
  };
  for (const Label& l : labels) one(l);
  if (extra != nullptr) one(*extra);
  out_ += '}';
}

void PrometheusWriter::sample(std::string_view name, std::span<const Label> labels, double value) {
  out_ += name;
  write_labels(labels, nullptr);
  out_ += ' ';
  out_ += format_value(value);
  out_ += '\n';
}

void PrometheusWriter::histogram(std::string_view name, std::span<const Label> labels,
                                 const HistogramSnapshot& snapshot) {
  const std::string bucket = std::string(name) + "_bucket";
  for (std::size_t i = 0; i < snapshot.cumulative_counts.size(); ++i) {
    const std::string le =
        i < snapshot.upper_bounds.size() ? format_value(snapshot.upper_bounds[i]) : "+Inf";
    const Label le_label{"le", le};
    out_ += bucket;
    write_labels(labels, &le_label);
    out_ += ' ';
    out_ += format_value(static_cast<double>(snapshot.cumulative_counts[i]));
    out_ += '\n';
  }
  sample(std::string(name) + "_sum", labels, snapshot.sum);
  sample(std::string(name) + "_count", labels, static_cast<double>(snapshot.count()));
}

}  // namespace lmwarden::telemetry
