// `lmwarden serve` as an operator runs it, restarted and reconfigured under
// load: SIGTERM stops accepting and lets streams finish within the grace
// period, then exits 0; SIGHUP reloads the file without dropping a
// connection, and a broken file is refused while the old configuration serves.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "fake_vllm.h"
#include "http_test_client.h"
#include "metric_probe.h"
#include "scratch.h"
#include "serve_process.h"
#include "sim_test_client.h"

namespace lmwarden::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(ServeRestart, SigtermStopsAcceptingLetsTheStreamFinishAndExitsZero) {
  FakeVllm fake{1};
  ::unsetenv("LMWARDEN_ADMIN_TOKEN");  // so the process starts without run-time control
  ServeProcess serve{serve_yaml(fake.port(), 1)};
  EXPECT_TRUE(eventually([&] {
    return serve.log().find("run-time control (PATCH /api/models/NAME, the dashboard's controls) "
                            "is off: the environment variable LMWARDEN_ADMIN_TOKEN is not set") !=
           std::string::npos;
  })) << serve.log();
  HttpConnection stream{serve.port()};
  stream.send(http::verb::post, "/v1/chat/completions", chat_body(true), {{"x-fake-hold", "1"}});
  ASSERT_EQ(stream.read_header().status, 200u);
  EXPECT_NE(stream.read_until("\n\n").find("first"), std::string::npos);

  ::kill(serve.pid(), SIGTERM);
  EXPECT_TRUE(eventually([&] { return !can_connect(serve.port()); })) << "still accepting after SIGTERM";
  EXPECT_TRUE(serve.process().running()) << "exited with a stream in flight";

  fake.release();
  const std::string rest = stream.read_until("[DONE]");
  EXPECT_NE(rest.find("[DONE]"), std::string::npos) << "the stream in flight was cut";
  const auto status = exit_status(serve.process(), std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value()) << "did not exit after its last stream";
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_NE(serve.log().find("no longer accepting"), std::string::npos);
}

// What the grace period leaves is ended as a failed request is: an error in
// the client's dialect (an error event and a clean end in a stream that had
// begun), a line in the access log, the upstream request closed.
TEST(ServeRestart, RequestsStillInFlightWhenTheGracePeriodEndsGetAnErrorAndALogLine) {
  FakeVllm fake{1};
  // A server that takes connections and never answers: a request to it waits
  // for its first byte.
  std::uint16_t silent_port = 0;
  const int silent = loopback_listener(16, silent_port);
  TempDir dir;
  const std::string access_log = dir.file("access.log");
  ServeProcess serve{serve_yaml(fake.port(), 1, "", "access_log: " + access_log + "\n", "300ms") +
                     "  - name: quiet\n    backends:\n      - url: http://127.0.0.1:" +
                     std::to_string(silent_port) + "\n"};
  HttpConnection stream{serve.port()};
  stream.send(http::verb::post, "/v1/chat/completions", chat_body(true), {{"x-fake-hold", "1"}});
  ASSERT_EQ(stream.read_header().status, 200u);
  stream.read_until("\n\n");
  HttpConnection waiting{serve.port()};
  waiting.send(http::verb::post, "/v1/messages",
               json{{"model", "quiet"}, {"max_tokens", 8}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}
                   .dump());
  ASSERT_TRUE(eventually([&] { return serve.card("quiet")["in_flight"] == 1; }));

  ::kill(serve.pid(), SIGTERM);
  HttpReply cut;
  ASSERT_NO_THROW(cut = waiting.read()) << "no reply: the connection was only closed";
  EXPECT_EQ(cut.status, 503u) << cut.body;
  EXPECT_EQ(json::parse(cut.body)["type"], "error") << "in the Anthropic dialect: " << cut.body;
  EXPECT_NE(cut.body.find("shutting down"), std::string::npos) << cut.body;
  std::string rest;
  EXPECT_NO_THROW(rest = stream.read_until("[DONE]")) << "the stream was not ended cleanly";
  EXPECT_NE(rest.find("shutting down"), std::string::npos) << rest;
  EXPECT_NE(rest.find("\"code\":503"), std::string::npos) << rest;
  const auto status = exit_status(serve.process(), std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value()) << "a stream that never ends must not keep the warden up";
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_NE(serve.log().find("grace period over with 2 request(s) in flight"), std::string::npos)
      << serve.log();
  EXPECT_TRUE(eventually([&] { return fake.aborted() == 1; })) << "the upstream request was left open";
  std::ifstream in(access_log);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 2u) << "one line per request cut";
  for (const json& line : lines) EXPECT_EQ(line["error"], "shutdown") << line.dump();
  const json& streamed = lines[0]["model"] == "m" ? lines[0] : lines[1];
  const json& quiet = lines[0]["model"] == "m" ? lines[1] : lines[0];
  EXPECT_EQ(streamed["outcome"], "cut_short") << streamed.dump();
  EXPECT_EQ(quiet["outcome"], "failed") << quiet.dump();
  EXPECT_EQ(quiet["status"], 503) << quiet.dump();
  ::close(silent);
}

