// Whether the relay looks for an upstream reply as soon as its turn comes
// back (forward_once): after sending a request it lets the other ready work
// on its I/O thread run, then reads what the socket holds without waiting.
//
// A look that finds the reply saves a trip through the event loop. One that
// finds nothing costs a system call, and the waiting read that follows tries
// the socket once more itself (Asio 1.81 reads before it waits), so a miss
// means two reads that find nothing where one would do. Whether looks find
// replies depends on the servers and the load: a fast local server under
// many connections has answered by then nearly every time; a real engine,
// which takes milliseconds or more to prefill, never has.
//
// So looks are taken while they find replies. After kMissesToPause misses in
// a row the next kPause requests go straight to the waiting read; the
// request after them looks again, and one more miss pauses again, while a
// find restores looking. Plain state for one I/O thread (one per
// UpstreamPool): no locks, no clock.
#pragma once

namespace lmwarden::proxy {

class ReplyLook {
 public:
  static constexpr int kMissesToPause = 3;
  static constexpr int kPause = 15;

  // Whether this request should look; counts down a pause.
  bool wanted() noexcept {
    if (paused_ == 0) return true;
    --paused_;
    return false;
  }

  // What a look found: the reply (or some of it), or nothing.
  void record(bool found) noexcept {
    if (found) {
      misses_ = 0;
      return;
    }
    if (++misses_ < kMissesToPause) return;
    paused_ = kPause;
    misses_ = kMissesToPause - 1;  // a miss by the probe after the pause pauses again
  }

 private:
  int misses_ = 0;  // misses in a row
  int paused_ = 0;  // requests left that skip the look
};

}  // namespace lmwarden::proxy
