// Every validation message of the YAML configuration: file, line, key, reason.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "config/config_loader.h"
#include "config_test_util.h"

namespace lmwarden::config {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ConfigErrors, MessageNamesFileLineKeyAndReason) {
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    spill_threshold: 0
    backends:
      - url: http://127.0.0.1:8000
)"),
      R"(lmwarden.yaml:3: models[0].spill_threshold: must be an integer from 1 to 1000000 or "auto", got "0")");
}

TEST(ConfigErrors, SpillThresholdShapes) {
  for (const char* bad : {"-1", "1.5", "eight", "AUTO", "[8]", "1000001", "2147483648"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(
        error_of(std::string("models: [{name: m, spill_threshold: ") + bad +
                 ", backends: [{url: 'http://h:1'}]}]"),
        HasSubstr("models[0].spill_threshold: must be an integer from 1 to 1000000 or \"auto\""));
  }
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
  EXPECT_EQ(error_of("eject_after_5xx: -1\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: eject_after_5xx: must be an integer from 0 to 1000, got "-1")");
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
            "lmwarden.yaml:3: models[0].aliases: must be a list of names without white space at "
            "either end or control characters, got \"qwen\"");
  // What no client sends as a model's name: a space at an end, written by
  // mistake, or a control character.
  EXPECT_EQ(error_of("models:\n  - name: \"m \"\n    backends: [{url: \"http://h:1\"}]\n"),
            "lmwarden.yaml:2: models[0].name: must be a name without white space at either end "
            "or control characters, got \"m \"");
  EXPECT_EQ(error_of("models:\n  - name: \"m\\0x\"\n    backends: [{url: \"http://h:1\"}]\n"),
            "lmwarden.yaml:2: models[0].name: must be a name without white space at either end "
            "or control characters, got \"m\\x00x\"");
  EXPECT_EQ(error_of("models:\n  - name: m\n    aliases: [a, \" b\"]\n"
                     "    backends: [{url: \"http://h:1\"}]\n"),
            "lmwarden.yaml:3: models[0].aliases[1]: must be names without white space at either "
            "end or control characters, got \" b\"");
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
  EXPECT_EQ(error_of(R"(models:
  - name: m
    unranked_routes: [/v1/responses, /v1/respones]
    backends: [{url: "http://h:1"}]
)"),
            "lmwarden.yaml:3: models[0].unranked_routes[1]: must be forwarded routes "
            "(/v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, "
            "/v1/messages/count_tokens, /v1/embeddings, /tokenize, /detokenize), got "
            "\"/v1/respones\"");
  EXPECT_EQ(error_of("models: {name: m}\n"),
            "lmwarden.yaml:1: models: must be a list of at least one model, got a mapping");
  EXPECT_EQ(error_of("- just a list\n"), "lmwarden.yaml:1: must be a mapping of keys, got a list");
  // The service's environment file given by mistake: one value, not shown.
  const std::string env_file = error_of("LMWARDEN_ADMIN_TOKEN=s3cret-token\n");
  EXPECT_EQ(env_file,
            "lmwarden.yaml:1: must be a mapping of keys (\"listen: …\", \"models:\" and so on), "
            "got a single value (not shown: it may hold a secret); is this the configuration "
            "file?");
  EXPECT_EQ(env_file.find("s3cret"), std::string::npos);
  const std::string with_colon = error_of("LMWARDEN_ADMIN_TOKEN=s3cret: x\nlisten: 1\n");
  EXPECT_EQ(with_colon,
            "lmwarden.yaml:1: has a key with '=' in it, as an environment file's NAME=value line "
            "(not shown: it may hold a secret); is this the configuration file?");
  EXPECT_EQ(error_of("admin_token: \"s3cret \"\n" + std::string(kMinimal)),
            "lmwarden.yaml:1: admin_token: begins or ends with white space, which no "
            "Authorization header can carry (the value is not shown: it is a secret)");
  EXPECT_EQ(error_of("admin_token: \"s3c\\nret\"\n" + std::string(kMinimal)),
            "lmwarden.yaml:1: admin_token: holds a control character, which no Authorization "
            "header can carry (the value is not shown: it is a secret)");
}

TEST(ConfigErrors, DurationsAndSizes) {
  EXPECT_EQ(
      error_of("timeouts: {idle: 90}\n" + std::string(kMinimal)),
      R"(lmwarden.yaml:1: timeouts.idle: must be a duration like 500ms, 90s, 30m or 1h, got "90" (a unit is needed: 90s for seconds))");
  EXPECT_EQ(error_of("timeouts: {connect: 0s}\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: timeouts.connect: must be at least 1ms, got "0s")");
  EXPECT_EQ(error_of("scrape_interval: 10ms\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: scrape_interval: must be at least 100ms, got "10ms")");
  EXPECT_EQ(error_of("eject_for: 500ms\n" + std::string(kMinimal)),
            R"(lmwarden.yaml:1: eject_for: must be at least 1s, got "500ms")");
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
            R"(lmwarden.yaml:3: models[0].session_ttl: must be at least 1s, got "500ms")");
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    active_window: 5
    backends: [{url: "http://h:1"}]
)"),
      R"(lmwarden.yaml:3: models[0].active_window: must be a duration like 500ms, 90s, 30m or 1h, got "5" (a unit is needed: 5s for seconds))");
  // Kept in whole seconds: 1500ms would have been 1s, said nowhere.
  EXPECT_EQ(error_of(R"(models:
  - name: m
    session_ttl: 1500ms
    backends: [{url: "http://h:1"}]
)"),
            R"(lmwarden.yaml:3: models[0].session_ttl: must be whole seconds, got "1500ms")");
  EXPECT_EQ(error_of(R"(models:
  - name: m
    active_window: 1m500ms
    backends: [{url: "http://h:1"}]
)"),
            R"(lmwarden.yaml:3: models[0].active_window: must be whole seconds, got "1m500ms")");
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

// Every error at once, in the file's order, whatever order the keys are
// read in (threads before models).
TEST(ConfigErrors, AreListedInTheFilesOrder) {
  const auto result = load_config_string(
      "models:\n  - name: m\n    backends:\n      - url: ftp://gpu:8000\nthreads: -1\n",
      "lmwarden.yaml");
  ASSERT_FALSE(result);
  const std::string errors = result.error().message();
  const std::size_t url = errors.find("lmwarden.yaml:4: models[0].backends[0].url");
  const std::size_t threads = errors.find("lmwarden.yaml:5: threads");
  ASSERT_NE(url, std::string::npos) << errors;
  ASSERT_NE(threads, std::string::npos) << errors;
  EXPECT_LT(url, threads) << errors;
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
  // What may be a secret is not repeated: user info, a query, a fragment.
  EXPECT_THAT(backend_error("http://admin:hunter2@127.0.0.1:8000/v1"),
              HasSubstr("got \"http://…@127.0.0.1:8000/v1\""));
  EXPECT_THAT(backend_error("http://gpu:8000/v1?api_key=hunter2"),
              HasSubstr("got \"http://gpu:8000/v1?…\""));
  EXPECT_THAT(backend_error("'http://p@ss:hunter2@gpu:8000/#hunter2'"),
              HasSubstr("got \"http://…@gpu:8000/#…\""));
  EXPECT_THAT(backend_error("http://127.0.0.1:0"),
              HasSubstr("the port must be a number from 1 to 65535"));
  EXPECT_THAT(backend_error("'http://127.0.0.1:'"), HasSubstr("the port is empty"));
  EXPECT_THAT(backend_error("http://300.1.1.1:8000"), HasSubstr("not a valid IPv4 address"));
  // The older forms of an IPv4 address that getaddrinfo reads as one.
  EXPECT_THAT(backend_error("http://0x7f.0.0.1:8000"),
              HasSubstr("url: 0x7f.0.0.1 is read as the IPv4 address 127.0.0.1: write it so"));
  EXPECT_THAT(backend_error("http://0300.0xa8.1:8000"),
              HasSubstr("0300.0xa8.1 is read as the IPv4 address 192.168.0.1"));
  EXPECT_THAT(backend_error("http://0x0a000001:8000"), HasSubstr("as the IPv4 address 10.0.0.1"));
  EXPECT_THAT(backend_error("http://127.1:8000"),
              HasSubstr("127.1 is read as the IPv4 address 127.0.0.1"));
  EXPECT_THAT(backend_error("http://[::1:8000"), HasSubstr("missing ']'"));
  EXPECT_THAT(backend_error("http://:8000"), HasSubstr("the host is missing"));
}

// A backend at the warden's own address would send every request back to it
// until max_connections ran out.
TEST(ConfigErrors, ABackendThatIsTheWardenItself) {
  auto loop_error = [](std::string_view listen, std::string_view url) {
    return error_of(fmt::format(
        "listen: {}\nmodels:\n  - name: m\n    backends:\n      - url: {}\n", listen, url));
  };
  EXPECT_EQ(loop_error("127.0.0.1:9000", "http://127.0.0.1:9000"),
            "lmwarden.yaml:5: models[0].backends[0].url: is this warden's own listen address: "
            "every request would come back to it, got \"http://127.0.0.1:9000\"");
  EXPECT_THAT(loop_error("127.0.0.1:9000", "http://LOCALHOST:9000/vllm"), HasSubstr("own listen"));
  EXPECT_THAT(loop_error("0.0.0.0:9000", "http://127.0.0.1:9000"), HasSubstr("own listen"));
  EXPECT_THAT(loop_error("'[::]:9000'", "http://[::1]:9000"), HasSubstr("own listen"));
  // An IPv6 address however its zeros are written, and one that maps an
  // IPv4 address, which reaches that address.
  EXPECT_THAT(loop_error("'[::1]:9000'", "http://[0:0:0:0:0:0:0:1]:9000"), HasSubstr("own listen"));
  EXPECT_THAT(loop_error("127.0.0.1:9000", "http://[::ffff:127.0.0.1]:9000"),
              HasSubstr("own listen"));
  EXPECT_THAT(loop_error("0.0.0.0:9000", "http://[::FFFF:7f00:2]:9000"), HasSubstr("own listen"));
  // The default listen address is 127.0.0.1:8080.
  EXPECT_THAT(error_of("models:\n  - name: m\n    backends: [{url: \"http://127.0.0.1:8080\"}]\n"),
              HasSubstr("own listen"));
  // Another port, another host, or a port the OS picks is not the warden.
  load_ok(
      "listen: 127.0.0.1:9000\nmodels:\n  - name: m\n    backends: [{url: "
      "\"http://127.0.0.1:9001\"}]\n");
  load_ok(
      "listen: 127.0.0.1:9000\nmodels:\n  - name: m\n    backends: [{url: "
      "\"http://10.0.0.2:9000\"}]\n");
  load_ok(
      "listen: 127.0.0.1:0\nmodels:\n  - name: m\n    backends: [{url: "
      "\"http://127.0.0.1:8080\"}]\n");
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
  // One host however it is written: as localhost, or in another case.
  EXPECT_EQ(error_of(R"(models:
  - name: m
    backends:
      - url: http://LocalHost:8000
      - url: http://127.0.0.1:8000
)"),
            "lmwarden.yaml:5: models[0].backends[1].url: the same server is listed twice "
            "(LocalHost and 127.0.0.1 are one host); use data_parallel_size for its ranks");
  EXPECT_EQ(error_of(R"(models:
  - name: m
    backends:
      - url: http://gpu1:8000
      - url: http://GPU1:8000
)"),
            "lmwarden.yaml:5: models[0].backends[1].url: the same server is listed twice (gpu1 "
            "and GPU1 are one host); use data_parallel_size for its ranks");
  EXPECT_EQ(error_of(R"(models:
  - name: m
    backends:
      - url: http://[::1]:8000
      - url: http://[0:0:0:0:0:0:0:1]:8000
)"),
            "lmwarden.yaml:5: models[0].backends[1].url: the same server is listed twice (::1 "
            "and 0:0:0:0:0:0:0:1 are one host); use data_parallel_size for its ranks");
  EXPECT_EQ(error_of("models:\n  - name: m\n    backends: []\n"),
            "lmwarden.yaml:3: models[0].backends: must be a list of at least one backend, got an "
            "empty list");
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
            "lmwarden.yaml:1: models: must be a list of at least one model, got an empty list");
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
  EXPECT_EQ(error_of(R"(models:
  - name: a
    aliases: [a]
    backends: [{url: "http://h:1"}]
)"),
            R"(lmwarden.yaml:3: models[0].aliases[0]: "a" is already this model's name)");
  // Two checks find the errors of `[a, a]`; they are told along the line.
  const auto both = load_config_string(R"(models:
  - name: a
    aliases: [a, a]
    backends: [{url: "http://h:1"}]
)",
                                       "lmwarden.yaml");
  ASSERT_FALSE(both);
  EXPECT_EQ(both.error().message(),
            "lmwarden.yaml:3: models[0].aliases[0]: \"a\" is already this model's name\n"
            "lmwarden.yaml:3: models[0].aliases[1]: \"a\" is listed twice");
}