// A request whose connect still waits (a server that drops packets, the
// connect timeout a minute) when the grace period ends is cut like the rest:
// its connect is closed and the client told, not left to the process's exit.
TEST(ServeRestart, ARequestStillConnectingWhenTheGracePeriodEndsGetsAnError) {
  UnansweredConnects server;
  ServeProcess serve{serve_yaml(server.port(), 1, "", "  connect: 60s\n", "300ms")};
  HttpConnection waiting{serve.port()};
  waiting.send(http::verb::post, "/v1/chat/completions", chat_body(false));
  ASSERT_TRUE(eventually([&] { return serve.card()["in_flight"] == 1; }));

  ::kill(serve.pid(), SIGTERM);
  HttpReply cut;
  ASSERT_NO_THROW(cut = waiting.read()) << "no reply: the connection was only closed";
  EXPECT_EQ(cut.status, 503u) << cut.body;
  EXPECT_NE(cut.body.find("shutting down"), std::string::npos) << cut.body;
  const auto status = exit_status(serve.process(), std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value()) << "still running with a connect under way";
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_EQ(serve.log().find("cannot connect"), std::string::npos)
      << "the cut connect was reported as the server's failure:\n"
      << serve.log();
}

TEST(ServeRestart, AShutdownGraceChangedByAReloadIsTheOneThatHolds) {
  FakeVllm fake{1};
  ServeProcess serve{serve_yaml(fake.port(), 1, "", "", "10m")};
  HttpConnection stream{serve.port()};
  stream.send(http::verb::post, "/v1/chat/completions", chat_body(true), {{"x-fake-hold", "1"}});
  ASSERT_EQ(stream.read_header().status, 200u);
  stream.read_until("\n\n");
  serve.write_config(serve_yaml(fake.port(), 1, "", "", "300ms"));
  ::kill(serve.pid(), SIGHUP);
  ASSERT_TRUE(eventually([&] {
    return metric(serve.port(), "lmwarden_config_reloads_total", {{"result", "applied"}}) == 1;
  })) << serve.log();
  ::kill(serve.pid(), SIGTERM);
  const auto status = exit_status(serve.process(), std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value()) << "still waiting on the 10 minutes it started with";
  EXPECT_NE(serve.log().find("grace period over with 1 request(s) in flight"), std::string::npos)
      << serve.log();
}

