// The YAML configuration: every key, the defaults, every validation message.
#include "config/config_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace lmwarden::config {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = SessionSource::Kind;

Config load_ok(std::string_view yaml) {
  auto result = load_config_string(yaml, "test.yaml");
  EXPECT_TRUE(result.has_value()) << (result ? "" : result.error().message());
  return result ? std::move(result).value() : Config{};
}

// The single error message the text produces (fails if not exactly one).
std::string error_of(std::string_view yaml) {
  auto result = load_config_string(yaml, "lmwarden.yaml");
  if (result) {
    ADD_FAILURE() << "expected an error for:\n" << yaml;
    return {};
  }
  EXPECT_EQ(result.error().errors.size(), 1u) << result.error().message();
  return result.error().errors.front().message();
}

// A valid model block to build invalid files around.
constexpr std::string_view kMinimal = R"(
models:
  - name: m
    backends:
      - url: http://127.0.0.1:8000
)";

// From the build (not __FILE__, which ccache may make relative).
std::filesystem::path repo_root() { return LMWARDEN_SOURCE_DIR; }

// ------------------------------------------------------------ valid files

TEST(ConfigLoader, MinimalFileTakesEveryDefault) {
  const Config config = load_ok(kMinimal);
  EXPECT_EQ(config.source_file, "test.yaml");
  EXPECT_EQ(config.listen_host, "127.0.0.1");
  EXPECT_EQ(config.listen_port, 8080);
  EXPECT_EQ(config.threads, 0);
  EXPECT_EQ(config.limits.max_header_bytes, 64u * 1024);
  EXPECT_EQ(config.limits.max_body_bytes, 32u * 1024 * 1024);
  EXPECT_EQ(config.limits.max_connections, 4096u);
  EXPECT_EQ(config.timeouts.connect, 5s);
  EXPECT_EQ(config.timeouts.first_byte, 10min);
  EXPECT_EQ(config.timeouts.idle, 2min);
  EXPECT_EQ(config.timeouts.client_read, 60s);
  EXPECT_EQ(config.timeouts.client_idle, 5min);
  EXPECT_EQ(config.timeouts.shutdown_grace, 30s);
  EXPECT_EQ(config.retries, 1);
  EXPECT_EQ(config.admin_token_env, "LMWARDEN_ADMIN_TOKEN");
  EXPECT_EQ(config.admin_token, std::nullopt);
  EXPECT_EQ(config.scrape_interval, 1s);
  EXPECT_EQ(config.unhealthy_after, 3);

  ASSERT_EQ(config.models.size(), 1u);
  const ModelConfig& model = config.models[0];
  EXPECT_EQ(model.name, "m");
  EXPECT_TRUE(model.aliases.empty());
  EXPECT_TRUE(model.affinity);
  EXPECT_EQ(model.spill_threshold, std::nullopt);
  EXPECT_EQ(model.effective_spill_threshold(), kAutoSpillThreshold);
  EXPECT_EQ(model.session_ttl, 30min);
  EXPECT_EQ(model.max_conversations, 1'000'000u);
  EXPECT_EQ(model.session_sources, default_session_sources());
  EXPECT_TRUE(model.honor_client_rank);
  EXPECT_EQ(model.weights.in_flight, 1.0);
  EXPECT_EQ(model.weights.kv_used, 2.0);
  EXPECT_EQ(model.weights.live_conversations, 0.25);
  EXPECT_FALSE(model.inject_stream_usage);
  EXPECT_TRUE(model.api_keys_env.empty());
  ASSERT_EQ(model.backends.size(), 1u);
  EXPECT_EQ(model.backends[0].url, "http://127.0.0.1:8000");
  EXPECT_EQ(model.backends[0].host, "127.0.0.1");
  EXPECT_EQ(model.backends[0].port, 8000);
  EXPECT_EQ(model.backends[0].base_path, "");
  EXPECT_EQ(model.backends[0].data_parallel_size, 1);
  EXPECT_EQ(model.backends[0].api_key_env, std::nullopt);
}

