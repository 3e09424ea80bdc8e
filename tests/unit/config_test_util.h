// Helpers shared by the configuration's tests (config_*_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "config/config_loader.h"

namespace lmwarden::config {

inline Config load_ok(std::string_view yaml) {
  auto result = load_config_string(yaml, "test.yaml");
  EXPECT_TRUE(result.has_value()) << (result ? "" : result.error().message());
  return result ? std::move(result).value() : Config{};
}

// The single error message the text produces (fails if not exactly one).
inline std::string error_of(std::string_view yaml) {
  auto result = load_config_string(yaml, "lmwarden.yaml");
  if (result) {
    ADD_FAILURE() << "expected an error for:\n" << yaml;
    return {};
  }
  EXPECT_EQ(result.error().errors.size(), 1u) << result.error().message();
  return result.error().errors.front().message();
}

// A valid model block to build invalid files around.
inline constexpr std::string_view kMinimal = R"(
models:
  - name: m
    backends:
      - url: http://127.0.0.1:8000
)";

}  // namespace lmwarden::config
