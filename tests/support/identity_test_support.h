// Helpers of the identity tests (tests/unit/core_identity_test.cpp: the clients' captures
// and the sources; core_body_scan_test.cpp: the body scan): the captures in
// shared/fixtures/clients as requests, and the checks both files make.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/hash.h"
#include "core/identity.h"

namespace lmwarden::core::identity_test {

using config::SessionSource;
using Json = nlohmann::ordered_json;  // keeps the client's key order when re-serialised

// A captured request: owned header strings, a view list over them, the body bytes.
struct Request {
  std::vector<std::pair<std::string, std::string>> header_storage;
  std::vector<HeaderField> header_views;
  Json body_json;
  std::string body;

  HeaderList headers() {
    header_views.clear();
    for (const auto& [name, value] : header_storage) header_views.emplace_back(name, value);
    return header_views;
  }
  void remove_header(std::string_view name) {
    std::erase_if(header_storage, [&](const auto& h) {
      return h.first.size() == name.size() &&
             std::equal(name.begin(), name.end(), h.first.begin(),
                        [](char a, char b) { return std::tolower(a) == std::tolower(b); });
    });
  }
  void set_header(std::string name, std::string value) {
    remove_header(name);
    header_storage.emplace_back(std::move(name), std::move(value));
  }
  void edit_body(auto&& edit) {
    edit(body_json);
    body = body_json.dump();
  }
};

inline Request load_fixture(const std::string& name) {
  const std::string path = std::string(LMWARDEN_FIXTURES) + "/clients/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  const Json capture = Json::parse(in);
  Request request;
  for (const auto& pair : capture.at("headers"))
    request.header_storage.emplace_back(pair.at(0).get<std::string>(),
                                        pair.at(1).get<std::string>());
  request.body_json = capture.at("body");
  request.body = request.body_json.dump();
  return request;
}

inline ExtractResult extract(Request& request, const IdentityOptions& options = {}) {
  return extract_request_facts(request.headers(), request.body, request.body.size(), options);
}

inline ExtractResult extract_body(std::string_view body, const IdentityOptions& options = {}) {
  return extract_request_facts({}, body, body.size(), options);
}

inline constexpr const char* kClaudeTurn = "claude-code-2.1.332_messages_turn2.json";
inline constexpr const char* kClaudeTitle = "claude-code-2.1.332_messages_title-sidecall.json";
inline constexpr const char* kClaudeLegacy = "claude-code-1.0.128_messages_legacy-user_id.json";
inline constexpr const char* kCodexCurrent = "codex-0.171.0_responses_tool-followup.json";
inline constexpr const char* kCodexLegacy = "codex-0.63.0_responses_legacy-headers.json";
inline constexpr const char* kCodexChat = "codex-0.63.0_chat-completions.json";

inline constexpr const char* kClaudeTurnSession = "5506220c-1ac0-498d-ad24-592ac04efcdd";
inline constexpr const char* kClaudeTitleSession = "aac6fb29-f611-41aa-beb8-49c2b85e53c9";
inline constexpr const char* kClaudeLegacySession = "1b13bc5e-7ef3-4032-abdb-0b542a53ac77";
inline constexpr const char* kCodexThread = "01a22a54-fd9d-7df1-9e18-855eab7ea70c";
inline constexpr const char* kCodexLegacyThread = "01a22a5a-279b-7831-bf0e-1ec256e16b1f";

// `source`: the label of the source expected to match, among options' sources.
inline void expect_session(const ExtractResult& result, std::string_view id, std::string_view source,
                           const IdentityOptions& options = {}) {
  EXPECT_EQ(result.error, BodyError::kNone) << result.error_detail;
  EXPECT_EQ(result.facts.identity.kind, IdentityKind::kSession);
  EXPECT_EQ(result.facts.session_id, id);
  EXPECT_EQ(result.facts.identity.session_hash, stable_hash(id));
  const int index = result.facts.identity.source;
  ASSERT_GE(index, 0);
  ASSERT_LT(static_cast<std::size_t>(index), options.sources.size());
  EXPECT_EQ(options.sources[static_cast<std::size_t>(index)].label(), source);
}

}  // namespace lmwarden::core::identity_test
