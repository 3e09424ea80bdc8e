#include "config/yaml_text_checks.h"

#include <fmt/format.h>

#include <cstddef>

namespace lmwarden::config::yaml {

namespace {

// Where the string opened by the quote at `open` ends: one past its closing
// quote, or npos when `text` ends first. In double quotes a backslash escapes
// the next character; in single quotes '' is a quote.
std::size_t closing(std::string_view text, std::size_t open) {
  const char quote = text[open];
  for (std::size_t i = open + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;
      } else {
        return i + 1;
      }
    }
  }
  return std::string_view::npos;
}

}  // namespace

std::optional<int> unclosed_quote_line(const YAML::Node& node, std::string_view text) {
  if (node.IsScalar()) {
    const YAML::Mark mark = node.Mark();
    if (node.Tag() != "!" || mark.pos < 0 || static_cast<std::size_t>(mark.pos) >= text.size())
      return std::nullopt;
    const auto at = static_cast<std::size_t>(mark.pos);
    if (text[at] != '"' && text[at] != '\'') return std::nullopt;
    if (closing(text, at) == std::string_view::npos) return mark.line + 1;
    return std::nullopt;
  }
  if (node.IsMap()) {
    for (const auto& kv : node) {
      if (auto line = unclosed_quote_line(kv.first, text)) return line;
      if (auto line = unclosed_quote_line(kv.second, text)) return line;
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node)
      if (auto line = unclosed_quote_line(item, text)) return line;
  }
  return std::nullopt;
}

namespace {

bool space(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

// Where a quoted scalar opens on `line` without closing on it; npos when
// none does. A quote opens a scalar only where one may begin: after the
// indentation, `- `, `? `, a `: `, and inside a flow after `[`, `{` or `,`.
// One elsewhere (`it's`, `x "y`) is plain text, and a comment ends the line.
std::size_t unclosed_on_line(std::string_view line) {
  int depth = 0;      // of [ ] and { } flows
  bool start = true;  // where a scalar may begin
  std::size_t i = 0;
  const auto spaced = [&](std::size_t at) { return at >= line.size() || space(line[at]); };
  while (i < line.size()) {
    const char c = line[i];
    if (space(c)) {
      ++i;
    } else if (c == '#' && (i == 0 || space(line[i - 1]))) {
      return std::string_view::npos;
    } else if (start && (c == '"' || c == '\'')) {
      const std::size_t open = i;
      i = closing(line, open);
      if (i == std::string_view::npos) return open;
      start = false;
    } else if (start && (c == '[' || c == '{')) {
      ++depth;
      ++i;
    } else if (depth > 0 && (c == ']' || c == '}')) {
      --depth;
      start = false;
      ++i;
    } else if (depth > 0 && c == ',') {
      start = true;
      ++i;
    } else if ((c == ':' || (start && (c == '-' || c == '?'))) &&
               (spaced(i + 1) ||
                (depth > 0 && c == ':' &&
                 (line[i + 1] == ',' || line[i + 1] == ']' || line[i + 1] == '}')))) {
      start = true;
      ++i;
    } else {
      start = false;
      ++i;
    }
  }
  return std::string_view::npos;
}

// The number (1-based) of the first line of `text` for which `found(line)`
// is true.
template <typename Found>
std::optional<int> first_line(std::string_view text, Found&& found) {
  std::size_t start = 0;
  for (int line = 1; start < text.size(); ++line) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (found(text.substr(start, end - start))) return line;
    start = end + 1;
  }
  return std::nullopt;
}

}  // namespace

std::pair<int, std::string> explain_parse_error(std::string_view text, int error_line,
                                                const std::string& message) {
  const auto before_error = [&](auto&& found) -> std::optional<int> {
    const auto line = first_line(text, found);
    return line && *line <= error_line ? line : std::nullopt;
  };
  const auto read_on = [&](int line) {
    return line == error_line
               ? message
               : fmt::format("the parser read on to line {}: {}", error_line, message);
  };
  if (const auto open = before_error(
          [](std::string_view l) { return unclosed_on_line(l) != std::string_view::npos; }))
    return {*open, fmt::format("{} ({})", kUnclosedQuote, read_on(*open))};
  if (const auto tab = before_error([](std::string_view l) {
        const std::size_t indent_end = l.find_first_not_of(" \t");
        return indent_end != std::string_view::npos && l[indent_end] != '#' &&
               l[indent_end] != '\r' &&
               l.substr(0, indent_end).find('\t') != std::string_view::npos;
      }))
    return {*tab, fmt::format("invalid YAML: a tab in the indentation; YAML indents with spaces "
                              "only ({})",
                              read_on(*tab))};
  return {error_line, fmt::format("invalid YAML: {}", message)};
}

std::optional<int> second_document_line(std::string_view text) {
  bool content = false;  // in the document so far
  bool marker = false;   // a marker after content
  return first_line(text, [&](std::string_view l) {
    const auto is_marker = [&](std::string_view m) {
      return l.starts_with(m) && (l.size() == 3 || space(l[3]) || l[3] == '#');
    };
    if (is_marker("---") || is_marker("...")) {
      marker = marker || content;
      // Content after `--- ` on the marker's own line is the new document's.
      const std::size_t rest = l.find_first_not_of(" \t\r", 3);
      return marker && rest != std::string_view::npos && l[rest] != '#';
    }
    const std::size_t first = l.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || l[first] == '#') return false;
    content = true;
    return marker;
  });
}

}  // namespace lmwarden::config::yaml
