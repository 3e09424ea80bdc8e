// Conversation identity on each real client capture: bytes scanned per second
// and time per request. Three ways in, as the proxy can call them:
//   extract      extract_request_facts(): builds the field trie, scans, resolves
//   scan+resolve scan_body() with a trie built once, then resolve_identity()
//   copied       as scan+resolve, but the body has no padding after it, so the
//                scanner copies it into a padded buffer first
//   opening      as scan+resolve with the `opening` source alone: the system
//                prompt and the messages up to the first user one read and hashed
#include <benchmark/benchmark.h>
#include <simdjson.h>

#include <memory>
#include <string>
#include <vector>

#include "core/identity.h"
#include "fixtures.h"

namespace lmwarden::bench {
namespace {

const std::vector<std::string> kFixtures = {
    "claude-code-2.1.332_messages_turn2.json",
    "claude-code-1.0.128_messages_legacy-user_id.json",
    "codex-0.171.0_responses_tool-followup.json",
    "codex-0.63.0_responses_legacy-headers.json",
    "codex-0.63.0_chat-completions.json",
    "claude-code-2.1.332_messages_title-sidecall.json",
};

struct Loaded {
  CapturedRequest request;
  std::string padded;  // body with simdjson padding readable after it
};

std::shared_ptr<Loaded> load(const std::string& file) {
  auto l = std::make_shared<Loaded>();
  l->request = load_client_fixture(file);
  l->request.headers.clear();
  for (const auto& [name, value] : l->request.header_storage)
    l->request.headers.emplace_back(name, value);
  l->padded = l->request.body;
  l->padded.reserve(l->padded.size() + simdjson::SIMDJSON_PADDING);
  return l;
}

void extract(benchmark::State& state, std::shared_ptr<Loaded> l) {
  const core::IdentityOptions options;
  for (auto _ : state) {
    auto result =
        core::extract_request_facts(l->request.headers, l->padded, l->padded.capacity(), options);
    benchmark::DoNotOptimize(result.facts.identity.session_hash);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * l->padded.size()));
  state.counters["body_bytes"] = static_cast<double>(l->padded.size());
}

void scan_resolve(benchmark::State& state, std::shared_ptr<Loaded> l, bool in_place, bool opening) {
  core::IdentityOptions options;
  if (opening) options.sources = {config::SessionSource{config::SessionSource::Kind::kOpening, ""}};
  const core::BodyFields fields(options.sources);
  for (auto _ : state) {
    const core::BodyScan scan =
        core::scan_body(l->padded, in_place ? l->padded.capacity() : 0, fields);
    auto identity = core::resolve_identity(l->request.headers, scan, fields, options);
    benchmark::DoNotOptimize(identity.session_hash);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * l->padded.size()));
  state.counters["body_bytes"] = static_cast<double>(l->padded.size());
}

// The Claude Code turn grown to 100 KB with filler text in its last user
// message, as bench/proxy/prepare_cases.py sends it (a longer conversation).
std::shared_ptr<Loaded> load_100k() {
  auto l = load(kFixtures.front());
  auto body = nlohmann::ordered_json::parse(l->request.body);
  auto& last = body["messages"].back();
  if (last["content"].is_string())
    last["content"] =
        nlohmann::ordered_json::array({{{"type", "text"}, {"text", last["content"]}}});
  last["content"].push_back({{"type", "text"}, {"text", ""}});
  const std::size_t grow = 100 * 1024 - body.dump().size();
  std::string filler;
  while (filler.size() < grow) filler += "lorem ipsum dolor sit amet consectetur adipiscing elit ";
  filler.resize(grow);
  last["content"].back()["text"] = filler;
  l->request.body = body.dump();
  l->padded = l->request.body;
  l->padded.reserve(l->padded.size() + simdjson::SIMDJSON_PADDING);
  return l;
}

const bool registered = [] {
  std::vector<std::pair<std::string, std::shared_ptr<Loaded>>> inputs;
  inputs.emplace_back("claude-code-2.1.332_turn2_grown_to_100KB", load_100k());
  for (const auto& file : kFixtures)
    inputs.emplace_back(file.substr(0, file.size() - 5), load(file));
  for (const auto& [name, l] : inputs) {
    benchmark::RegisterBenchmark(("identity/extract/" + name).c_str(), extract, l)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("identity/scan+resolve/" + name).c_str(), scan_resolve, l, true,
                                 false)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("identity/copied/" + name).c_str(), scan_resolve, l, false, false)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("identity/opening/" + name).c_str(), scan_resolve, l, true, true)
        ->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace
}  // namespace lmwarden::bench