TEST(ConfigLoader, FullFileSetsEveryKey) {
  const Config config = load_ok(R"(
listen: "[::1]:9090"
threads: 6
limits: {max_header_bytes: 128KiB, max_body_bytes: 64MiB, max_connections: 100}
timeouts: {connect: 500ms, first_byte: 15m, idle: 90s, client_read: 1m30s, client_idle: 10m, shutdown_grace: 0s}
retries: 2
admin_token: s3cret
scrape_interval: 250ms
unhealthy_after: 5
models:
  - name: qwen3-4b
    aliases: [qwen3, q4b]
    affinity: false
    spill_threshold: 12
    session_ttl: 1h
    max_conversations: 5000
    session_sources: [claude-user-id, "header:X-Session-Id", "body:metadata.conversation.id"]
    honor_client_rank: false
    weights: {in_flight: 2, kv_used: 0.5, live_conversations: 0}
    inject_stream_usage: true
    api_keys_env: [CLIENT_KEY_A, CLIENT_KEY_B]
    backends:
      - url: http://gpu-box.internal:8001/vllm/
        data_parallel_size: 2
        api_key_env: VLLM_KEY
      - url: http://[fd00::5]:8002
  - name: other
    backends:
      - url: http://10.0.0.7
)");
  EXPECT_EQ(config.listen_host, "::1");
  EXPECT_EQ(config.listen_port, 9090);
  EXPECT_EQ(config.threads, 6);
  EXPECT_EQ(config.limits.max_header_bytes, 128u * 1024);
  EXPECT_EQ(config.limits.max_body_bytes, 64u * 1024 * 1024);
  EXPECT_EQ(config.limits.max_connections, 100u);
  EXPECT_EQ(config.timeouts.connect, 500ms);
  EXPECT_EQ(config.timeouts.first_byte, 15min);
  EXPECT_EQ(config.timeouts.idle, 90s);
  EXPECT_EQ(config.timeouts.client_read, 90s);
  EXPECT_EQ(config.timeouts.client_idle, 10min);
  EXPECT_EQ(config.timeouts.shutdown_grace, 0s);
  EXPECT_EQ(config.retries, 2);
  EXPECT_EQ(config.admin_token, "s3cret");
  EXPECT_EQ(config.scrape_interval, 250ms);
  EXPECT_EQ(config.unhealthy_after, 5);

  ASSERT_EQ(config.models.size(), 2u);
  const ModelConfig& model = config.models[0];
  EXPECT_EQ(model.name, "qwen3-4b");
  EXPECT_THAT(model.aliases, ElementsAre("qwen3", "q4b"));
  EXPECT_FALSE(model.affinity);
  EXPECT_EQ(model.spill_threshold, 12);
  EXPECT_EQ(model.effective_spill_threshold(), 12);
  EXPECT_EQ(model.session_ttl, 1h);
  EXPECT_EQ(model.max_conversations, 5000u);
  EXPECT_THAT(model.session_sources,
              ElementsAre(SessionSource{Kind::kClaudeUserId, "metadata.user_id"},
                          SessionSource{Kind::kHeader, "x-session-id"},
                          SessionSource{Kind::kBody, "metadata.conversation.id"}));
  EXPECT_FALSE(model.honor_client_rank);
  EXPECT_EQ(model.weights.in_flight, 2.0);
  EXPECT_EQ(model.weights.kv_used, 0.5);
  EXPECT_EQ(model.weights.live_conversations, 0.0);
  EXPECT_TRUE(model.inject_stream_usage);
  EXPECT_THAT(model.api_keys_env, ElementsAre("CLIENT_KEY_A", "CLIENT_KEY_B"));
  ASSERT_EQ(model.backends.size(), 2u);
  EXPECT_EQ(model.backends[0].host, "gpu-box.internal");
  EXPECT_EQ(model.backends[0].port, 8001);
  EXPECT_EQ(model.backends[0].base_path, "/vllm");
  EXPECT_EQ(model.backends[0].data_parallel_size, 2);
  EXPECT_EQ(model.backends[0].api_key_env, "VLLM_KEY");
  EXPECT_EQ(model.backends[1].host, "fd00::5");
  EXPECT_EQ(model.backends[1].port, 8002);
  EXPECT_EQ(model.replica_count(), 3);

  EXPECT_EQ(config.models[1].backends[0].port, 80);
  EXPECT_EQ(config.find_model("q4b"), &config.models[0]);
  EXPECT_EQ(config.find_model("other"), &config.models[1]);
}