// Draining as nginx does: a kept-alive connection with no request under way
// is closed at once, and a request on its way when the signal came is
// served as its connection's last, so that no client keeps an old process
// busy through the grace period.
TEST(ServeRestart, DrainingClosesIdleConnectionsAndServesARequestUnderWayAsTheLast) {
  FakeVllm fake{1};
  ServeProcess serve{serve_yaml(fake.port(), 1)};
  auto closed_by_warden = [](HttpConnection& c) {
    char byte;
    beast::error_code ec;
    c.socket().read_some(asio::buffer(&byte, 1), ec);
    return ec == asio::error::eof;
  };
  HttpConnection idle{serve.port(), std::chrono::seconds(3)};  // the grace period is 10 s
  idle.send(http::verb::post, "/v1/chat/completions", chat_body(false));
  ASSERT_EQ(idle.read().status, 200u);
  // A second request on its way: its header and part of its body sent.
  HttpConnection busy{serve.port()};
  busy.send(http::verb::post, "/v1/chat/completions", chat_body(false));
  ASSERT_EQ(busy.read().status, 200u);
  const std::string body = chat_body(false);
  busy.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, 5));
  // A stream in flight keeps the warden in its grace period throughout.
  HttpConnection stream{serve.port()};
  stream.send(http::verb::post, "/v1/chat/completions", chat_body(true), {{"x-fake-hold", "1"}});
  ASSERT_EQ(stream.read_header().status, 200u);
  stream.read_until("\n\n");

  ::kill(serve.pid(), SIGTERM);
  EXPECT_TRUE(eventually([&] { return !can_connect(serve.port()); })) << "still accepting";
  EXPECT_TRUE(closed_by_warden(idle)) << "the idle kept-alive connection was left open";
  busy.send_raw(body.substr(5));
  const HttpReply last = busy.read();
  EXPECT_EQ(last.status, 200u) << last.body;
  EXPECT_EQ(last.headers.count("connection") ? last.headers.at("connection") : "", "close");
  EXPECT_TRUE(closed_by_warden(busy)) << "the connection stayed open after its last reply";
  EXPECT_TRUE(serve.process().running()) << "exited with a stream in flight";

  fake.release();
  EXPECT_NE(stream.read_until("[DONE]").find("[DONE]"), std::string::npos);
  const auto status = exit_status(serve.process(), std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

// Bytes that reached the warden's end of `client` and that it has not read
// yet, from the kernel's table of TCP sockets (/proc/net/tcp: the warden is
// in this network namespace); nullopt while that end is not listed.
std::optional<unsigned long> unread_by_warden(HttpConnection& client) {
  // An IPv4 address and port as the table writes them: the address's four
  // bytes as they lie in memory, read as one number, then the port.
  const auto as_listed = [](const tcp::endpoint& e) {
    char text[16];
    std::snprintf(text, sizeof text, "%08X:%04X", htonl(e.address().to_v4().to_uint()),
                  static_cast<unsigned>(e.port()));
    return std::string(text);
  };
  // The warden's end: its local address is the client's remote one.
  const std::string local = as_listed(client.socket().remote_endpoint());
  const std::string remote = as_listed(client.socket().local_endpoint());
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the column names
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, from, to, state, queues;  // queues: "tx_queue:rx_queue", in hex
    fields >> slot >> from >> to >> state >> queues;
    if (from == local && to == remote && queues.find(':') != std::string::npos)
      return std::stoul(queues.substr(queues.find(':') + 1), nullptr, 16);
  }
  return std::nullopt;
}

// With nothing forwarded in flight, a request whose header had come when the
// signal came still holds the process until it is answered.
TEST(ServeRestart, ARequestHalfSentWhenTheSignalCameIsServedThoughNothingElseIsInFlight) {
  FakeVllm fake{1};
  ServeProcess serve{serve_yaml(fake.port(), 1)};
  HttpConnection busy{serve.port()};
  const std::string body = chat_body(false);
  busy.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, 5));
  // Its header read: the warden has accepted the connection and taken all
  // that was sent (it parses the header as it reads it), however long a busy
  // machine makes that take.
  ASSERT_TRUE(eventually([&] { return unread_by_warden(busy) == 0ul; }))
      << "the warden did not read the request's header";
  ::kill(serve.pid(), SIGTERM);
  EXPECT_TRUE(eventually([&] { return !can_connect(serve.port()); })) << "still accepting";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(serve.process().running()) << "exited with a request half read";
  busy.send_raw(body.substr(5));
  const HttpReply last = busy.read();
  EXPECT_EQ(last.status, 200u) << last.body;
  EXPECT_EQ(last.headers.count("connection") ? last.headers.at("connection") : "", "close");
  const auto status = exit_status(serve.process(), std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value()) << "did not exit after its last request";
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

