// The YAML configuration: every key, its default, the topologies, the value
// parsers. Every validation message: config_errors_test.cpp.
#include "config/config_loader.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "config_test_util.h"

namespace lmwarden::config {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = SessionSource::Kind;

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
  EXPECT_EQ(config.eject_after_5xx, 5);
  EXPECT_EQ(config.eject_for, 30s);

  ASSERT_EQ(config.models.size(), 1u);
  const ModelConfig& model = config.models[0];
  EXPECT_EQ(model.name, "m");
  EXPECT_TRUE(model.aliases.empty());
  EXPECT_TRUE(model.affinity);
  EXPECT_EQ(model.spill_threshold, std::nullopt);
  EXPECT_EQ(model.effective_spill_threshold(), kAutoSpillThreshold);
  EXPECT_EQ(model.session_ttl, 30min);
  EXPECT_EQ(model.active_window, 5min);
  EXPECT_EQ(model.max_conversations, 1'000'000u);
  EXPECT_EQ(model.session_sources, default_session_sources());
  EXPECT_TRUE(model.honor_client_rank);
  EXPECT_EQ(model.weights.in_flight, 1.0);
  EXPECT_EQ(model.weights.kv_used, 2.0);
  EXPECT_EQ(model.weights.live_conversations, 0.25);
  EXPECT_FALSE(model.inject_stream_usage);
  EXPECT_TRUE(model.api_keys_env.empty());
  EXPECT_EQ(model.unranked_routes, std::vector<std::string>{"/v1/responses"});
  ASSERT_EQ(model.backends.size(), 1u);
  EXPECT_EQ(model.backends[0].url, "http://127.0.0.1:8000");
  EXPECT_EQ(model.backends[0].host, "127.0.0.1");
  EXPECT_EQ(model.backends[0].port, 8000);
  EXPECT_EQ(model.backends[0].base_path, "");
  EXPECT_EQ(model.backends[0].data_parallel_size, 1);
  EXPECT_EQ(model.backends[0].api_key_env, std::nullopt);
}

