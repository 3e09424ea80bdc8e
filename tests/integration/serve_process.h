// `lmwarden serve` run as a child process from a configuration written to a
// scratch directory, as an operator runs it, for the tests of restarts,
// reloads and the homes file.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "http_test_client.h"
#include "sim_test_client.h"

namespace lmwarden::testing {

class ServeProcess {
 public:
  // `name` tells apart the directories of two wardens a test runs at once.
  explicit ServeProcess(const std::string& yaml, const std::string& name = "")
      : dir_(std::filesystem::temp_directory_path() /
             ("lmwarden-restart-" + std::to_string(::getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + name)) {
    std::filesystem::create_directories(dir_);
    write_config(yaml);
    process_.emplace(
        std::vector<std::string>{"serve", "--config", config_path(), "--log-level", "debug"},
        ProcessOptions{.output_file = (dir_ / "serve.log").string()});
  }
  ~ServeProcess() {
    process_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string config_path() const { return (dir_ / "lmwarden.yaml").string(); }
  void write_config(const std::string& yaml) {
    // Written aside and renamed, as an operator's editor or deploy tool would.
    const auto tmp = dir_ / "lmwarden.yaml.tmp";
    std::ofstream(tmp) << yaml;
    std::filesystem::rename(tmp, config_path());
  }
  std::uint16_t port() const { return process_->port(); }
  pid_t pid() const { return process_->pid(); }
  SimProcess& process() { return *process_; }
  std::string log() const { return process_->output(); }
  nlohmann::json card(const std::string& model = "m") {
    return nlohmann::json::parse(
        http_request(port(), http::verb::get, "/api/models/" + model).body);
  }
  // GET /api/models's `configuration`: what became of the reloads.
  nlohmann::json configuration() {
    return nlohmann::json::parse(http_request(port(), http::verb::get, "/api/models").body)
        .at("configuration");
  }

 private:
  std::filesystem::path dir_;
  std::optional<SimProcess> process_;
};

inline std::string serve_yaml(std::uint16_t backend, int ranks, const std::string& model_extra = "",
                              const std::string& top = "", const std::string& grace = "10s") {
  return "listen: 127.0.0.1:0\ntimeouts:\n  shutdown_grace: " + grace + "\n" + top +
         "models:\n  - name: m\n" + model_extra +
         "    backends:\n      - url: http://127.0.0.1:" + std::to_string(backend) +
         "\n        data_parallel_size: " + std::to_string(ranks) + "\n";
}

inline std::string chat_body(bool stream) {
  return nlohmann::json{
      {"model", "m"}, {"stream", stream}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}
      .dump();
}

inline bool can_connect(std::uint16_t port) {
  try {
    HttpConnection c{port};
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// Exit status of the child once it has exited, within `deadline`.
inline std::optional<int> exit_status(SimProcess& p, std::chrono::milliseconds deadline) {
  if (!eventually([&] { return !p.running(); }, deadline)) return std::nullopt;
  return p.terminate();  // already reaped: returns the recorded status
}

}  // namespace lmwarden::testing