TEST(ConfigLoader, ExampleFileInDocsLoads) {
  const auto path = repo_root() / "docs" / "lmwarden.example.yaml";
  auto result = load_config_file(path.string());
  ASSERT_TRUE(result.has_value()) << result.error().message();
  const Config& config = *result;
  ASSERT_EQ(config.models.size(), 1u);
  const ModelConfig& model = config.models[0];
  EXPECT_EQ(model.name, "qwen3-4b");
  EXPECT_TRUE(model.affinity);
  EXPECT_EQ(model.effective_spill_threshold(), 8);
  ASSERT_EQ(model.backends.size(), 1u);
  EXPECT_EQ(model.backends[0].url, "http://127.0.0.1:8000");
  EXPECT_EQ(model.backends[0].data_parallel_size, 4);
  EXPECT_EQ(model.replica_count(), 4);
  // The example spells out the defaults; it must not drift from them.
  EXPECT_EQ(model.session_sources, default_session_sources());
  const Config defaults = load_ok(kMinimal);
  EXPECT_EQ(config.listen_host, defaults.listen_host);
  EXPECT_EQ(config.listen_port, defaults.listen_port);
  EXPECT_EQ(config.limits.max_header_bytes, defaults.limits.max_header_bytes);
  EXPECT_EQ(config.limits.max_body_bytes, defaults.limits.max_body_bytes);
  EXPECT_EQ(config.timeouts.first_byte, defaults.timeouts.first_byte);
  EXPECT_EQ(config.timeouts.idle, defaults.timeouts.idle);
  EXPECT_EQ(model.session_ttl, defaults.models[0].session_ttl);
  EXPECT_EQ(model.weights.kv_used, defaults.models[0].weights.kv_used);
}

TEST(ConfigLoader, NullValuesMeanDefault) {
  const Config config = load_ok(R"(
listen:
limits:
models:
  - name: m
    aliases:
    spill_threshold: ~
    backends:
      - url: http://127.0.0.1:8000
        data_parallel_size:
)");
  EXPECT_EQ(config.listen_port, 8080);
  EXPECT_EQ(config.models[0].spill_threshold, std::nullopt);
  EXPECT_EQ(config.models[0].backends[0].data_parallel_size, 1);
}

// ------------------------------------------------------------- topologies

TEST(ConfigTopology, OneServerWithDataParallelRanks) {
  const Config config = load_ok(R"(
models:
  - name: qwen3-4b-dp4
    backends: [{url: "http://127.0.0.1:8000", data_parallel_size: 4}]
)");
  EXPECT_EQ(config.models[0].backends.size(), 1u);
  EXPECT_EQ(config.models[0].replica_count(), 4);
}

TEST(ConfigTopology, SeveralSingleReplicaServers) {
  const Config config = load_ok(R"(
models:
  - name: qwen3-4b
    backends:
      - url: http://127.0.0.1:8001
      - url: http://127.0.0.1:8002
      - url: http://127.0.0.1:8003
      - url: http://127.0.0.1:8004
      - url: http://127.0.0.1:8005
      - url: http://127.0.0.1:8006
      - url: http://127.0.0.1:8007
)");
  EXPECT_EQ(config.models[0].backends.size(), 7u);
  EXPECT_EQ(config.models[0].replica_count(), 7);
  EXPECT_EQ(config.models[0].backends[6].port, 8007);
}

TEST(ConfigTopology, SeveralServersEachWithRanks) {
  const Config config = load_ok(R"(
models:
  - name: qwen3-4b
    backends:
      - {url: "http://10.0.0.1:8000", data_parallel_size: 2}
      - {url: "http://10.0.0.2:8000", data_parallel_size: 4}
)");
  EXPECT_EQ(config.models[0].replica_count(), 6);
}

// ---------------------------------------------------------- every error

TEST(ConfigErrors, MessageNamesFileLineKeyAndReason) {
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    spill_threshold: 0
    backends:
      - url: http://127.0.0.1:8000
)"),
      R"(lmwarden.yaml:3: models[0].spill_threshold: must be an integer >= 1 or "auto", got "0")");
}

