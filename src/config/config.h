// The warden's configuration, as validated values. Loading and validation live
// in config_loader.h; everything else reads these structs and never re-checks.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lmwarden::config {

using Seconds = std::chrono::seconds;
using Millis = std::chrono::milliseconds;

// Spill threshold used when a model says `spill_threshold: auto`.
inline constexpr int kAutoSpillThreshold = 8;
// The largest spill threshold, in the file and at run time: a home with a
// million requests in flight is past any engine's batch.
inline constexpr int kMaxSpillThreshold = 1'000'000;

// The paths the warden forwards to a replica; everything else it answers itself.
inline constexpr std::array<std::string_view, 8> kForwardedRoutes = {
    "/v1/chat/completions",      "/v1/completions", "/v1/responses", "/v1/messages",
    "/v1/messages/count_tokens", "/v1/embeddings",  "/tokenize",     "/detokenize"};

// Routes on which vLLM's multi-rank servers do not read X-data-parallel-rank
// (its /v1/responses passes no rank to the engine): the default of
// `unranked_routes`.
std::vector<std::string> default_unranked_routes();

// Where a conversation id can come from (DESIGN §4). Header sources match the
// header name case-insensitively; body sources name a dotted JSON path.
struct SessionSource {
  enum class Kind {
    kHeader,        // a request header, value used as is
    kBody,          // a JSON string at a dotted path in the body
    kClaudeUserId,  // body metadata.user_id, decoded as Claude Code writes it
    kOpening,       // the conversation's opening: what the client sent before the first reply
  };
  Kind kind = Kind::kHeader;
  std::string name;  // header name, or dotted body path

  // The spelling used in config files and logs: "header:session-id",
  // "body:prompt_cache_key", "claude-user-id", "opening".
  std::string label() const;
  bool operator==(const SessionSource&) const = default;
};

// The default, ordered list of DESIGN §4 (items 2–6).
std::vector<SessionSource> default_session_sources();

// One upstream server: a vLLM OpenAI-compatible server (or the simulator).
struct BackendConfig {
  std::string url;   // as written, e.g. http://127.0.0.1:8000
  std::string host;  // parsed from url
  std::uint16_t port = 80;
  // host:port as a Host header writes it ("[::1]:8000" for IPv6); also the
  // key of the upstream connection pool.
  std::string authority;
  std::string base_path;  // path prefix from url, "" when none (no trailing '/')
  int data_parallel_size = 1;
  // Name of an environment variable with an API key to send upstream as
  // `Authorization: Bearer …` instead of the client's own credentials.
  std::optional<std::string> api_key_env;
  std::string api_key;  // its value, read when the configuration was loaded
};

// Weights of the "least loaded" score (see core/load_score.h):
//   score = in_flight_weight * in_flight
//         + kv_weight        * kv_used            (0..1, 0 while unknown)
//         + conversation_weight * live_conversations
struct LoadWeights {
  double in_flight = 1.0;
  double kv_used = 2.0;
  double live_conversations = 0.25;
};

struct ModelConfig {
  std::string name;
  std::vector<std::string> aliases;
  bool affinity = true;
  std::optional<int> spill_threshold;  // nullopt = auto
  Seconds session_ttl{30 * 60};
  // A conversation counts in its replica's load (weights.live_conversations)
  // while its last request is at most this old (and it is live).
  Seconds active_window{5 * 60};
  std::size_t max_conversations = 1'000'000;  // session table bound (LRU beyond)
  std::vector<BackendConfig> backends;
  std::vector<SessionSource> session_sources = default_session_sources();
  bool honor_client_rank = true;  // X-data-parallel-rank from the client pins
  LoadWeights weights;
  bool inject_stream_usage = false;
  std::vector<std::string> api_keys_env;  // env vars holding client API keys; empty = open
  // Requests on these paths reach a multi-rank server without a rank: its
  // own balancer picks (see core::RankPinning).
  std::vector<std::string> unranked_routes = default_unranked_routes();

  int replica_count() const;
  int effective_spill_threshold() const { return spill_threshold.value_or(kAutoSpillThreshold); }
  // "m" or "m (also m2, m3)", as logs and --check name a model.
  std::string names() const;
};

// A spill threshold as the file writes it: the number, or "auto".
std::string spill_threshold_text(std::optional<int> threshold);

// Why no header can carry `token`, "" when one can: a client's header loses
// white space at its ends (RFC 9110 §5.5), and a line break or other
// control character ends it or is refused (§5.5 again), so a token that
// begins or ends with one (a value from a file saved with CRLF line ends),
// or holds one, never could be sent.
std::string_view unsendable_token(std::string_view token) noexcept;

struct Limits {
  std::size_t max_header_bytes = 64 * 1024;
  std::size_t max_body_bytes = 32 * 1024 * 1024;
  std::size_t max_connections = 4096;
};

struct Timeouts {
  Millis connect{5'000};
  Millis first_byte{600'000};  // prefill queues on a busy box can take minutes
  Millis idle{120'000};        // between two chunks of a streamed reply
  Millis client_read{60'000};  // whole request (headers + body) from the client
  Millis client_idle{300'000};  // a kept-alive client connection's wait for its next request
  Millis shutdown_grace{30'000};
};

// Conversation homes shared with other wardens through Redis (DESIGN §10;
// proxy/shared_homes.h). Absent: this warden's table alone.
struct SharedHomes {
  std::string redis;  // redis://[[username]:password@]host[:port][/database], checked at load
  std::optional<std::string> password_env;  // the variable holding Redis's password
  std::string password;                     // its value, read when the configuration was loaded
  std::string key_prefix = "lmwarden:";
  Millis timeout{50};  // a lookup's wait, and the connect's; past it the warden places alone
  // With a rediss:// URL: PEM files, absolute paths readable at load; ""
  // when unset (the system's authorities; no certificate of the warden's).
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // The name Redis's certificate must carry, "" for the URL's host.
  std::string tls_server_name;

  bool operator==(const SharedHomes&) const = default;
};

// Conversation homes written to a file while serving and at shutdown, and
// read back at the next start (proxy/home_saver.h). Absent: a restart
// forgets them (those shared through Redis excepted).
struct SavedHomesFile {
  std::string path;         // absolute; its directory writable, checked at load
  Millis interval{60'000};  // between two writes while serving

  bool operator==(const SavedHomesFile&) const = default;
};

struct Config {
  std::string source_file;  // where it was loaded from, for messages
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 8080;
  int threads = 0;  // 0 = one per core
  Limits limits;
  Timeouts timeouts;
  int retries = 1;  // other replicas tried before any byte reached the client
  std::string admin_token_env = "LMWARDEN_ADMIN_TOKEN";
  std::optional<std::string> admin_token;  // literal token (prefer the env var)
  Millis scrape_interval{1'000};
  int unhealthy_after = 3;  // consecutive failed probes
  int eject_after_5xx = 5;  // 5xx replies in a row that eject a replica; 0: never
  Millis eject_for{30'000};
  std::string access_log;   // absolute path of the JSON-lines access log; empty: none
  std::optional<SharedHomes> shared_homes;
  std::optional<SavedHomesFile> saved_homes;
  std::vector<ModelConfig> models;

  const ModelConfig* find_model(std::string_view name_or_alias) const;
};

}  // namespace lmwarden::config