// One pass over the body reads a top-level key either for a body source or
// for an opening: a model's `opening` and any model's body source under
// those keys are refused together.
TEST(ConfigErrors, ABodySourceUnderTheOpeningsKeys) {
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    session_sources: [opening]
    backends: [{url: "http://h:1"}]
  - name: n
    session_sources: ["body:messages.sid"]
    backends: [{url: "http://h:2"}]
)"),
      R"(lmwarden.yaml:6: models[1].session_sources[0]: "body:messages.sid" reads inside a key )"
      R"(that the "opening" source of models[0] reads (system, instructions, messages, input): )"
      R"(one pass over the body cannot do both; drop one of them)");
  const auto fine = load_config_string(R"(models:
  - name: m
    session_sources: ["body:metadata.sid", "body:inputs", opening]
    backends: [{url: "http://h:1"}]
)",
                                       "lmwarden.yaml");
  EXPECT_TRUE(fine) << fine.error().message();
}

TEST(ConfigErrors, SessionSources) {
  // Unquoted, "- header: NAME" is a mapping to YAML; the message says how to write it.
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    session_sources:
      - header: x-my-session
    backends: [{url: "http://h:1"}]
)"),
      R"(lmwarden.yaml:4: models[0].session_sources[0]: must be "header:NAME", "body:dotted.path", "claude-user-id" or "opening" (write "header:x-my-session" in quotes: a colon and a space make a mapping), got a mapping)");
  EXPECT_EQ(
      error_of(R"(models:
  - name: m
    session_sources: ["header:session-id", "cookie:sid"]
    backends: [{url: "http://h:1"}]
)"),
      R"(lmwarden.yaml:3: models[0].session_sources[1]: must be "header:NAME", "body:dotted.path", "claude-user-id" or "opening", got "cookie:sid")");
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
  ::setenv("GOOD", "a key", 1);
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

