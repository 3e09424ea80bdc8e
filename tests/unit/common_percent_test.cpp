#include <gtest/gtest.h>

#include "common/percent.h"

namespace lmwarden {
namespace {

// As Python's urllib.parse.unquote and unquote_plus read them.
TEST(PercentDecoded, ReadsEscapesAsPythonDoes) {
  EXPECT_EQ(percent_decoded("resp%5f1"), "resp_1");
  EXPECT_EQ(percent_decoded("a%2Fb%2fc"), "a/b/c");
  EXPECT_EQ(percent_decoded("%E2%82%AC"), "\xE2\x82\xAC");
  // A `%` without two hex digits after it stays.
  EXPECT_EQ(percent_decoded("100%"), "100%");
  EXPECT_EQ(percent_decoded("%4"), "%4");
  EXPECT_EQ(percent_decoded("%zz%41"), "%zzA");
  EXPECT_EQ(percent_decoded("a+b"), "a+b");
  EXPECT_EQ(percent_decoded("a+b%2B", /*plus_is_space=*/true), "a b+");
  EXPECT_EQ(percent_decoded(""), "");
}

}  // namespace
}  // namespace lmwarden
