#include "homes/redis_link.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/host_port.h"

namespace lmwarden::homes {
namespace {

struct ContextFree {
  void operator()(SSL_CTX* ctx) const noexcept { SSL_CTX_free(ctx); }
};
using ContextPtr = std::unique_ptr<SSL_CTX, ContextFree>;

// OpenSSL's queued error, oldest first, as one line ("" when none).
std::string openssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out;
}

std::string tls_error(std::string_view what) {
  const std::string errors = openssl_errors();
  return "TLS: " + std::string(what) + (errors.empty() ? "" : ": " + errors);
}

// The context for one connection: Redis's certificate checked against the CA
// file (or the system's), the warden's own certificate when given.
Result<ContextPtr, std::string> make_context(const RedisTls& files) {
  ERR_clear_error();
  ContextPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return unexpected(tls_error("cannot create a context"));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (files.ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1)
      return unexpected(tls_error("cannot read the system's certificate authorities"));
  } else if (SSL_CTX_load_verify_locations(ctx.get(), files.ca_file.c_str(), nullptr) != 1) {
    return unexpected(tls_error("cannot read tls_ca_file " + files.ca_file));
  }
  if (!files.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), files.cert_file.c_str()) != 1)
      return unexpected(tls_error("cannot read tls_cert_file " + files.cert_file));
    if (SSL_CTX_use_PrivateKey_file(ctx.get(), files.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return unexpected(tls_error("cannot read tls_key_file " + files.key_file));
    if (SSL_CTX_check_private_key(ctx.get()) != 1)
      return unexpected(tls_error("tls_key_file does not match tls_cert_file"));
  }
  return ctx;
}

}  // namespace

RedisLink::RedisLink() = default;
RedisLink::~RedisLink() {
  close();
}

void RedisLink::SslFree::operator()(ssl_st* ssl) const noexcept {
  SSL_free(ssl);
}

void RedisLink::close() noexcept {
  ssl_.reset();
  reader_.reset();
  out_.clear();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<std::string> RedisLink::connect(const RedisAddress& address, const RedisTls& tls,
                                              std::chrono::milliseconds timeout) {
  close();
  timeout_ = timeout;
  timed_out_ = false;
  // Read before the clock starts: the system's authorities are a few
  // hundred certificates, and the timeout is for Redis.
  ContextPtr context;
  if (address.tls) {
    auto made = make_context(tls);
    if (!made) return std::move(made).error();
    context = std::move(*made);
  }
  const auto deadline = Clock::now() + timeout;
  if (auto error = open_socket(address, deadline)) return error;
  if (context) {
    if (auto error = start_tls(tls.server_name.empty() ? address.host : tls.server_name,
                               !tls.server_name.empty(), context.get(), deadline))
      return error;
  }
  reader_.reset(redisReaderCreate());
  if (!reader_) return fail("cannot allocate a connection");

  // (command, its name in an error): AUTH's arguments stay out of errors.
  std::vector<std::pair<std::vector<std::string>, std::string>> handshake;
  if (!address.password.empty()) {
    std::vector<std::string> auth{"AUTH"};
    if (!address.username.empty()) auth.push_back(address.username);
    auth.push_back(address.password);
    handshake.emplace_back(std::move(auth), "AUTH");
  }
  if (address.database != 0) {
    const std::string db = std::to_string(address.database);
    handshake.emplace_back(std::vector<std::string>{"SELECT", db}, "SELECT " + db);
  }
  // And a PING, answered before the connection counts: a Redis that accepts
  // connections but does not serve (stopped, or refusing this client without
  // a password) must not pass for one that answers.
  handshake.emplace_back(std::vector<std::string>{"PING"}, "PING");
  for (const auto& [args, _] : handshake) {
    if (auto error = append(args)) return fail(*error);
  }
  if (auto error = flush(deadline)) return error;
  for (const auto& [_, name] : handshake) {
    auto reply = next_reply(deadline);
    if (!reply) return std::move(reply).error();
    if ((*reply)->type == REDIS_REPLY_ERROR)
      return fail("redis refused " + name + ": " + std::string(reply_text(**reply)));
  }
  return std::nullopt;
}

std::optional<std::string> RedisLink::open_socket(const RedisAddress& address,
                                                  Clock::time_point deadline) {
  const std::string port = std::to_string(address.port);
  AddrInfoPtr addresses;
  // An address needs no lookup; a name is looked up on a thread of its own,
  // within the deadline. A lookup that outlives it is kept, and the next
  // connect waits for it (or takes its answer) rather than starting another.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found) == 0) {
    addresses.reset(found);
  } else {
    if (!lookup_ || lookup_->host() != address.host || lookup_->port() != port) {
      auto started = AddressLookup::start(address.host, port);
      if (!started) return fail(std::move(started).error());
      lookup_ = std::move(*started);
    }
    auto answer = lookup_->wait_until(deadline);
    if (!answer) return fail(kNoAnswerInTime);
    lookup_.reset();
    if (!*answer) return fail(std::move(*answer).error());
    addresses = std::move(**answer);
  }

  std::string error = "no address";
  for (const addrinfo* ai = addresses.get(); ai != nullptr; ai = ai->ai_next) {
    fd_ = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd_ < 0) {
      error = std::strerror(errno);
      continue;
    }
    if (::connect(fd_, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      error = std::strerror(errno);
      close();
      continue;
    }
    if (auto late = wait_ready(POLLOUT, deadline)) return late;  // closed by wait_ready
    int so_error = 0;
    socklen_t length = sizeof so_error;
    if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &so_error, &length) != 0) so_error = errno;
    if (so_error != 0) {
      error = std::strerror(so_error);
      close();
      continue;
    }
    const int on = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    return std::nullopt;
  }
  return fail(error);
}