TEST(ServeRestart, SighupReloadsWithoutDroppingConnectionsAndRefusesABrokenFile) {
  FakeVllm fake{2};
  // Engines in its /metrics, or its probes fail and, 3 s on, it is out of
  // service, through reloads too.
  for (int rank = 0; rank < 2; ++rank) fake.set_engine(rank, 0, 0, 0, 0, 0);
  ServeProcess serve{serve_yaml(fake.port(), 2, "    spill_threshold: 8\n")};
  HttpConnection kept{serve.port()};  // one keep-alive connection across reloads
  auto turn = [&](const std::string& session) {
    kept.send(http::verb::post, "/v1/chat/completions", chat_body(false), {{"session-id", session}});
    return kept.read();
  };
  ASSERT_EQ(turn("alpha").status, 200u);
  ASSERT_EQ(turn("alpha").status, 200u);
  const int home = fake.seen().back().rank;
  // The debug line names the session source that matched.
  EXPECT_TRUE(eventually([&] {
    return serve.log().find("route=sticky conv=") != std::string::npos &&
           serve.log().find(" from=header:session-id") != std::string::npos;
  })) << serve.log();
  // What /metrics says of the reloads: none yet, and the file is in force.
  auto reloads = [&](const std::string& result) {
    return metric(serve.port(), "lmwarden_config_reloads_total", {{"result", result}});
  };
  auto last_ok = [&] { return metric(serve.port(), "lmwarden_config_last_reload_successful"); };
  auto loaded_at = [&] {
    return metric(serve.port(), "lmwarden_config_last_reload_success_timestamp_seconds");
  };
  EXPECT_EQ(reloads("applied"), 0);
  EXPECT_EQ(reloads("refused"), 0);
  EXPECT_EQ(last_ok(), 1);
  const double started_at = loaded_at();
  EXPECT_GT(started_at, 1.7e9) << "Unix seconds of the start";
  // And /api/models, for the dashboard: the same time, and no refusal.
  const auto iso = [](double unix_s) {
    const std::time_t t = static_cast<std::time_t>(unix_s);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return std::string(text);
  };
  EXPECT_EQ(serve.configuration(),
            json({{"loaded_at", iso(started_at)}, {"reload_refused", nullptr}}));
  const std::string since = serve.card()["since"];
  HttpConnection stream{serve.port()};
  stream.send(http::verb::post, "/v1/chat/completions", chat_body(true), {{"x-fake-hold", "1"}});
  ASSERT_EQ(stream.read_header().status, 200u);
  stream.read_until("\n\n");

  // A new threshold, an alias, a second model and another retry count; the
  // replica layout of `m` stays.
  serve.write_config(
      serve_yaml(fake.port(), 2, "    spill_threshold: 3\n    aliases: [m-alias]\n",
                 "retries: 2\n") +
      "  - name: m2\n    aliases: [m2-alias]\n    backends:\n      - url: http://127.0.0.1:" +
      std::to_string(fake.port()) + "\n        data_parallel_size: 2\n");
  ::kill(serve.pid(), SIGHUP);
  ASSERT_TRUE(eventually([&] { return serve.card()["spill_threshold"] == 3; })) << serve.log();
  const json card = serve.card();
  EXPECT_EQ(card["conversations"], 1) << "a model whose replicas did not change keeps its conversations";
  EXPECT_EQ(card["replicas"][home]["sticky"], 1) << "and its counters";
  EXPECT_EQ(card["in_flight"], 1) << "and the count of the stream still in flight";
  EXPECT_EQ(card["since"], since) << "and the time its counters began";
  EXPECT_EQ(serve.card("m2")["name"], "m2") << serve.card("m2").dump() << serve.log();
  EXPECT_TRUE(eventually([&] { return reloads("applied") == 1; }));
  EXPECT_GE(loaded_at(), started_at);
  // The log says what changed of a kept model's policy, which model is new,
  // and what changed of the settings of every model.
  EXPECT_TRUE(eventually([&] {
    return serve.log().find(
               ": models m (spill_threshold 8 → 3, aliases [] → [m-alias]), m2 "
               "(new); retries 1 → 2\n") != std::string::npos;
  })) << serve.log();

  ASSERT_EQ(turn("alpha").status, 200u) << "the keep-alive connection survives the reload";
  EXPECT_EQ(fake.seen().back().rank, home) << "the conversation keeps its home";
  fake.release();
  EXPECT_NE(stream.read_until("[DONE]").find("[DONE]"), std::string::npos);
  EXPECT_TRUE(eventually([&] { return serve.card()["in_flight"] == 0; }));

  // A broken file is refused; the configuration in force keeps serving. Each
  // problem is a log line of its own, with its time and level.
  serve.write_config("models:\n  - name: m\n    spill_treshold: 2\n    afinity: true\n");
  ::kill(serve.pid(), SIGHUP);
  EXPECT_TRUE(eventually([&] { return serve.log().find("afinity") != std::string::npos; }));
  const std::string log = serve.log();
  EXPECT_NE(log.find("refused; still serving the previous configuration"), std::string::npos) << log;
  const auto line_of = [&log](std::string_view text) {
    const std::size_t at = log.find(text);
    if (at == std::string::npos) return std::string();
    const std::size_t start = log.rfind('\n', at);
    return log.substr(start == std::string::npos ? 0 : start + 1,
                      log.find('\n', at) - (start == std::string::npos ? 0 : start + 1));
  };
  for (const std::string key : {"models[0].spill_treshold: unknown key", "models[0].afinity"}) {
    EXPECT_NE(line_of(key).find("] [error] reload of "), std::string::npos)
        << key << " should be on a log line of its own:\n"
        << log;
  }
  EXPECT_EQ(serve.card()["spill_threshold"], 3);
  EXPECT_EQ(turn("alpha").status, 200u);
  EXPECT_TRUE(serve.process().running());
  EXPECT_TRUE(eventually([&] { return reloads("refused") == 1; }));
  EXPECT_EQ(reloads("applied"), 1);
  EXPECT_EQ(last_ok(), 0) << "the file on disk is not the configuration in force";
  const double applied_at = loaded_at();
  // /api/models says why, with the lines the log has, and since when; the
  // configuration in force is the one the last applied reload read.
  const json configuration = serve.configuration();
  EXPECT_EQ(configuration["loaded_at"], iso(applied_at));
  const json& refusal = configuration["reload_refused"];
  ASSERT_TRUE(refusal.is_object()) << configuration.dump();
  // No backends, and the two misspelt keys.
  ASSERT_EQ(refusal["problems"].size(), 3u) << refusal.dump();
  for (const auto& problem : refusal["problems"]) {
    const std::string text = problem;
    EXPECT_NE(line_of(text).find("] [error] reload of "), std::string::npos)
        << text << " is not a logged problem:\n"
        << log;
  }
  EXPECT_NE(refusal["problems"][1].get<std::string>().find("models[0].spill_treshold: unknown key"),
            std::string::npos);
  EXPECT_GE(refusal["at"].get<std::string>(), iso(applied_at));

  // A new layout (one rank fewer) is taken, still without a restart; the
  // rank it keeps keeps its index, so its counters carry on, and the card
  // and the log say so.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // `since` has whole seconds
  serve.write_config(serve_yaml(fake.port(), 1));
  ::kill(serve.pid(), SIGHUP);
  ASSERT_TRUE(eventually([&] { return serve.card()["replicas"].size() == 1; })) << serve.log();
  EXPECT_EQ(serve.card()["since"].get<std::string>(), since);
  EXPECT_TRUE(eventually([&] { return reloads("applied") == 2; }));
  EXPECT_EQ(last_ok(), 1) << "an applied reload clears the refused one";
  EXPECT_EQ(serve.configuration()["reload_refused"], nullptr) << "and so does /api/models";
  EXPECT_GT(loaded_at(), applied_at) << "more than a second after the last one applied";
  EXPECT_TRUE(eventually([&] {
    const std::string log = serve.log();
    const auto at = log.find("reload: model m: its replicas changed: ");
    return at != std::string::npos &&
           log.find("the counters and chart of the replicas it keeps carry on", at) !=
               std::string::npos;
  })) << serve.log();
  EXPECT_EQ(turn("alpha").status, 200u);
  EXPECT_EQ(serve.card()["in_flight"], 0);
  EXPECT_EQ(http_request(serve.port(), http::verb::get, "/api/models/m2").status, 404u);
}

