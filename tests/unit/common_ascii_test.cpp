#include <gtest/gtest.h>

#include "common/ascii.h"

namespace lmwarden {
namespace {

// Only A–Z fold: bytes past 0x7f (UTF-8, Latin-1) and the characters next
// to the letters ('@', '[', '`', '{') stay as they are, whatever the locale.
TEST(Ascii, FoldsOnlyTheAsciiLetters) {
  EXPECT_EQ(ascii_lowercase("Session-ID"), "session-id");
  EXPECT_EQ(ascii_lowercase("@AZ[`az{"), "@az[`az{");
  EXPECT_EQ(ascii_lowercase("\xC3\x89T\xC9"), "\xC3\x89t\xC9");
  EXPECT_EQ(ascii_lowercase(""), "");

  EXPECT_TRUE(ascii_iequals("X-Claude-Code-Session-Id", "x-claude-code-session-id"));
  EXPECT_FALSE(ascii_iequals("keep-alive", "keep-alive "));
  EXPECT_FALSE(ascii_iequals("@", "`"));  // 0x40 and 0x60 differ by the case bit alone
  EXPECT_FALSE(ascii_iequals("\xC9", "\xE9"));
  static_assert(ascii_iequals("TRUE", "true"));

  EXPECT_TRUE(ascii_istarts_with("REDISS://host", "rediss://"));
  EXPECT_FALSE(ascii_istarts_with("redis://host", "rediss://"));
  EXPECT_FALSE(ascii_istarts_with("redi", "redis://"));
}

}  // namespace
}  // namespace lmwarden