// A key or password written where its variable's name belongs is not
// repeated in the error, which goes to logs.
TEST(ConfigErrors, ASecretWrittenForAVariableNameIsNotShown) {
  const std::string homes = "shared_homes:\n  redis: redis://h:6379\n  password_env: s3cr3t-pw\n";
  const std::string error = error_of(homes + std::string(kMinimal));
  EXPECT_THAT(error, HasSubstr("shared_homes.password_env: must be an environment variable name"));
  EXPECT_THAT(error, Not(HasSubstr("s3cr3t")));
  const std::string keys = error_of(R"(models:
  - name: m
    api_keys_env: ["sk-live-123"]
    backends: [{url: "http://h:1"}]
)");
  EXPECT_THAT(keys, HasSubstr("api_keys_env[0]: must be environment variable names"));
  EXPECT_THAT(keys, Not(HasSubstr("sk-live")));
  const std::string token = error_of("admin_token_env: tok-en\n" + std::string(kMinimal));
  EXPECT_THAT(token, Not(HasSubstr("tok-en")));
}

// The error of a model whose clients' keys are the variables `names` (a YAML
// list's items), and of one whose backend's key is the variable `name`.
std::string client_keys_error(std::string_view names) {
  return error_of("models:\n  - name: m\n    api_keys_env: [" + std::string(names) +
                  "]\n    backends: [{url: \"http://h:1\"}]\n");
}
std::string backend_key_error(std::string_view name) {
  return error_of(
      "models:\n  - name: m\n    backends:\n      - url: http://h:1\n"
      "        api_key_env: " +
      std::string(name) + "\n");
}