// The file's backends are checked against its own listen address; one
// that --listen makes the warden itself is refused too, before it starts.
TEST(ServeRestart, AListenAddressThatMakesABackendTheWardenItselfIsRefused) {
  TempDir dir{"lmwarden-loop"};
  const std::string port = std::to_string(closed_port());
  std::ofstream(dir.file("lmwarden.yaml"))
      << "listen: 127.0.0.1:0\nmodels:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:"
      << port << "\n";
  const std::string out = dir.file("out.log");
  const std::string command = "timeout 20 " + std::string(LMWARDEN_BINARY) + " serve --config " +
                              dir.file("lmwarden.yaml") + " --listen 127.0.0.1:" + port + " >" +
                              out + " 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::ifstream in(out);
  const std::string said{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_EQ(said, "lmwarden: --listen 127.0.0.1:" + port + ": model m's backend http://127.0.0.1:" +
                      port + " is that address: every request would come back to it\n");
}

// `serve --check`: the file checked as a start checks it, what it sets
// said, and nothing started (no port, no homes file's lock).
TEST(ServeRestart, CheckSaysWhatTheFileSetsOrEveryProblemAndStartsNothing) {
  TempDir dir{"lmwarden-check"};
  const auto check = [&](const std::string& yaml, const std::string& extra = "") {
    std::ofstream(dir.file("lmwarden.yaml")) << yaml;
    const std::string out = dir.file("out.log");
    const std::string command = "timeout 20 " + std::string(LMWARDEN_BINARY) + " serve --config " +
                                dir.file("lmwarden.yaml") + " --check" + extra + " >" + out +
                                " 2>&1";
    const int status = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(status));
    std::ifstream in(out);
    return std::pair{WEXITSTATUS(status), std::string{std::istreambuf_iterator<char>(in),
                                                      std::istreambuf_iterator<char>()}};
  };
  const std::uint16_t listen = free_port();
  const std::string backend = "http://127.0.0.1:" + std::to_string(closed_port());
  const std::string valid = "listen: 127.0.0.1:" + std::to_string(listen) +
                            "\nsaved_homes:\n  path: " + dir.file("homes.json") +
                            "\naccess_log: " + dir.file("access.log") +
                            "\nadmin_token: in-the-file"
                            "\nmodels:\n  - name: m\n    aliases: [m2, m3]\n    backends:\n"
                            "      - url: " +
                            backend +
                            "\n        data_parallel_size: 2\n  - name: n\n    affinity: false\n"
                            "    spill_threshold: 3\n    backends:\n      - url: " +
                            backend + "\n";
  // The token written in the file is the one in force, the variable's set or not.
  ::setenv("LMWARDEN_ADMIN_TOKEN", "from-the-environment", 1);
  const auto [ok, said] = check(valid);
  ::unsetenv("LMWARDEN_ADMIN_TOKEN");
  EXPECT_EQ(ok, 0);
  EXPECT_EQ(said,
            dir.file("lmwarden.yaml") +
                ": the configuration is valid; it listens on 127.0.0.1:" + std::to_string(listen) +
                "\nmodel m (also m2, m3): 2 replica(s) on 1 server(s), affinity on, spill "
                "threshold auto; without a rank on multi-rank servers: /v1/responses\n"
                "model n: 1 replica(s) on 1 server(s), affinity off, spill threshold 3\n"
                "run-time control (PATCH /api/models/NAME, the dashboard's controls) is on: the "
                "admin token is admin_token in " +
                dir.file("lmwarden.yaml") +
                " (LMWARDEN_ADMIN_TOKEN is set too, and not used)\n"
                "access log: " +
                dir.file("access.log") + "\nsaved homes: " + dir.file("homes.json") +
                ", written every 60 s\n");
  EXPECT_FALSE(can_connect(listen));
  EXPECT_FALSE(std::filesystem::exists(dir.file("homes.json.lock"))) << "no lock taken";
  EXPECT_FALSE(std::filesystem::exists(dir.file("access.log"))) << "nothing written";

  const auto [moved, moved_said] = check(valid, " --listen 127.0.0.1:0");
  EXPECT_EQ(moved, 0);
  EXPECT_NE(moved_said.find("it listens on 127.0.0.1:0\n"), std::string::npos) << moved_said;

  const auto [bad, bad_said] = check(
      "lisen: 127.0.0.1:1\nmodels:\n  - name: m\n    spill_threshold: 0\n    backends:\n"
      "      - url: " +
      backend + "\n");
  EXPECT_EQ(bad, 2);
  EXPECT_EQ(bad_said, "lmwarden: invalid configuration\n" + dir.file("lmwarden.yaml") +
                          ":1: lisen: unknown key (did you mean \"listen\"?)\n" +
                          dir.file("lmwarden.yaml") +
                          ":4: models[0].spill_threshold: must be an integer from 1 to 1000000 or "
                          "\"auto\", got \"0\"\n");
  // A wrong --listen is told with the file's errors, not once they are mended.
  const auto [both, both_said] = check("models: []\n", " --listen bogus");
  EXPECT_EQ(both, 2);
  EXPECT_EQ(both_said,
            "lmwarden: invalid configuration\n--listen bogus: must be HOST:PORT, e.g. "
            "127.0.0.1:8080 or [::1]:8080\n" +
                dir.file("lmwarden.yaml") +
                ":1: models: must be a list of at least one model, got an empty list\n");

  // A file that is not there is one more problem of the file, said the same way.
  const std::string missing = dir.file("missing.yaml");
  const std::string out = dir.file("out.log");
  const int status = std::system(("timeout 20 " + std::string(LMWARDEN_BINARY) +
                                  " serve --config " + missing + " --check >" + out + " 2>&1")
                                     .c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::ifstream in(out);
  EXPECT_EQ(
      std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()),
      "lmwarden: invalid configuration\n" + missing + ": cannot open: No such file or directory\n");
}