TEST(ConfigLoader, FullFileSetsEveryKey) {
  ::setenv("CLIENT_KEY_A", "a", 1);
  ::setenv("CLIENT_KEY_B", "b", 1);
  ::setenv("VLLM_KEY", "sk-vllm", 1);
  const Config config = load_ok(R"(
listen: "[::1]:9090"
threads: 6
limits: {max_header_bytes: 128KiB, max_body_bytes: 64MiB, max_connections: 100}
timeouts: {connect: 500ms, first_byte: 15m, idle: 90s, client_read: 1m30s, client_idle: 10m, shutdown_grace: 0s}
retries: 2
admin_token: s3cret
scrape_interval: 250ms
unhealthy_after: 5
eject_after_5xx: 0
eject_for: 2m
models:
  - name: qwen3-4b
    aliases: [qwen3, q4b]
    affinity: false
    spill_threshold: 12
    session_ttl: 1h
    active_window: 90s
    max_conversations: 5000
    session_sources: [claude-user-id, "header:X-Session-Id", "body:metadata.conversation.id", opening]
    honor_client_rank: false
    weights: {in_flight: 2, kv_used: 0.5, live_conversations: 0}
    inject_stream_usage: true
    api_keys_env: [CLIENT_KEY_A, CLIENT_KEY_B]
    unranked_routes: [/v1/responses, /v1/embeddings]
    backends:
      - url: http://gpu-box.internal:8001/vllm/
        data_parallel_size: 2
        api_key_env: VLLM_KEY
      - url: http://[fd00::5]:8002
  - name: other
    unranked_routes: []
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
  EXPECT_EQ(config.eject_after_5xx, 0);
  EXPECT_EQ(config.eject_for, 2min);

  ASSERT_EQ(config.models.size(), 2u);
  const ModelConfig& model = config.models[0];
  EXPECT_EQ(model.name, "qwen3-4b");
  EXPECT_THAT(model.aliases, ElementsAre("qwen3", "q4b"));
  EXPECT_FALSE(model.affinity);
  EXPECT_EQ(model.spill_threshold, 12);
  EXPECT_EQ(model.effective_spill_threshold(), 12);
  EXPECT_EQ(model.session_ttl, 1h);
  EXPECT_EQ(model.active_window, 90s);
  EXPECT_EQ(model.max_conversations, 5000u);
  EXPECT_THAT(model.session_sources,
              ElementsAre(SessionSource{Kind::kClaudeUserId, "metadata.user_id"},
                          SessionSource{Kind::kHeader, "x-session-id"},
                          SessionSource{Kind::kBody, "metadata.conversation.id"},
                          SessionSource{Kind::kOpening, ""}));
  EXPECT_FALSE(model.honor_client_rank);
  EXPECT_EQ(model.weights.in_flight, 2.0);
  EXPECT_EQ(model.weights.kv_used, 0.5);
  EXPECT_EQ(model.weights.live_conversations, 0.0);
  EXPECT_TRUE(model.inject_stream_usage);
  EXPECT_THAT(model.api_keys_env, ElementsAre("CLIENT_KEY_A", "CLIENT_KEY_B"));
  EXPECT_THAT(model.unranked_routes, ElementsAre("/v1/responses", "/v1/embeddings"));
  EXPECT_TRUE(config.models[1].unranked_routes.empty());
  ASSERT_EQ(model.backends.size(), 2u);
  EXPECT_EQ(model.backends[0].host, "gpu-box.internal");
  EXPECT_EQ(model.backends[0].port, 8001);
  EXPECT_EQ(model.backends[0].base_path, "/vllm");
  EXPECT_EQ(model.backends[0].data_parallel_size, 2);
  EXPECT_EQ(model.backends[0].api_key_env, "VLLM_KEY");
  EXPECT_EQ(model.backends[0].api_key, "sk-vllm");  // read once, at load
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

TEST(ConfigLoader, AccessLogIsAnAbsolutePathOpenedForAppending) {
  EXPECT_EQ(load_ok(kMinimal).access_log, "");
  const auto dir = std::filesystem::temp_directory_path() / ("lmwarden-config-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "access.log").string();
  EXPECT_EQ(load_ok("access_log: " + path + "\n" + std::string(kMinimal)).access_log, path);
  EXPECT_FALSE(std::filesystem::exists(path)) << "not created by the check: the start creates it";
  // Nor is the directory changed: its times stay as they were (a check run
  // by a monitor every minute would otherwise touch them each time).
  const timespec long_ago[2] = {{1'000'000'000, 0}, {1'000'000'000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, dir.c_str(), long_ago, 0), 0);
  EXPECT_EQ(load_ok("access_log: " + path + "\n" + std::string(kMinimal)).access_log, path);
  struct stat after {};
  ASSERT_EQ(::stat(dir.c_str(), &after), 0);
  EXPECT_EQ(after.st_mtim.tv_sec, 1'000'000'000) << "the check changed the directory";
  std::filesystem::permissions(
      dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  if (::geteuid() != 0) {  // root may create files in any directory
    EXPECT_EQ(error_of("access_log: " + path + "\n" + std::string(kMinimal)),
              "lmwarden.yaml:1: access_log: cannot create access.log in " + dir.string() +
                  ": Permission denied");
  }
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  std::filesystem::remove_all(dir);
  // Directories whose mode lets root in and whose file system makes no files
  // (the check creates one and takes it away again, as access(2) cannot say).
  EXPECT_EQ(error_of("access_log: /proc/lmwarden-access.log\n" + std::string(kMinimal)),
            "lmwarden.yaml:1: access_log: cannot create lmwarden-access.log in /proc: No such file "
            "or directory");
  if (std::filesystem::is_directory("/sys")) {
    EXPECT_THAT(
        error_of("access_log: /sys/lmwarden-access.log\n" + std::string(kMinimal)),
        HasSubstr("lmwarden.yaml:1: access_log: cannot create lmwarden-access.log in /sys: "));
  }

  EXPECT_EQ(error_of("access_log: logs/access.log\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: access_log: must be an absolute path, got "logs/access.log")");
  EXPECT_EQ(error_of("access_log: /nonexistent-lmwarden-dir/access.log\n" + std::string(kMinimal)),
            "lmwarden.yaml:1: access_log: /nonexistent-lmwarden-dir does not exist: create it "
            "(mkdir -p /nonexistent-lmwarden-dir), or name a file in a directory that does");
  EXPECT_THAT(error_of("access_log: ''\n" + std::string(kMinimal)), HasSubstr("access_log: must be a non-empty string"));
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
  EXPECT_EQ(parse_listen_address("http://127.0.0.1:8080").error(),
            "must be HOST:PORT without a scheme, e.g. 127.0.0.1:8080");
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
  // Spaces around the name are not part of it.
  EXPECT_EQ(*parse_session_source(" header: X-Foo "), (SessionSource{Kind::kHeader, "x-foo"}));
  EXPECT_EQ(*parse_session_source("body: prompt_cache_key"),
            (SessionSource{Kind::kBody, "prompt_cache_key"}));
  for (const char* bad :
       {"", "header:", "body:", "body:.a", "body:a.", "header:a b", "query:x", "claude"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(parse_session_source(bad).has_value());
  }
  // The default order, and `opening`, round-trip through their own spelling.
  auto sources = default_session_sources();
  sources.push_back(SessionSource{Kind::kOpening, ""});
  for (const auto& source : sources) EXPECT_EQ(*parse_session_source(source.label()), source);
  EXPECT_FALSE(parse_session_source("opening:x").has_value());
  EXPECT_EQ(parse_session_source("Opening").error(),
            "must be \"header:NAME\", \"body:dotted.path\", \"claude-user-id\" or \"opening\" "
            "(did you mean \"opening\"?)");
}

TEST(ConfigParsers, BackendUrls) {
  const auto plain = parse_backend_url("http://127.0.0.1:8000");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->host, "127.0.0.1");
  EXPECT_EQ(plain->port, 8000);
  EXPECT_EQ(plain->base_path, "");
  const auto with_path = parse_backend_url("HTTP://vllm_0.local/prefix/v1x//");
  ASSERT_TRUE(with_path);
  EXPECT_EQ(with_path->host, "vllm_0.local");
  EXPECT_EQ(with_path->port, 80);
  EXPECT_EQ(with_path->base_path, "/prefix/v1x");
  // An OpenAI client's base URL: each request's path would follow it.
  for (const char* base : {"http://10.0.0.2:8000/v1", "http://10.0.0.2:8000/vllm/V1/"}) {
    SCOPED_TRACE(base);
    const auto refused = parse_backend_url(base);
    ASSERT_FALSE(refused);
    EXPECT_THAT(refused.error(), ::testing::StartsWith("ends in /"));
    EXPECT_THAT(refused.error(), ::testing::EndsWith("give the server's root, e.g. "
                                                     "http://10.0.0.2:8000"));
  }
  const auto v6 = parse_backend_url("http://[::1]/");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->base_path, "");
}

}  // namespace
}  // namespace lmwarden::config