// A key named but not there would leave a model open (or send the server an
// empty key) while the file says otherwise.
TEST(ConfigErrors, KeysNamedByEnvironmentVariablesMustBeThere) {
  ::unsetenv("LMWARDEN_TEST_UNSET");
  ::setenv("LMWARDEN_TEST_EMPTY", "", 1);
  ::setenv("LMWARDEN_TEST_SET", "k", 1);
  EXPECT_EQ(client_keys_error("LMWARDEN_TEST_UNSET"),
            "lmwarden.yaml:3: models[0].api_keys_env[0]: the environment variable "
            "LMWARDEN_TEST_UNSET is not set: the key it should hold cannot be checked");
  // One missing among several is refused too: that key would never work.
  EXPECT_EQ(client_keys_error("LMWARDEN_TEST_SET, LMWARDEN_TEST_EMPTY"),
            "lmwarden.yaml:3: models[0].api_keys_env[1]: the environment variable "
            "LMWARDEN_TEST_EMPTY is empty: the key it should hold cannot be checked");
  EXPECT_EQ(backend_key_error("LMWARDEN_TEST_UNSET"),
            "lmwarden.yaml:5: models[0].backends[0].api_key_env: the environment variable "
            "LMWARDEN_TEST_UNSET is not set: the server would be sent an empty key");
  ::unsetenv("LMWARDEN_TEST_EMPTY");
  ::unsetenv("LMWARDEN_TEST_SET");
}

