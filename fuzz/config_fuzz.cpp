// libFuzzer target: the configuration loader on arbitrary YAML text. Beyond
// "no crash, no sanitizer report, no exception escaping":
//   - a refused text carries at least one error, each with a reason and the
//     source name it was given;
//   - an accepted Config holds at least one model; every model has a name, at
//     least one backend, every backend 1..1024 ranks and a host, and
//     replica_count() is the sum of those ranks (so >= 1);
//   - every model name and alias finds its own model (names are unique).
//
// Built by fuzz/CMakeLists.txt (see fuzz/README.md); by hand:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
//     fuzz/config_fuzz.cpp src/config/*.cpp src/common/*.cpp \
//     -lyaml-cpp -lfmt -o build/fuzz/config_fuzz
//   build/fuzz/config_fuzz -max_total_time=60 -max_len=8192 CORPUS
// Seeds: fuzz/corpus/config (docs/lmwarden.example.yaml and small variants).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config/config.h"
#include "config/config_loader.h"

using namespace lmwarden::config;

namespace {

constexpr std::string_view kSource = "fuzz.yaml";

void check_config(const Config& config) {
  if (config.models.empty()) std::abort();
  for (const ModelConfig& model : config.models) {
    if (model.name.empty() || model.backends.empty()) std::abort();
    long ranks = 0;
    for (const BackendConfig& b : model.backends) {
      if (b.data_parallel_size < 1 || b.data_parallel_size > 1024) std::abort();
      if (b.host.empty() || b.url.empty()) std::abort();
      ranks += b.data_parallel_size;
    }
    if (model.replica_count() < 1 || model.replica_count() != ranks) std::abort();
    if (model.effective_spill_threshold() < 1) std::abort();
    if (config.find_model(model.name) != &model) std::abort();
    for (const auto& alias : model.aliases)
      if (alias.empty() || config.find_model(alias) != &model) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ConfigResult result = load_config_string(text, kSource);
  if (result) {
    check_config(*result);
  } else {
    const ConfigErrors& errors = result.error();
    if (errors.errors.empty()) std::abort();
    for (const ConfigError& e : errors.errors)
      if (e.reason.empty() || e.file != kSource) std::abort();
    (void)errors.message();
  }
  return 0;
}
