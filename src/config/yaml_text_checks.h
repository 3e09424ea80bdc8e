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
#include <string_view>

namespace lmwarden::config::yaml {

// The line (1-based) of a quoted scalar in `node` (and the nodes under it),
// parsed from `text`, whose closing quote the text does not have.
std::optional<int> unclosed_quote_line(const YAML::Node& node, std::string_view text);

// For a parse error on `error_line` (1-based): the first line up to it that
// opens a quoted value (where a scalar may begin: see the .cpp) and does not
// close it. YAML allows a quoted string over several lines, but in a
// configuration file such a line is far more often a quote forgotten.
std::optional<int> quote_left_open_before(std::string_view text, int error_line);

// The line (1-based) where a second document's content begins: the first
// line with content after a `---` or `...` marker line (at the line's start)
// that follows content. Comments and blank lines are no content.
std::optional<int> second_document_line(std::string_view text);

}  // namespace lmwarden::config::yaml
