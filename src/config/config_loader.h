// Loading and validating the YAML configuration (reference: docs/configuration.md).
//
// Everything is checked once, here, at start: unknown keys anywhere, wrong
// types, impossible values, duplicate model names. All problems are reported
// together, each with the file, the line, the key path and the reason:
//
//   lmwarden.yaml:12: models[0].spill_threshold: must be an integer from 1 to 1000000 or
//   "auto", got "0"
//
// Past this point the rest of the warden reads config::Config and never
// re-validates.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "config/config.h"

namespace lmwarden::config {

struct ConfigError {
  std::string file;
  int line = 0;          // 1-based; 0 when the problem has no single place
  std::string key_path;  // e.g. models[1].backends[0].url; "" for the whole file
  std::string reason;

  // "file:line: key_path: reason", leaving out what is unknown.
  std::string message() const;
  bool operator==(const ConfigError&) const = default;
};

struct ConfigErrors {
  std::vector<ConfigError> errors;  // in file order, never empty

  // One line per error.
  std::string message() const;
};

using ConfigResult = Result<Config, ConfigErrors>;

struct ListenAddress {
  std::string host;  // an IP literal, IPv6 without brackets
  std::uint16_t port = 0;
  bool operator==(const ListenAddress&) const = default;
};

// The largest configuration file read: a few KiB is usual, and a path to a
// device or to some other file given by mistake is refused at this size.
inline constexpr std::size_t kMaxConfigBytes = 4 * 1024 * 1024;

// Reads and validates a file. `path` is how messages name it. `listening`,
// on a reload: the address the warden listens on (which a reload does not
// change), refused as a backend like the file's own listen address.
ConfigResult load_config_file(const std::string& path, const ListenAddress* listening = nullptr);

// Validates YAML text; `source_name` is how messages name it.
ConfigResult load_config_string(std::string_view text, std::string_view source_name,
                                const ListenAddress* listening = nullptr);

// --- parsers shared with the command line (and tested on their own) ---

// "127.0.0.1:8080", "0.0.0.0:80", "[::1]:8080", "localhost:8080" (read as
// 127.0.0.1, so the listener never depends on a resolver). Port 0 asks the OS
// for a free port (tests). The error is a sentence without the input in it.
Result<ListenAddress, std::string> parse_listen_address(std::string_view text);

// A DNS name as found in container networks and /etc/hosts (letters,
// digits, '-', '_' and '.', at most 253), not checked against a resolver.
bool is_hostname(std::string_view s) noexcept;

// A name a TLS certificate can carry (shared_homes.tls_server_name): an IP
// address, or a DNS name of labels of 1 to 63 letters, digits and '-' (not
// first or last), not all digits.
bool is_certificate_name(const std::string& name) noexcept;

// "500ms", "90s", "30m", "1h", or sums such as "1h30m". Whole numbers only;
// a bare number is refused (seconds or milliseconds would be a guess).
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

// "65536", "64KiB", "32MiB", "1GiB" (powers of 1024) or "64kB", "32MB", "1GB"
// (powers of 1000). Units are case-insensitive; a space before the unit is fine.
std::optional<std::uint64_t> parse_byte_size(std::string_view text);

// "header:NAME", "body:dotted.path", "claude-user-id" or "opening". The error is
// a sentence.
Result<SessionSource, std::string> parse_session_source(std::string_view text);

// "true" or "false", in any case.
std::optional<bool> parse_bool(std::string_view text);

// Splits a backend URL: http://host[:port][/path]. https is refused for now.
Result<BackendConfig, std::string> parse_backend_url(std::string_view url);

// Letters, digits and '_', not starting with a digit.
bool is_env_name(std::string_view s) noexcept;

// Levenshtein distance, for "did you mean" of a misspelt key.
std::size_t edit_distance(std::string_view a, std::string_view b);

// Whether a backend is the warden listening on `listen` (which would send
// every request back to itself): the same address, or a loopback one on its
// port when it listens on every address. Port 0 (the OS picks) is never.
bool is_own_address(const ListenAddress& listen, const BackendConfig& backend);
// Whether two backends are one server: the same port and path, and hosts
// that differ at most in case or as localhost and 127.0.0.1.
bool same_server(const BackendConfig& a, const BackendConfig& b);
// "forwarded routes (/v1/chat/completions, …)", for messages.
std::string forwarded_route_list();

}  // namespace lmwarden::config