// Mistakes on the command line are named, as those in the file are.
TEST(ServeRestart, CommandLineMistakesAreNamed) {
  TempDir dir{"lmwarden-cli"};
  std::ofstream(dir.file("lmwarden.yaml"))
      << "listen: 127.0.0.1:0\nmodels:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:"
      << closed_port() << "\n";
  const auto run = [&](const std::string& args) {
    const std::string out = dir.file("out.log");
    const int status = std::system(
        ("timeout 20 " + std::string(LMWARDEN_BINARY) + " " + args + " >" + out + " 2>&1").c_str());
    EXPECT_TRUE(WIFEXITED(status)) << args;
    std::ifstream in(out);
    return std::pair{WEXITSTATUS(status), std::string{std::istreambuf_iterator<char>(in),
                                                      std::istreambuf_iterator<char>()}};
  };
  const std::string config = " -c " + dir.file("lmwarden.yaml");
  EXPECT_EQ(run("serv" + config),
            std::pair(2, std::string("lmwarden: no command serv (did you mean serve?); the "
                                     "commands are serve, sim, bench (lmwarden --help)\n")));
  EXPECT_EQ(run("start"), std::pair(2, std::string("lmwarden: no command start; the commands are "
                                                   "serve, sim, bench (lmwarden --help)\n")));
  EXPECT_EQ(run("version"), run("--version"));
  EXPECT_EQ(run("version").first, 0);
  const auto help = run("help");
  EXPECT_EQ(help.first, 0);
  EXPECT_NE(help.second.find("Usage: lmwarden [OPTIONS] SUBCOMMAND"), std::string::npos)
      << help.second;
  // An empty --listen (an unset variable in a unit file) is not "no --listen".
  EXPECT_EQ(run("serve" + config + " --check --listen ''"),
            std::pair(2, std::string("lmwarden: --listen '': must be HOST:PORT, e.g. "
                                     "127.0.0.1:8080 or [::1]:8080\n")));
  // The level by the name the log gives it.
  EXPECT_EQ(run("serve" + config + " --check --log-level warning").first, 0);
}

