// The value parsers of the configuration (durations, byte sizes, listen
// addresses, backend URLs, session sources, environment variable names) and
// the checks of one value against another, shared with the command line.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <limits>
#include <vector>

#include "common/ascii.h"
#include "common/host_port.h"
#include "config/config_loader.h"

namespace lmwarden::config {

using namespace std::literals;

namespace {

std::string_view trim(std::string_view s) noexcept {
  constexpr std::string_view kSpace = " \t\r\n";
  const auto first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

template <typename Int>
std::optional<Int> parse_uint(std::string_view s) noexcept {
  if (s.empty() || !std::all_of(s.begin(), s.end(), is_digit)) return std::nullopt;
  Int value{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<std::uint16_t> parse_port(std::string_view s) noexcept {
  const auto port = parse_uint<std::uint32_t>(s);
  if (!port || *port > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(*port);
}

// RFC 9110 token characters: what an HTTP field name may contain.
bool is_header_name(std::string_view s) noexcept {
  constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) ||
           kSpecials.find(c) != std::string_view::npos;
  });
}

}  // namespace

// A name a certificate can carry: an IP address, or a DNS name of labels of
// 1 to 63 letters, digits and '-' (not first or last), not all digits (a
// mistyped address, such as 999.1.1.1).
bool is_certificate_name(const std::string& name) noexcept {
  if (is_ipv4(name) || is_ipv6(name)) return true;
  if (name.empty() || name.size() > 253) return false;
  bool all_numeric = true;
  for (std::size_t begin = 0; begin <= name.size();) {
    const std::size_t end = std::min(name.find('.', begin), name.size());
    const std::string_view label = std::string_view(name).substr(begin, end - begin);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return false;
    for (const char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
      all_numeric = all_numeric && is_digit(c);
    }
    begin = end + 1;
  }
  return !all_numeric;
}

// DNS names as found in container networks and /etc/hosts: letters, digits,
// '-', '_' and '.'.
bool is_hostname(std::string_view s) noexcept {
  return !s.empty() && s.size() <= 253 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' ||
           c == '_' || c == '.';
  });
}

std::optional<bool> parse_bool(std::string_view text) {
  const std::string lowered = ascii_lowercase(trim(text));
  if (lowered == "true") return true;
  if (lowered == "false") return false;
  return std::nullopt;
}

Result<ListenAddress, std::string> parse_listen_address(std::string_view text) {
  text = trim(text);
  std::string host;
  std::string_view port_text;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return unexpected("missing ']' after the IPv6 address"s);
    host = std::string(text.substr(1, close - 1));
    if (!is_ipv6(host)) return unexpected("not a valid IPv6 address inside [ ]"s);
    if (close + 1 >= text.size() || text[close + 1] != ':')
      return unexpected("must be HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080"s);
    port_text = text.substr(close + 2);
  } else {
    if (text.find("://") != std::string_view::npos)
      return unexpected("must be HOST:PORT without a scheme, e.g. 127.0.0.1:8080"s);
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos)
      return unexpected("must be HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080"s);
    host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      return unexpected("IPv6 addresses need brackets, e.g. [::1]:8080"s);
    if (ascii_lowercase(host) == "localhost") host = "127.0.0.1";
    if (host.empty())
      return unexpected("the host is missing; write 0.0.0.0:PORT to listen on all interfaces"s);
    if (!is_ipv4(host)) return unexpected("the host must be an IPv4 address, [IPv6] or localhost"s);
  }
  const auto port = parse_port(port_text);
  if (!port) return unexpected("the port must be a number from 0 to 65535"s);
  return ListenAddress{std::move(host), *port};
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max() / 1000;
  std::int64_t total_ms = 0;
  while (!text.empty()) {
    std::size_t digits = 0;
    while (digits < text.size() && is_digit(text[digits])) ++digits;
    const auto number = parse_uint<std::int64_t>(text.substr(0, digits));
    if (!number) return std::nullopt;
    text.remove_prefix(digits);
    std::size_t letters = 0;
    while (letters < text.size() && !is_digit(text[letters])) ++letters;
    const std::string_view unit = text.substr(0, letters);
    text.remove_prefix(letters);
    std::int64_t scale = 0;
    if (unit == "ms")
      scale = 1;
    else if (unit == "s")
      scale = 1000;
    else if (unit == "m")
      scale = 60'000;
    else if (unit == "h")
      scale = 3'600'000;
    else
      return std::nullopt;
    if (*number > kMax / scale || total_ms > kMax - *number * scale) return std::nullopt;
    total_ms += *number * scale;
  }
  return std::chrono::milliseconds{total_ms};
}

