// When the relay looks for a reply right after its turn comes back: while
// looks find replies, always; after misses in a row, only now and then.
#include <gtest/gtest.h>

#include "proxy/reply_look.h"

namespace lmwarden::proxy {
namespace {

// Runs `requests` requests whose replies are there at the look when
// `ready(i)` says so; returns how many looks missed.
template <class Ready>
int misses_over(ReplyLook& look, int requests, Ready ready) {
  int misses = 0;
  for (int i = 0; i < requests; ++i) {
    if (!look.wanted()) continue;
    const bool found = ready(i);
    misses += found ? 0 : 1;
    look.record(found);
  }
  return misses;
}

TEST(ReplyLook, LooksEveryTimeWhileLooksFindReplies) {
  ReplyLook look;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(look.wanted()) << "request " << i;
    look.record(true);
  }
}

TEST(ReplyLook, FewerMissesInARowThanAPauseNeedsDoNotPause) {
  ReplyLook look;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(look.wanted()) << "request " << i;
    look.record(i % ReplyLook::kMissesToPause == 0);  // kMissesToPause - 1 misses, then a find
  }
}

TEST(ReplyLook, MissesInARowPauseLookingThenOneLookProbes) {
  ReplyLook look;
  for (int i = 0; i < ReplyLook::kMissesToPause; ++i) {
    ASSERT_TRUE(look.wanted());
    look.record(false);
  }
  for (int i = 0; i < ReplyLook::kPause; ++i) EXPECT_FALSE(look.wanted()) << "paused request " << i;
  EXPECT_TRUE(look.wanted()) << "the request after the pause looks again";
  look.record(false);
  for (int i = 0; i < ReplyLook::kPause; ++i)
    EXPECT_FALSE(look.wanted()) << "one more miss pauses again";
  EXPECT_TRUE(look.wanted());
}

TEST(ReplyLook, AFindAfterThePauseRestoresLooking) {
  ReplyLook look;
  for (int i = 0; i < ReplyLook::kMissesToPause; ++i) look.record(false);
  for (int i = 0; i < ReplyLook::kPause; ++i) look.wanted();
  ASSERT_TRUE(look.wanted());
  look.record(true);
  look.record(false);  // one miss after a find: still looking
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(look.wanted()) << "request " << i;
    look.record(true);
  }
}

TEST(ReplyLook, ServersThatAreNeverReadyCostAboutOneMissPerPause) {
  ReplyLook look;
  const int requests = 1600;
  const int misses = misses_over(look, requests, [](int) { return false; });
  // Looking every time would miss 1600 times; paused, about one request in
  // kPause + 1 looks.
  EXPECT_LE(misses, requests / ReplyLook::kPause + ReplyLook::kMissesToPause);
  EXPECT_GE(misses, requests / (ReplyLook::kPause + 1));
}

}  // namespace
}  // namespace lmwarden::proxy
