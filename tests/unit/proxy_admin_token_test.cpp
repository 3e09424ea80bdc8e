// The admin token from its environment variable, and what the log says when
// the variable gives none: not set, empty, or a value no client could send.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "config/config.h"
#include "proxy/api.h"

namespace lmwarden::proxy {
namespace {

constexpr const char* kVariable = "LMWARDEN_TEST_ADMIN_TOKEN_VALUE";

std::string off_because(const char* value) {
  if (value) {
    ::setenv(kVariable, value, 1);
  } else {
    ::unsetenv(kVariable);
  }
  config::Config config;
  config.admin_token_env = kVariable;
  EXPECT_FALSE(admin_token(config).has_value()) << (value ? value : "(unset)");
  const std::string said = run_time_control(config);
  ::unsetenv(kVariable);
  const std::string prefix =
      "run-time control (PATCH /api/models/NAME, the dashboard's controls) is off: ";
  EXPECT_TRUE(said.starts_with(prefix)) << said;
  return said.substr(prefix.size());
}

TEST(AdminToken, AVariableThatGivesNoUsableTokenIsNamedWithWhy) {
  EXPECT_EQ(off_because(nullptr),
            "the environment variable LMWARDEN_TEST_ADMIN_TOKEN_VALUE is not set");
  EXPECT_EQ(off_because(""), "the environment variable LMWARDEN_TEST_ADMIN_TOKEN_VALUE is empty");
  for (const char* spaced : {" s3cret", "s3cret ", "s3cret\t", "s3cret\r", "\ns3cret", " "})
    EXPECT_EQ(off_because(spaced),
              "the environment variable LMWARDEN_TEST_ADMIN_TOKEN_VALUE begins or ends with "
              "white space, which no Authorization header can carry");
  // Inside, a line break or another control character (a tab is allowed).
  for (const char* inner : {"ab\ncd",
                            "ab\x01"
                            "cd",
                            "ab\x7f"
                            "cd",
                            "ab\r\nX-Other: 1"})
    EXPECT_EQ(off_because(inner),
              "the environment variable LMWARDEN_TEST_ADMIN_TOKEN_VALUE holds a control "
              "character, which no Authorization header can carry");
}

TEST(AdminToken, ATokenWithSpacesInsideIsUsedAsItIs) {
  ::setenv(kVariable, "s3cret with spaces", 1);
  config::Config config;
  config.admin_token_env = kVariable;
  EXPECT_EQ(admin_token(config), "s3cret with spaces");
  ::setenv(kVariable, "s3cret\twith a tab", 1);
  EXPECT_EQ(admin_token(config), "s3cret\twith a tab");
  ::unsetenv(kVariable);
}

TEST(AdminToken, BearerCredentialsTakeTheSchemeInAnyCaseAndSpacesAfterIt) {
  EXPECT_EQ(bearer_credentials("Bearer k1"), "k1");
  EXPECT_EQ(bearer_credentials("bEARER k1"), "k1");
  EXPECT_EQ(bearer_credentials("Bearer   k1"), "k1");
  EXPECT_EQ(bearer_credentials("Bearer "), "");
  EXPECT_EQ(bearer_credentials("Basic k1"), std::nullopt);
  EXPECT_EQ(bearer_credentials("Bearerk1"), std::nullopt);
  EXPECT_EQ(bearer_credentials(""), std::nullopt);
}

}  // namespace
}  // namespace lmwarden::proxy