// The start log names the allocator the process runs on: a sanitizer
// build's own (as this test is built, so is the warden it runs).
TEST(ServeRestart, TheStartLogNamesTheAllocator) {
  FakeVllm fake{1};
  ServeProcess serve{serve_yaml(fake.port(), 1)};
#if defined(__SANITIZE_ADDRESS__)
  const std::string expected = "memory allocator: AddressSanitizer's";
#elif defined(__SANITIZE_THREAD__)
  const std::string expected = "memory allocator: ThreadSanitizer's";
#else
  const std::string expected = "memory allocator: ";  // jemalloc or system: tests/release
#endif
  EXPECT_TRUE(eventually([&] { return serve.log().find(expected) != std::string::npos; }))
      << serve.log();
}

// A reload is checked against the address the warden listens on, which it
// does not change: the port the OS picked for `listen: …:0`, whatever listen
// address the new file names.
TEST(ServeRestart, AReloadThatMakesABackendTheWardenItselfIsRefused) {
  FakeVllm fake{1};
  ServeProcess serve{serve_yaml(fake.port(), 1)};
  const std::string self = std::to_string(serve.port());
  const std::string looping =
      "  - name: loop\n    backends:\n      - url: http://127.0.0.1:" + self + "\n";
  std::string moved = serve_yaml(fake.port(), 1);  // the same, listening elsewhere
  moved.replace(0, moved.find('\n'), "listen: 127.0.0.1:" + std::to_string(free_port()));
  int refused = 0;
  for (const std::string& yaml : {serve_yaml(fake.port(), 1) + looping, moved + looping}) {
    serve.write_config(yaml);
    ::kill(serve.pid(), SIGHUP);
    ++refused;
    ASSERT_TRUE(eventually([&] {
      return metric(serve.port(), "lmwarden_config_reloads_total", {{"result", "refused"}}) ==
             refused;
    })) << serve.log();
  }
  EXPECT_NE(serve.log().find("lmwarden.yaml:11: models[1].backends[0].url: is the address this "
                             "warden listens on (127.0.0.1:" +
                             self + ", until a restart): every request would come back to it"),
            std::string::npos)
      << serve.log();
  EXPECT_EQ(http_request(serve.port(), http::verb::get, "/api/models/loop").status, 404u);
  EXPECT_EQ(
      http_request(serve.port(), http::verb::post, "/v1/chat/completions", chat_body(false)).status,
      200u);
}