namespace {

// The names a certificate carries (its subject alternative names), as
// "; it names a, b", or "" when it names none.
std::string names_carried(X509* peer) {
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(peer, NID_subject_alt_name, nullptr, nullptr));
  if (!names) return {};
  std::string out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    std::string one;
    if (n->type == GEN_DNS) {
      const auto* s = n->d.dNSName;
      one.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                 static_cast<std::size_t>(ASN1_STRING_length(s)));
    } else if (n->type == GEN_IPADD) {
      const auto* ip = n->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = {};
      const int family = ASN1_STRING_length(ip) == 4 ? AF_INET : AF_INET6;
      if (ASN1_STRING_length(ip) == 4 || ASN1_STRING_length(ip) == 16)
        if (inet_ntop(family, ASN1_STRING_get0_data(ip), text, sizeof text)) one = text;
    }
    if (one.empty()) continue;
    out += (out.empty() ? "; it names " : ", ") + one;
  }
  GENERAL_NAMES_free(names);
  return out;
}

// The verify callback: where Redis's own certificate fails the check, the
// names it carries go to the string the connection's app data points to
// (OpenSSL keeps no peer certificate from a handshake it refused).
int note_names(int ok, X509_STORE_CTX* store) {
  if (ok || X509_STORE_CTX_get_error_depth(store) != 0) return ok;
  auto* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto* out = ssl ? static_cast<std::string*>(SSL_get_app_data(ssl)) : nullptr;
  if (X509* leaf = X509_STORE_CTX_get_current_cert(store); out && leaf) *out = names_carried(leaf);
  return ok;
}

}  // namespace