TEST(ConfigErrors, SpillThresholdShapes) {
  for (const char* bad : {"-1", "1.5", "eight", "AUTO", "[8]"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(error_of(std::string("models: [{name: m, spill_threshold: ") + bad +
                         ", backends: [{url: 'http://h:1'}]}]"),
                HasSubstr("models[0].spill_threshold: must be an integer >= 1 or \"auto\""));
  }
}

TEST(ConfigLoader, AccessLogIsAnAbsolutePathOpenedForAppending) {
  EXPECT_EQ(load_ok(kMinimal).access_log, "");
  const auto dir = std::filesystem::temp_directory_path() / ("lmwarden-config-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "access.log").string();
  EXPECT_EQ(load_ok("access_log: " + path + "\n" + std::string(kMinimal)).access_log, path);
  EXPECT_TRUE(std::filesystem::exists(path)) << "created when missing, as it will be at start";
  std::filesystem::remove_all(dir);

  EXPECT_EQ(error_of("access_log: logs/access.log\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: access_log: must be an absolute path, got "logs/access.log")");
  EXPECT_EQ(error_of("access_log: /nonexistent-lmwarden-dir/access.log\n" + std::string(kMinimal)),
            "lmwarden.yaml:1: access_log: cannot open /nonexistent-lmwarden-dir/access.log for appending: "
            "No such file or directory");
  EXPECT_THAT(error_of("access_log: ''\n" + std::string(kMinimal)), HasSubstr("access_log: must be a non-empty string"));
}

TEST(ConfigErrors, UnknownKeysAnywhereWithASuggestion) {
  EXPECT_EQ(error_of("lisen: 127.0.0.1:1\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: lisen: unknown key (did you mean "listen"?))");
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    spil_threshold: 4
    backends: [{url: "http://h:1"}]
)"),
      R"(lmwarden.yaml:3: models[0].spil_threshold: unknown key (did you mean "spill_threshold"?))");
  EXPECT_THAT(error_of(R"(models:
  - name: m
    backends: [{url: "http://h:1", tls: true}]
)"),
              HasSubstr("lmwarden.yaml:3: models[0].backends[0].tls: unknown key (known here: url, "
                        "data_parallel_size, api_key_env)"));
  EXPECT_THAT(error_of("limits: {max_body: 1MiB}\n" + std::string(kMinimal)),
              HasSubstr("limits.max_body: unknown key (did you mean \"max_body_bytes\"?)"));
  EXPECT_THAT(error_of("timeouts: {read: 1s}\n" + std::string(kMinimal)),
              HasSubstr("timeouts.read: unknown key"));
  EXPECT_THAT(error_of(R"(models:
  - name: m
    weights: {in_flights: 1}
    backends: [{url: "http://h:1"}]
)"),
              HasSubstr("models[0].weights.in_flights: unknown key (did you mean \"in_flight\"?)"));
}

TEST(ConfigErrors, RepeatedKey) {
  EXPECT_EQ(error_of("retries: 1\nretries: 2\n" + std::string(kMinimal)),
            "lmwarden.yaml:2: retries: appears twice");
}

TEST(ConfigErrors, WrongTypes) {
  EXPECT_EQ(error_of("threads: many\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: threads: must be an integer from 0 to 1024, got "many")");
  EXPECT_EQ(error_of("limits: 5\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: limits: must be a mapping of keys, got "5")");
  EXPECT_EQ(error_of("retries: [1]\n" + std::string(kMinimal)),
            "lmwarden.yaml:1: retries: must be an integer from 0 to 16, got a list");
  EXPECT_EQ(error_of(R"(models:
  - name: m
    affinity: yes
    backends: [{url: "http://h:1"}]
)"),
            R"(lmwarden.yaml:3: models[0].affinity: must be true or false, got "yes")");
  EXPECT_EQ(error_of(R"(models:
  - name: m
    aliases: qwen
    backends: [{url: "http://h:1"}]
)"),
            R"(lmwarden.yaml:3: models[0].aliases: must be a list of non-empty names, got "qwen")");
  EXPECT_EQ(error_of(R"(models:
  - name: {a: 1}
    backends: [{url: "http://h:1"}]
)"),
            "lmwarden.yaml:2: models[0].name: must be a non-empty string, got a mapping");
  EXPECT_EQ(error_of(R"(models:
  - name: m
    weights: {kv_used: -1}
    backends: [{url: "http://h:1"}]
)"),
            R"(lmwarden.yaml:3: models[0].weights.kv_used: must be a number >= 0, got "-1")");
  EXPECT_EQ(error_of("models: {name: m}\n"),
            "lmwarden.yaml:1: models: must be a list of at least one model, got a mapping");
  EXPECT_EQ(error_of("- just a list\n"), "lmwarden.yaml:1: must be a mapping of keys, got a list");
}

TEST(ConfigErrors, DurationsAndSizes) {
  EXPECT_EQ(
      error_of("timeouts: {idle: 90}\n" + std::string(kMinimal)),
      R"(lmwarden.yaml:1: timeouts.idle: must be a duration like 500ms, 90s, 30m or 1h, got "90")");
  EXPECT_EQ(error_of("timeouts: {connect: 0s}\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: timeouts.connect: must be at least 1ms, got "0s")");
  EXPECT_EQ(error_of("scrape_interval: 10ms\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: scrape_interval: must be at least 100ms, got "10ms")");
  EXPECT_EQ(
      error_of("limits: {max_body_bytes: 32 MiBs}\n" + std::string(kMinimal)),
      R"(lmwarden.yaml:1: limits.max_body_bytes: must be a size like 65536, 64KiB or 32MiB, got "32 MiBs")");
  EXPECT_EQ(error_of("limits: {max_body_bytes: 2GiB}\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: limits.max_body_bytes: must be from 1KiB to 1GiB, got "2GiB")");
  EXPECT_EQ(error_of(R"(models:
  - name: m
    session_ttl: 500ms
    backends: [{url: "http://h:1"}]
)"),
            R"(lmwarden.yaml:3: models[0].session_ttl: must be at least 1000ms, got "500ms")");
}

TEST(ConfigErrors, DurationsHaveAMaximum) {
  // 2600000h fits in milliseconds but not in the steady clock's nanoseconds:
  // loaded, it overflowed and expired every conversation at once.
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    session_ttl: 2600000h
    backends: [{url: "http://h:1"}]
)"),
      R"(lmwarden.yaml:3: models[0].session_ttl: must be at most 87600h (3650 days), got "2600000h")");
  EXPECT_EQ(error_of("timeouts: {first_byte: 721h}\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: timeouts.first_byte: must be at most 720h (30 days), got "721h")");
  for (const std::string key : {"connect", "idle", "client_read", "client_idle", "shutdown_grace"}) {
    SCOPED_TRACE(key);
    EXPECT_THAT(error_of("timeouts: {" + key + ": 1000000h}\n" + std::string(kMinimal)),
                HasSubstr("timeouts." + key + ": must be at most 720h (30 days)"));
  }
  EXPECT_EQ(error_of("scrape_interval: 61m\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: scrape_interval: must be at most 1h, got "61m")");

  // The maxima themselves load.
  const Config config = load_ok(R"(
timeouts: {connect: 720h, first_byte: 720h, idle: 720h, client_read: 720h, shutdown_grace: 720h}
scrape_interval: 1h
models:
  - name: m
    session_ttl: 87600h
    backends: [{url: "http://h:1"}]
)");
  EXPECT_EQ(config.timeouts.first_byte, 720h);
  EXPECT_EQ(config.scrape_interval, 1h);
  EXPECT_EQ(config.models[0].session_ttl, 87600h);
}

TEST(ConfigErrors, AllWeightsZero) {
  // Every replica would score 0, so a busy home would never spill.
  EXPECT_EQ(error_of(R"(models:
  - name: m
    weights: {in_flight: 0, kv_used: 0.0, live_conversations: 0}
    backends: [{url: "http://h:1"}]
)"),
            "lmwarden.yaml:3: models[0].weights: must not all be 0: every replica would score 0 "
            "and a busy home would never spill");
  // One weight above 0 is enough, and a weight left out keeps its default.
  const Config config = load_ok(R"(
models:
  - name: a
    weights: {in_flight: 0, kv_used: 0, live_conversations: 0.001}
    backends: [{url: "http://h:1"}]
  - name: b
    weights: {in_flight: 0, kv_used: 0}
    backends: [{url: "http://h:1"}]
)");
  EXPECT_EQ(config.models[1].weights.live_conversations, 0.25);
}

TEST(ConfigErrors, ListenAddress) {
  EXPECT_EQ(error_of("listen: 8080\n" + std::string(kMinimal)),
            "lmwarden.yaml:1: listen: must be HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080, got "
            "\"8080\"");
  EXPECT_EQ(error_of("listen: example.com:80\n" + std::string(kMinimal)),
            "lmwarden.yaml:1: listen: the host must be an IPv4 address, [IPv6] or localhost, got "
            "\"example.com:80\"");
  EXPECT_THAT(error_of("listen: 127.0.0.1:70000\n" + std::string(kMinimal)),
              HasSubstr("listen: the port must be a number from 0 to 65535"));
}

TEST(ConfigErrors, BackendUrls) {
  auto backend_error = [](std::string_view url) {
    return error_of(std::string("models:\n  - name: m\n    backends:\n      - url: ") +
                    std::string(url) + "\n");
  };
  EXPECT_EQ(
      backend_error("https://127.0.0.1:8000"),
      "lmwarden.yaml:4: models[0].backends[0].url: https is not supported yet: reach vLLM over "
      "http on loopback or a private network, or put a TLS-terminating sidecar next to it, got "
      "\"https://127.0.0.1:8000\"");
  EXPECT_THAT(backend_error("127.0.0.1:8000"), HasSubstr("url: must be http://HOST:PORT[/PATH]"));
  EXPECT_THAT(backend_error("http://127.0.0.1:8000/v1?x=1"), HasSubstr("must not have a query"));
  EXPECT_THAT(backend_error("http://user:pw@127.0.0.1:8000"),
              HasSubstr("must not carry credentials"));
  EXPECT_THAT(backend_error("http://127.0.0.1:0"),
              HasSubstr("the port must be a number from 1 to 65535"));
  EXPECT_THAT(backend_error("'http://127.0.0.1:'"), HasSubstr("the port is empty"));
  EXPECT_THAT(backend_error("http://300.1.1.1:8000"), HasSubstr("not a valid IPv4 address"));
  EXPECT_THAT(backend_error("http://[::1:8000"), HasSubstr("missing ']'"));
  EXPECT_THAT(backend_error("http://:8000"), HasSubstr("the host is missing"));
}

TEST(ConfigErrors, ImpossibleBackends) {
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    backends:
      - url: http://127.0.0.1:8000
        data_parallel_size: 0
)"),
      R"(lmwarden.yaml:5: models[0].backends[0].data_parallel_size: must be an integer from 1 to 1024, got "0")");
  EXPECT_EQ(error_of(R"(models:
  - name: m
    backends:
      - url: http://127.0.0.1:8000
      - url: http://127.0.0.1:8000/
)"),
            "lmwarden.yaml:5: models[0].backends[1].url: the same server is listed twice; use "
            "data_parallel_size for its ranks");
  EXPECT_EQ(
      error_of("models:\n  - name: m\n    backends: []\n"),
      "lmwarden.yaml:3: models[0].backends: must be a list of at least one backend, got a list");
  EXPECT_EQ(error_of("models:\n  - name: m\n"),
            "lmwarden.yaml:2: models[0].backends: is required: list at least one backend");
  EXPECT_EQ(error_of("models:\n  - backends: [{url: 'http://h:1'}]\n"),
            "lmwarden.yaml:2: models[0].name: is required");
  EXPECT_EQ(error_of("models:\n  - name: m\n    backends: [{data_parallel_size: 2}]\n"),
            "lmwarden.yaml:3: models[0].backends[0].url: is required, e.g. http://127.0.0.1:8000");
}

TEST(ConfigErrors, NoModels) {
  EXPECT_EQ(error_of(""), "lmwarden.yaml:1: models: is required: the file is empty");
  EXPECT_EQ(error_of("listen: 127.0.0.1:1\n"),
            "lmwarden.yaml:1: models: is required: list at least one model");
  EXPECT_EQ(error_of("models: []\n"),
            "lmwarden.yaml:1: models: must be a list of at least one model, got a list");
}

TEST(ConfigErrors, DuplicateNamesAndAliases) {
  EXPECT_EQ(error_of(R"(models:
  - name: a
    backends: [{url: "http://h:1"}]
  - name: a
    backends: [{url: "http://h:2"}]
)"),
            R"(lmwarden.yaml:4: models[1].name: "a" is already the name or an alias of models[0])");
  EXPECT_EQ(
      error_of(R"(models:
  - name: a
    aliases: [b]
    backends: [{url: "http://h:1"}]
  - name: c
    aliases: [d, b]
    backends: [{url: "http://h:2"}]
)"),
      R"(lmwarden.yaml:6: models[1].aliases[1]: "b" is already the name or an alias of models[0])");
  EXPECT_EQ(error_of(R"(models:
  - name: a
    aliases: [x, x]
    backends: [{url: "http://h:1"}]
)"),
            R"(lmwarden.yaml:3: models[0].aliases[1]: "x" is listed twice)");
  EXPECT_EQ(
      error_of(R"(models:
  - name: a
    aliases: [a]
    backends: [{url: "http://h:1"}]
)"),
      R"(lmwarden.yaml:3: models[0].aliases[0]: "a" is already the name or an alias of models[0])");
}

TEST(ConfigErrors, SessionSources) {
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    session_sources: ["header:session-id", "cookie:sid"]
    backends: [{url: "http://h:1"}]
)"),
      R"(lmwarden.yaml:3: models[0].session_sources[1]: must be "header:NAME", "body:dotted.path" or "claude-user-id", got "cookie:sid")");
  EXPECT_THAT(error_of(R"(models:
  - name: m
    session_sources: ["body:a..b"]
    backends: [{url: "http://h:1"}]
)"),
              HasSubstr("(not a dotted path of keys), got \"body:a..b\""));
  EXPECT_THAT(error_of(R"(models:
  - name: m
    session_sources: ["header:bad name"]
    backends: [{url: "http://h:1"}]
)"),
              HasSubstr("(not a valid header name)"));
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    session_sources: ["header:Session-Id", "header:session-id"]
    backends: [{url: "http://h:1"}]
)"),
      R"(lmwarden.yaml:3: models[0].session_sources[1]: "header:session-id" is listed twice)");
}

TEST(ConfigErrors, EnvironmentNamesAndTokens) {
  EXPECT_THAT(error_of("admin_token_env: 1TOKEN\n" + std::string(kMinimal)),
              HasSubstr("admin_token_env: must be an environment variable name"));
  EXPECT_EQ(error_of("admin_token_env: T\nadmin_token: x\n" + std::string(kMinimal)),
            "lmwarden.yaml:2: admin_token: set admin_token or admin_token_env, not both");
  EXPECT_THAT(
      error_of(R"(models:
  - name: m
    api_keys_env: [GOOD, "not-good"]
    backends: [{url: "http://h:1"}]
)"),
      HasSubstr("lmwarden.yaml:3: models[0].api_keys_env[1]: must be environment variable names"));
}

TEST(ConfigErrors, InvalidYamlSyntax) {
  EXPECT_THAT(error_of("models: [\n  {name: m\n"), HasSubstr("lmwarden.yaml:"));
  EXPECT_THAT(error_of("models: [\n  {name: m\n"), HasSubstr("invalid YAML"));
}

TEST(ConfigErrors, AllProblemsAreReportedTogether) {
  auto result = load_config_string(R"(threads: -1
models:
  - name: m
    spill_threshold: 0
    backends:
      - url: https://h:1
)",
                                   "f.yaml");
  ASSERT_FALSE(result);
  const auto& errors = result.error().errors;
  ASSERT_EQ(errors.size(), 3u) << result.error().message();
  EXPECT_EQ(errors[0].line, 1);
  EXPECT_EQ(errors[0].key_path, "threads");
  EXPECT_EQ(errors[1].key_path, "models[0].spill_threshold");
  EXPECT_EQ(errors[2].key_path, "models[0].backends[0].url");
  const std::string message = result.error().message();
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 2);
}