// Lines in a file; 0 when it is not there.
std::size_t lines_in(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// logrotate's move, then SIGUSR1, as nginx is sent: the warden goes on
// writing to a new file of the old name, and the moved file keeps what it
// had. Nothing is reloaded, and the process lives on (SIGUSR1's default
// action ended it).
TEST(ServeRestart, SigUsr1ReopensTheAccessLog) {
  FakeVllm fake{1};
  TempDir dir{"lmwarden-usr1"};
  const std::string log = dir.file("access.log");
  ServeProcess serve{serve_yaml(fake.port(), 1, "", "access_log: " + log + "\n")};
  auto chat = [&] {
    return http_request(serve.port(), http::verb::post, "/v1/chat/completions", chat_body(false))
        .status;
  };
  ASSERT_EQ(chat(), 200u);
  ASSERT_TRUE(eventually([&] { return lines_in(log) == 1; })) << serve.log();

  std::filesystem::rename(log, log + ".1");
  ::kill(serve.pid(), SIGUSR1);
  ASSERT_TRUE(eventually([&] {
    return serve.log().find("access log: reopened " + log) != std::string::npos;
  })) << serve.log();
  ASSERT_EQ(chat(), 200u);
  EXPECT_TRUE(eventually([&] { return lines_in(log) == 1; })) << serve.log();
  EXPECT_EQ(lines_in(log + ".1"), 1u);
  EXPECT_EQ(metric(serve.port(), "lmwarden_config_reloads_total"), 0);
  EXPECT_TRUE(serve.process().running());
}

// A warden of `ranks` in front of a server of `engines` ranks, scraped every
// 100 ms: `said` comes in its log, once in the five rounds after.
void expect_said_once_of_ranks(int engines, int ranks, const std::string& said) {
  FakeVllm fake{engines};
  for (int rank = 0; rank < engines; ++rank) fake.set_engine(rank, 0, 0, 0, 0, 0);
  ServeProcess serve{serve_yaml(fake.port(), ranks, "", "scrape_interval: 100ms\n")};
  const std::string line = "model=m backend=http://127.0.0.1:" + std::to_string(fake.port()) + said;
  ASSERT_TRUE(eventually([&] { return serve.log().find(line) != std::string::npos; }))
      << serve.log();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // five more rounds
  const std::string log = serve.log();
  EXPECT_EQ(log.find(line, log.find(line) + 1), std::string::npos) << "said more than once:\n"
                                                                   << log;
}

// A data_parallel_size larger than the server runs loads (the server may be
// starting), but the first scrape that shows the missing engines says so,
// once: vLLM refuses every request for those ranks.
TEST(ServeRestart, RanksTheServersMetricsDoNotHaveAreNamedOnce) {
  expect_said_once_of_ranks(2, 4,
                            ": data_parallel_size is 4, but its /metrics has no engine for rank "
                            "2-3; vLLM refuses requests for a rank it does not have");
}

// A data_parallel_size smaller than the server's: with 1, no rank is sent,
// and the server's own balancer spreads each conversation over its ranks.
TEST(ServeRestart, RanksBeyondDataParallelSizeAreNamedOnce) {
  expect_said_once_of_ranks(4, 1,
                            ": data_parallel_size is 1, but its /metrics has engines for rank "
                            "1-3 too; a server of one rank is sent no rank");
}

}  // namespace
}  // namespace lmwarden::testing
