// parse_redis_url and describe (home_store.h).
//
// The URL is read as redis-cli -u reads it, except that the user info ends
// at the last '@' rather than the first, so that a password with an
// unescaped '@' (or '/') still parses. No error repeats the user info or
// anything a misplaced password could have landed in (port, database): a
// config error is printed and logged, and the password would go with it.
#include <cctype>
#include <charconv>
#include <climits>
#include <string>
#include <string_view>

#include "common/ascii.h"
#include "common/host_port.h"
#include "common/percent.h"
#include "homes/home_store.h"

namespace lmwarden::homes {
namespace {

constexpr std::string_view kScheme = "redis://";
constexpr std::string_view kTlsScheme = "rediss://";

// Digits only (no sign, no spaces) within [min, max]; std::from_chars alone
// would accept a leading '-' and stop at the first non-digit.
bool whole_number(std::string_view s, long long min, long long max, long long& out) {
  if (s.empty() || s.size() > 19) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size() && out >= min && out <= max;
}

// As RFC 3986 §3.1 spells one, and short: anything else before "://" may
// be user info, and is not repeated.
bool plausible_scheme(std::string_view scheme) {
  if (scheme.empty() || scheme.size() > 16 || !std::isalpha(static_cast<unsigned char>(scheme[0])))
    return false;
  for (char c : scheme) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.')
      return false;
  }
  return true;
}

// Letters, digits, '-', '.', '_' (a name or an IPv4 address); in brackets
// also ':' and '%' (an IPv6 address with its zone). Anything else is a query,
// a fragment or a typo that redis-cli would not read as part of the host.
bool plausible_host(std::string_view host, bool bracketed) {
  for (char c : host) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ||
                    c == '_' || (bracketed && (c == ':' || c == '%'));
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<RedisAddress, std::string> parse_redis_url(std::string_view url) {
  if (ascii_istarts_with(url, "unix://") || ascii_istarts_with(url, "redis+unix:"))
    return unexpected(std::string("Unix sockets are not supported; use redis://host:port"));
  RedisAddress address;
  address.tls = ascii_istarts_with(url, kTlsScheme);
  if (!address.tls && !ascii_istarts_with(url, kScheme)) {
    const std::string_view scheme = url.substr(0, url.find("://"));
    if (scheme.size() == url.size() || !plausible_scheme(scheme))
      return unexpected(std::string("expected redis://host[:port][/database] (rediss:// for TLS)"));
    return unexpected("expected redis://host[:port][/database] (rediss:// for TLS), not " +
                      std::string(scheme) + "://");
  }
  std::string_view rest = url.substr(address.tls ? kTlsScheme.size() : kScheme.size());

  if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    // As redis-cli: "user:password", ":password" (no user) or "password".
    const std::size_t colon = userinfo.find(':');
    if (colon != std::string_view::npos) {
      address.username = percent_decoded(userinfo.substr(0, colon));
      address.password = percent_decoded(userinfo.substr(colon + 1));
    } else {
      address.password = percent_decoded(userinfo);
    }
    // "user:" with no password: the password comes from password_env (the
    // configuration checks that it does).
  }

  // A query (redis-py's ?db=1) or a fragment is not read: said as such,
  // before it could be taken for part of the port.
  if (const std::size_t end = rest.find_first_of("/?#");
      end != std::string_view::npos && rest[end] != '/')
    return unexpected(std::string(
        "the redis URL has a ?query or #fragment, which the warden does not read: the database "
        "goes in the path (redis://HOST:6379/1)"));
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  const std::string_view path =
      slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);

  std::string_view port_text;
  bool has_port = false;
  if (authority.starts_with('[')) {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return unexpected(std::string("the redis URL's IPv6 address has no closing ']'"));
    address.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':')
        return unexpected(std::string("unexpected text after the redis URL's IPv6 address"));
      port_text = after.substr(1);
      has_port = true;
    }
  } else {
    const std::size_t colon = authority.find(':');
    address.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      has_port = true;
      if (port_text.find(':') != std::string_view::npos)
        return unexpected(std::string("an IPv6 address in a redis URL goes in brackets: [::1]"));
    }
  }
  if (address.host.empty()) return unexpected(std::string("the redis URL has no host"));
  if (!plausible_host(address.host, authority.starts_with('[')))
    return unexpected(std::string("the redis URL's host has a character no host name has"));
  if (has_port) {
    long long port = 0;
    if (!whole_number(port_text, 1, 65535, port))
      return unexpected(std::string("the redis URL's port must be a whole number from 1 to 65535"));
    address.port = static_cast<std::uint16_t>(port);
  }

  if (!path.empty()) {
    long long database = 0;
    if (!whole_number(path, 0, INT_MAX, database)) {
      return unexpected(std::string(
          "the redis URL's database, the part after the host and port, must be a whole number "
          "from 0 (redis://HOST:6379/3), and nothing may follow it (no ?query or #fragment)"));
    }
    address.database = static_cast<int>(database);
  }
  return address;
}

std::string describe(const RedisAddress& address) {
  return std::string(address.tls ? kTlsScheme : kScheme) + host_port(address.host, address.port) +
         '/' + std::to_string(address.database);
}

}  // namespace lmwarden::homes
