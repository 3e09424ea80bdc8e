#include "config/yaml_quotes.h"

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

std::optional<int> find_unclosed(const YAML::Node& node, std::string_view text) {
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
      if (auto line = find_unclosed(kv.first, text)) return line;
      if (auto line = find_unclosed(kv.second, text)) return line;
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node)
      if (auto line = find_unclosed(item, text)) return line;
  }
  return std::nullopt;
}

bool space(char c) {
  return c == ' ' || c == '\t';
}

// Where a quoted value opens on `line`: after its indentation, any "- ",
// and any plain `key: `; npos when the line's value is not quoted.
std::size_t value_quote(std::string_view line) {
  std::size_t i = 0;
  while (true) {
    while (i < line.size() && space(line[i])) ++i;
    if (i + 1 < line.size() && line[i] == '-' && space(line[i + 1])) {
      ++i;
      continue;
    }
    break;
  }
  if (i < line.size() && (line[i] == '"' || line[i] == '\'')) return i;
  // A plain key: up to the first ": " outside quotes, with no comment.
  for (std::size_t k = i; k < line.size(); ++k) {
    const char c = line[k];
    if (c == '#' || c == '"' || c == '\'' || c == '{' || c == '[') return std::string_view::npos;
    if (c == ':' && k + 1 < line.size() && space(line[k + 1])) {
      std::size_t v = k + 1;
      while (v < line.size() && space(line[v])) ++v;
      return v < line.size() && (line[v] == '"' || line[v] == '\'') ? v : std::string_view::npos;
    }
  }
  return std::string_view::npos;
}

}  // namespace

std::optional<int> unclosed_quote_line(const YAML::Node& root, std::string_view text) {
  return find_unclosed(root, text);
}

std::optional<int> quote_left_open_before(std::string_view text, int error_line) {
  std::size_t start = 0;
  for (int line = 1; line <= error_line && start < text.size(); ++line) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view this_line = text.substr(start, end - start);
    if (const std::size_t open = value_quote(this_line);
        open != std::string_view::npos && closing(this_line, open) == std::string_view::npos)
      return line;
    start = end + 1;
  }
  return std::nullopt;
}

}  // namespace lmwarden::config::yaml