std::optional<std::uint64_t> parse_byte_size(std::string_view text) {
  text = trim(text);
  std::size_t digits = 0;
  while (digits < text.size() && is_digit(text[digits])) ++digits;
  const auto number = parse_uint<std::uint64_t>(text.substr(0, digits));
  if (!number) return std::nullopt;
  const std::string unit = ascii_lowercase(trim(text.substr(digits)));
  static constexpr std::pair<std::string_view, std::uint64_t> kUnits[] = {{"", 1},
                                                                          {"b", 1},
                                                                          {"kib", 1ull << 10},
                                                                          {"mib", 1ull << 20},
                                                                          {"gib", 1ull << 30},
                                                                          {"kb", 1000},
                                                                          {"mb", 1'000'000},
                                                                          {"gb", 1'000'000'000}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    if (*number > std::numeric_limits<std::uint64_t>::max() / scale) return std::nullopt;
    return *number * scale;
  }
  return std::nullopt;
}

Result<SessionSource, std::string> parse_session_source(std::string_view text) {
  using Kind = SessionSource::Kind;
  constexpr std::string_view kShapes =
      "must be \"header:NAME\", \"body:dotted.path\", \"claude-user-id\" or \"opening\"";
  text = trim(text);
  if (text == "claude-user-id") return SessionSource{Kind::kClaudeUserId, "metadata.user_id"};
  if (text == "opening") return SessionSource{Kind::kOpening, ""};
  if (text.starts_with("header:")) {
    const std::string_view name = trim(text.substr(7));  // "header: NAME" reads as well
    if (!is_header_name(name))
      return unexpected(fmt::format("{} (not a valid header name)", kShapes));
    // Header names match case-insensitively; lower case keeps labels uniform.
    return SessionSource{Kind::kHeader, ascii_lowercase(name)};
  }
  if (text.starts_with("body:")) {
    const std::string_view path = trim(text.substr(5));
    bool ok = !path.empty();
    std::size_t start = 0;
    while (ok) {
      const auto dot = path.find('.', start);
      const std::string_view segment =
          path.substr(start, dot == std::string_view::npos ? dot : dot - start);
      ok = !segment.empty() && std::none_of(segment.begin(), segment.end(), [](char c) {
        return c == ' ' || c == '\t' || c == '"';
      });
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
    if (!ok) return unexpected(fmt::format("{} (not a dotted path of keys)", kShapes));
    return SessionSource{Kind::kBody, std::string(path)};
  }
  // The two bare words are lower case, as written in the documentation.
  const std::string lowered = ascii_lowercase(text);
  for (const std::string_view word : {"claude-user-id", "opening"})
    if (lowered == word) return unexpected(fmt::format("{} (did you mean \"{}\"?)", kShapes, word));
  return unexpected(std::string(kShapes));
}

Result<BackendConfig, std::string> parse_backend_url(std::string_view url) {
  const std::string original(url);
  url = trim(url);
  const std::string scheme_lower =
      ascii_lowercase(url.substr(0, std::min<std::size_t>(url.size(), 8)));
  if (scheme_lower.starts_with("https://"))
    return unexpected(
        "https is not supported yet: reach vLLM over http on loopback or a private network, "
        "or put a TLS-terminating sidecar next to it"s);
  if (!scheme_lower.starts_with("http://"))
    return unexpected("must be http://HOST:PORT[/PATH], e.g. http://127.0.0.1:8000"s);
  url.remove_prefix(7);

  if (url.find_first_of("?#") != std::string_view::npos)
    return unexpected("must not have a query or fragment"s);
  const auto slash = url.find('/');
  const std::string_view authority = url.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : url.substr(slash);
  if (authority.find('@') != std::string_view::npos)
    return unexpected("must not carry credentials; name an environment variable in api_key_env"s);

  BackendConfig backend;
  backend.url = original;
  std::string_view port_text;
  if (authority.starts_with('[')) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return unexpected("missing ']' after the IPv6 address"s);
    backend.host = std::string(authority.substr(1, close - 1));
    if (!is_ipv6(backend.host)) return unexpected("not a valid IPv6 address inside [ ]"s);
    const std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return unexpected("unexpected text after ']'"s);
    if (!rest.empty()) port_text = rest.substr(1);
  } else {
    const auto colon = authority.find(':');
    backend.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
    if (!is_hostname(backend.host)) return unexpected("the host is missing or not a valid name"s);
    // getaddrinfo also reads the older forms inet_aton takes (0x7f.0.0.1,
    // 0177.0.0.1, 127.1) as IPv4 addresses: one such must be written as
    // the address it is, or the comparisons with the warden's own address
    // and with the other backends would not see it.
    if (in_addr v4{}; !is_ipv4(backend.host)) {
      if (::inet_aton(backend.host.c_str(), &v4) == 1) {
        char dotted[INET_ADDRSTRLEN] = {};
        ::inet_ntop(AF_INET, &v4, dotted, sizeof dotted);
        return unexpected(
            fmt::format("{} is read as the IPv4 address {}: write it so", backend.host, dotted));
      }
      if (std::ranges::all_of(backend.host, [](char c) { return is_digit(c) || c == '.'; }))
        return unexpected("not a valid IPv4 address"s);
    }
  }
  if (authority.find(':') != std::string_view::npos && !authority.starts_with('[') &&
      port_text.empty())
    return unexpected("the port is empty"s);
  if (!port_text.empty()) {
    const auto port = parse_port(port_text);
    if (!port || *port == 0) return unexpected("the port must be a number from 1 to 65535"s);
    backend.port = *port;
  }
  while (path.ends_with('/')) path.remove_suffix(1);
  if (path.find_first_of(" \t") != std::string_view::npos)
    return unexpected("the path must not contain spaces"s);
  // An OpenAI client's base URL, written out of habit: every request would
  // go to /v1/v1/… and the probes to /v1/health.
  if (ascii_lowercase(path).ends_with("/v1"))
    return unexpected(fmt::format(
        "ends in {}: the warden adds each request's own path (/v1/chat/completions, …) to the "
        "URL, as it does the probes' (/health, /metrics); give the server's root, e.g. "
        "http://{}",
        path.substr(path.size() - 3), authority));
  backend.base_path = std::string(path);
  backend.authority = host_port(backend.host, backend.port);
  return backend;
}

// "forwarded routes (/v1/chat/completions, …)", for messages.
std::string forwarded_route_list() {
  std::string out = "forwarded routes (";
  for (std::string_view route : kForwardedRoutes) {
    if (out.back() != '(') out += ", ";
    out += route;
  }
  return out + ")";
}

bool is_env_name(std::string_view s) noexcept {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (s.empty() || digit(s.front())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || digit(c) || c == '_';
  });
}