std::optional<std::string> RedisLink::start_tls(const std::string& name, bool name_given,
                                                ssl_ctx_st* context, Clock::time_point deadline) {
  ssl_.reset(SSL_new(context));  // holds its own reference to the context
  if (!ssl_ || SSL_set_fd(ssl_.get(), fd_) != 1) return fail(tls_error("cannot start"));
  // The certificate must carry `name`: an address as an IP entry, a name as
  // a DNS one (and sent as SNI, for servers behind a proxy that routes by it).
  const bool by_ip = is_ipv4(name) || is_ipv6(name);
  const bool named =
      by_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_.get()), name.c_str()) == 1
            : SSL_set1_host(ssl_.get(), name.c_str()) == 1 &&
                  SSL_set_tlsext_host_name(ssl_.get(), name.c_str()) == 1;
  if (!named) return fail(tls_error("cannot check the certificate against " + name));
  std::string carried;  // what a certificate that does not name `name` names
  SSL_set_app_data(ssl_.get(), &carried);
  SSL_set_verify(ssl_.get(), SSL_VERIFY_PEER, note_names);
  // The error, and whether the connection goes with it.
  struct Failed {
    std::string error;
    bool drop = true;
  };
  const auto handshake = [&]() -> std::optional<Failed> {
    for (;;) {
      ERR_clear_error();
      const int rc = SSL_connect(ssl_.get());
      if (rc == 1) return std::nullopt;
      const int reason = SSL_get_error(ssl_.get(), rc);
      if (reason == SSL_ERROR_WANT_READ || reason == SSL_ERROR_WANT_WRITE) {
        // A plain Redis reads the ClientHello as a command and waits for more.
        if (auto late = wait_ready(reason == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline))
          return Failed{"TLS handshake: " + *late + " (is that port Redis's tls-port?)", false};
        continue;
      }
      const long verified = SSL_get_verify_result(ssl_.get());
      if (verified == X509_V_ERR_HOSTNAME_MISMATCH || verified == X509_V_ERR_IP_ADDRESS_MISMATCH)
        return Failed{std::string("TLS: Redis's certificate is not trusted: ") +
                      X509_verify_cert_error_string(verified) + ": it does not name " + name +
                      (name_given ? ", shared_homes.tls_server_name" : "") + carried +
                      (name_given ? ""
                                  : " (where the URL reaches Redis by another name or address, "
                                    "set shared_homes.tls_server_name to one the certificate "
                                    "carries)")};
      if (verified != X509_V_OK)
        return Failed{std::string("TLS: Redis's certificate is not trusted: ") +
                      X509_verify_cert_error_string(verified)};
      if (reason == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
        return Failed{errno != 0 ? std::string("TLS handshake: ") + std::strerror(errno)
                                 : std::string("TLS handshake: the connection was closed")};
      return Failed{tls_error("handshake failed")};
    }
  };
  auto failed = handshake();
  if (ssl_) SSL_set_app_data(ssl_.get(), nullptr);  // `carried` ends here (a timeout closed it)
  if (!failed) return std::nullopt;
  return failed->drop ? fail(std::move(failed->error)) : std::move(failed->error);
}

std::optional<std::string> RedisLink::append(int argc, const char** argv,
                                             const std::size_t* lengths) {
  char* command = nullptr;
  const int length = redisFormatCommandArgv(&command, argc, argv, lengths);
  if (length < 0) return std::string("out of memory");
  out_.append(command, static_cast<std::size_t>(length));
  redisFreeCommand(command);
  return std::nullopt;
}

std::optional<std::string> RedisLink::append(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  return append(static_cast<int>(argv.size()), argv.data(), lengths.data());
}

std::optional<std::string> RedisLink::flush(Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < out_.size()) {
    auto io = write_some(out_.data() + sent, out_.size() - sent);
    if (!io) return fail(std::move(io).error());
    sent += io->bytes;
    if (io->want != 0) {
      if (auto error = wait_ready(io->want, deadline)) return error;
    }
  }
  out_.clear();
  return std::nullopt;
}

