// Checks on a configuration file's text that yaml-cpp does not make.
//
// Quoted strings left open, which yaml-cpp reads wrongly or reports far from
// where the quote is missing. yaml-cpp takes `admin_token: "sekret` on a
// file's last line (with its newline) for the string "sekret " where YAML
// says the file is broken; left open earlier in the file, the string runs on
// over the lines below, and the error comes lines later, about a mapping.
//
// A second document, which YAML::Load leaves unread (and YAML::LoadAll,
// which would read it, never returns on some malformed files).
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace lmwarden::config::yaml {

// The line (1-based) of a quoted scalar in `node` (and the nodes under it),
// parsed from `text`, whose closing quote the text does not have.
std::optional<int> unclosed_quote_line(const YAML::Node& node, std::string_view text);

inline constexpr std::string_view kUnclosedQuote =
    "invalid YAML: a quoted string opens on this line and does not close on it: is its closing "
    "quote missing?";

// yaml-cpp's parse error `message` on `error_line` (1-based), said where its
// cause most likely is: the line (1-based) and what to tell the operator.
// - The first line up to it that opens a quoted value (where a scalar may
//   begin: see the .cpp) and does not close it. YAML allows a quoted string
//   over several lines, but in a configuration file such a line is far more
//   often a quote forgotten.
// - Else the first line up to it whose indentation holds a tab, which YAML
//   does not allow there (yaml-cpp says "illegal block entry" or "illegal tab
//   when looking for indentation").
// - Else the error as yaml-cpp gives it.
std::pair<int, std::string> explain_parse_error(std::string_view text, int error_line,
                                                const std::string& message);

// The line (1-based) where a second document's content begins: the first
// line with content after a `---` or `...` marker line (at the line's start)
// that follows content. Comments and blank lines are no content.
std::optional<int> second_document_line(std::string_view text);

}  // namespace lmwarden::config::yaml
