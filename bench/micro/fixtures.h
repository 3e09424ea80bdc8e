// Loading the shared client captures and vLLM /metrics samples for the
// micro-benchmarks. Setup only: nothing here is timed.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/identity.h"

namespace lmwarden::bench {

inline std::string fixture_path(const std::string& relative) {
  return std::string(LMWARDEN_FIXTURES) + "/" + relative;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A captured client request: header strings, views over them, the body bytes
// as the client would send them (compact JSON in the client's key order).
struct CapturedRequest {
  std::vector<std::pair<std::string, std::string>> header_storage;
  std::vector<core::HeaderField> headers;
  std::string body;
};

inline CapturedRequest load_client_fixture(const std::string& file) {
  using Json = nlohmann::ordered_json;
  const Json capture = Json::parse(read_file(fixture_path("clients/" + file)));
  CapturedRequest r;
  for (const auto& pair : capture.at("headers"))
    r.header_storage.emplace_back(pair.at(0).get<std::string>(), pair.at(1).get<std::string>());
  for (const auto& [name, value] : r.header_storage) r.headers.emplace_back(name, value);
  r.body = capture.at("body").dump();
  return r;
}

}  // namespace lmwarden::bench