// A key with a line end (left by the secret file it was read from) would
// split the header it is sent in, or never match what a client sends.
TEST(ConfigErrors, KeysWithControlCharactersAreRefusedWithoutShowingThem) {
  ::setenv("LMWARDEN_TEST_NEWLINE", "backendkey\r\nX-Injected: yes", 1);
  ::setenv("LMWARDEN_TEST_TAB", "client\tkey", 1);
  EXPECT_EQ(backend_key_error("LMWARDEN_TEST_NEWLINE"),
            "lmwarden.yaml:5: models[0].backends[0].api_key_env: the environment variable "
            "LMWARDEN_TEST_NEWLINE holds a control character (byte 11 of 27, 0x0d; a line end "
            "left by the file it came from?); the value is not shown: it is a secret");
  const std::string client = client_keys_error("LMWARDEN_TEST_TAB");
  EXPECT_THAT(client, HasSubstr("models[0].api_keys_env[0]: the environment variable "
                                "LMWARDEN_TEST_TAB holds a control character (byte 7 of 10, 0x09"));
  EXPECT_THAT(client, Not(HasSubstr("client")));
  ::unsetenv("LMWARDEN_TEST_NEWLINE");
  ::unsetenv("LMWARDEN_TEST_TAB");
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

}  // namespace
}  // namespace lmwarden::config