namespace {

// A host as the kernel would reach it, for comparisons: names are
// case-insensitive, localhost is the loopback address (as the listen
// address takes it), an IPv6 address is written one way whatever its
// zeros (::1 is 0:0:0:0:0:0:0:1), and one that maps an IPv4 address
// (::ffff:127.0.0.1) is that IPv4 address, which a socket on "::" or on it
// would take.
std::string reached_host(const std::string& host) {
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    char text[INET6_ADDRSTRLEN] = {};
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      in_addr v4{};
      std::memcpy(&v4, &v6.s6_addr[12], sizeof v4);
      ::inet_ntop(AF_INET, &v4, text, sizeof text);
    } else {
      ::inet_ntop(AF_INET6, &v6, text, sizeof text);
    }
    return text;
  }
  std::string lowered = ascii_lowercase(host);
  return lowered == "localhost" ? "127.0.0.1"s : lowered;
}

}  // namespace

bool same_server(const BackendConfig& a, const BackendConfig& b) {
  return a.port == b.port && a.base_path == b.base_path &&
         reached_host(a.host) == reached_host(b.host);
}

bool is_own_address(const ListenAddress& listen, const BackendConfig& backend) {
  if (listen.port == 0 || backend.port != listen.port) return false;
  const std::string host = reached_host(backend.host);
  const std::string listened = reached_host(listen.host);
  if (listened == "0.0.0.0" || listened == "::")
    return host.starts_with("127.") || host == "::1" || host == listened;
  return host == listened;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace lmwarden::config