TEST(ConfigErrors, MissingFile) {
  auto result = load_config_file("/nonexistent/lmwarden.yaml");
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message(),
            "/nonexistent/lmwarden.yaml: cannot open: No such file or directory");
}

// ------------------------------------------------------- helper parsers

TEST(ConfigParsers, ListenAddress) {
  EXPECT_EQ(*parse_listen_address("127.0.0.1:8080"), (ListenAddress{"127.0.0.1", 8080}));
  EXPECT_EQ(*parse_listen_address("0.0.0.0:80"), (ListenAddress{"0.0.0.0", 80}));
  EXPECT_EQ(*parse_listen_address("[::1]:8080"), (ListenAddress{"::1", 8080}));
  EXPECT_EQ(*parse_listen_address("[::]:1"), (ListenAddress{"::", 1}));
  EXPECT_EQ(*parse_listen_address("localhost:9000"), (ListenAddress{"127.0.0.1", 9000}));
  EXPECT_EQ(*parse_listen_address("LocalHost:0"), (ListenAddress{"127.0.0.1", 0}));
  for (const char* bad :
       {"", "8080", ":8080", "127.0.0.1", "127.0.0.1:", "127.0.0.1:x", "::1:8080", "[::1]",
        "[::1]8080", "[::g]:1", "256.0.0.1:1", "host:1", "1.2.3.4:65536"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(parse_listen_address(bad).has_value());
  }
}

TEST(ConfigParsers, Durations) {
  EXPECT_EQ(parse_duration("500ms"), 500ms);
  EXPECT_EQ(parse_duration("90s"), 90s);
  EXPECT_EQ(parse_duration("30m"), 30min);
  EXPECT_EQ(parse_duration("1h"), 1h);
  EXPECT_EQ(parse_duration("1h30m"), 90min);
  EXPECT_EQ(parse_duration(" 2m5s "), 125s);
  EXPECT_EQ(parse_duration("0s"), 0ms);
  for (const char* bad :
       {"", "90", "1.5s", "-1s", "1d", "s", "1 s", "1S", "99999999999999999999h"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(parse_duration(bad), std::nullopt);
  }
}

TEST(ConfigParsers, ByteSizes) {
  EXPECT_EQ(parse_byte_size("65536"), 65536u);
  EXPECT_EQ(parse_byte_size("64KiB"), 64u * 1024);
  EXPECT_EQ(parse_byte_size("32MiB"), 32u * 1024 * 1024);
  EXPECT_EQ(parse_byte_size("1GiB"), 1024u * 1024 * 1024);
  EXPECT_EQ(parse_byte_size("64 kib"), 64u * 1024);
  EXPECT_EQ(parse_byte_size("10MB"), 10'000'000u);
  EXPECT_EQ(parse_byte_size("512B"), 512u);
  for (const char* bad :
       {"", "KiB", "1.5MiB", "-1", "1 TiB", "99999999999999999999", "20000000000GiB"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(parse_byte_size(bad), std::nullopt);
  }
}

TEST(ConfigParsers, SessionSources) {
  EXPECT_EQ(*parse_session_source("claude-user-id"),
            (SessionSource{Kind::kClaudeUserId, "metadata.user_id"}));
  EXPECT_EQ(*parse_session_source("header:X-Session-Id"),
            (SessionSource{Kind::kHeader, "x-session-id"}));
  EXPECT_EQ(*parse_session_source("header:session_id"),
            (SessionSource{Kind::kHeader, "session_id"}));
  EXPECT_EQ(*parse_session_source("body:client_metadata.session_id"),
            (SessionSource{Kind::kBody, "client_metadata.session_id"}));
  for (const char* bad :
       {"", "header:", "body:", "body:.a", "body:a.", "header:a b", "query:x", "claude"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(parse_session_source(bad).has_value());
  }
  // The default order round-trips through its own spelling.
  for (const auto& source : default_session_sources())
    EXPECT_EQ(*parse_session_source(source.label()), source);
}

TEST(ConfigParsers, BackendUrls) {
  const auto plain = parse_backend_url("http://127.0.0.1:8000");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->host, "127.0.0.1");
  EXPECT_EQ(plain->port, 8000);
  EXPECT_EQ(plain->base_path, "");
  const auto with_path = parse_backend_url("HTTP://vllm_0.local/prefix/v1//");
  ASSERT_TRUE(with_path);
  EXPECT_EQ(with_path->host, "vllm_0.local");
  EXPECT_EQ(with_path->port, 80);
  EXPECT_EQ(with_path->base_path, "/prefix/v1");
  const auto v6 = parse_backend_url("http://[::1]/");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->base_path, "");
}

}  // namespace
}  // namespace lmwarden::config