Result<ReplyPtr, std::string> RedisLink::next_reply(Clock::time_point deadline) {
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK)
      return unexpected(fail(std::string("unreadable reply: ") + reader_->errstr));
    if (raw != nullptr) return ReplyPtr(static_cast<redisReply*>(raw));
    char buffer[16 * 1024];
    auto io = read_some(buffer, sizeof buffer);
    if (!io) return unexpected(fail(std::move(io).error()));
    if (io->bytes > 0) {
      if (redisReaderFeed(reader_.get(), buffer, io->bytes) != REDIS_OK)
        return unexpected(fail("out of memory"));
    } else if (auto error = wait_ready(io->want, deadline)) {
      return unexpected(std::move(*error));
    }
  }
}

Result<RedisLink::Io, std::string> RedisLink::write_some(const char* data, std::size_t size) {
  if (ssl_) {
    ERR_clear_error();
    const int n =
        SSL_write(ssl_.get(), data, static_cast<int>(std::min<std::size_t>(size, 1 << 20)));
    if (n > 0) return Io{.bytes = static_cast<std::size_t>(n)};
    const int reason = SSL_get_error(ssl_.get(), n);
    if (reason == SSL_ERROR_WANT_WRITE) return Io{.want = POLLOUT};
    if (reason == SSL_ERROR_WANT_READ) return Io{.want = POLLIN};
    return unexpected(reason == SSL_ERROR_SYSCALL && errno != 0 ? std::string(std::strerror(errno))
                                                                : tls_error("write failed"));
  }
  for (;;) {
    const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL);
    if (n > 0) return Io{.bytes = static_cast<std::size_t>(n)};
    if (n == 0) return Io{.want = POLLOUT};
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io{.want = POLLOUT};
    if (errno != EINTR) return unexpected(std::string(std::strerror(errno)));
  }
}

Result<RedisLink::Io, std::string> RedisLink::read_some(char* data, std::size_t size) {
  static const std::string closed = "Server closed the connection";
  if (ssl_) {
    ERR_clear_error();
    const int n = SSL_read(ssl_.get(), data, static_cast<int>(size));
    if (n > 0) return Io{.bytes = static_cast<std::size_t>(n)};
    const int reason = SSL_get_error(ssl_.get(), n);
    if (reason == SSL_ERROR_WANT_READ) return Io{.want = POLLIN};
    if (reason == SSL_ERROR_WANT_WRITE) return Io{.want = POLLOUT};
    if (reason == SSL_ERROR_ZERO_RETURN) return unexpected(closed);
    if (reason == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
      return unexpected(errno != 0 ? std::string(std::strerror(errno)) : closed);
    return unexpected(tls_error("read failed"));
  }
  for (;;) {
    const ssize_t n = ::recv(fd_, data, size, 0);
    if (n > 0) return Io{.bytes = static_cast<std::size_t>(n)};
    if (n == 0) return unexpected(closed);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io{.want = POLLIN};
    if (errno != EINTR) return unexpected(std::string(std::strerror(errno)));
  }
}

std::string RedisLink::fail(std::string error) {
  close();
  return error;
}

std::string RedisLink::timeout_error() {
  timed_out_ = true;
  return "no answer within " + std::to_string(timeout_.count()) + " ms";
}

std::optional<std::string> RedisLink::wait_ready(short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return fail(timeout_error());
    pollfd p{.fd = fd_, .events = events, .revents = 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    // Ready, or an error or hang-up that the read or write then reports.
    if (n > 0) return std::nullopt;
    if (n < 0 && errno != EINTR) return fail(std::string("poll: ") + std::strerror(errno));
  }
}

bool RedisLink::closed_while_idle() noexcept {
  if (fd_ < 0) return false;
  pollfd p{.fd = fd_, .events = POLLIN | POLLRDHUP, .revents = 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (!ssl_ || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return true;
  // A TLS record with no data for the application (a TLS 1.3 session
  // ticket, sent after the handshake) is read, and leaves nothing readable.
  ERR_clear_error();
  char byte = 0;
  const int n = SSL_read(ssl_.get(), &byte, 1);
  return n > 0 || SSL_get_error(ssl_.get(), n) != SSL_ERROR_WANT_READ;
}

}  // namespace lmwarden::homes
