#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>

namespace lmwarden::engine {

Scheduler::Scheduler(SchedulerConfig config, KvCacheManager& kv) : config_(config), kv_(kv) {}

void Scheduler::add(RequestState* req) {
  req->status = RequestStatus::kWaiting;
  waiting_.push_back(req);
}

void Scheduler::remove(RequestState* req) noexcept {
  if (auto it = std::find(running_.begin(), running_.end(), req); it != running_.end()) {
    running_.erase(it);
  } else if (auto wit = std::find(waiting_.begin(), waiting_.end(), req); wit != waiting_.end()) {
    waiting_.erase(wit);
  }
  kv_.free(*req);
}

void Scheduler::preempt(RequestState* req, SchedulerOutput& out) {
  kv_.free(*req);
  req->status = RequestStatus::kPreempted;
  req->num_computed_tokens = 0;
  ++req->num_preemptions;
  waiting_.push_front(req);
  out.preempted.push_back(req);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  std::int32_t budget = config_.max_num_batched_tokens;

  auto account = [&](RequestState* req, std::int32_t n) {
    out.scheduled.push_back({req, n});
    budget -= n;
    ++out.shape.num_seqs;
    if (n == 1) {
      // One token after a computed context: a decode, reading that context.
      out.shape.decode_context_tokens += req->num_computed_tokens + 1;
    } else {
      out.shape.prefill_tokens += n;
    }
  };

  // 1. Running requests, oldest first.
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    RequestState* req = running_[i];
    const std::int32_t n = std::min(req->num_tokens() - req->num_computed_tokens, budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool fits = true;
    while (!kv_.allocate_slots(*req, n, nullptr)) {
      RequestState* victim = running_.back();
      running_.pop_back();
      preempt(victim, out);
      if (victim == req) {
        fits = false;
        break;
      }
    }
    if (!fits) break;
    account(req, n);
    ++i;
  }

  // 2. Waiting requests, only if nothing had to be preempted.
  if (out.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 &&
           static_cast<std::int32_t>(running_.size()) < config_.max_num_seqs) {
      RequestState* req = waiting_.front();
      assert(req->num_computed_tokens == 0);
      const KvCacheManager::PrefixHit hit = kv_.find_cached_prefix(*req);
      const std::int32_t n = std::min(req->num_tokens() - hit.num_tokens, budget);
      if (!kv_.allocate_slots(*req, n, &hit)) break;
      waiting_.pop_front();
      req->status = RequestStatus::kRunning;
      req->num_computed_tokens = hit.num_tokens;
      req->admission_seq = next_admission_++;
      if (req->num_cached_tokens < 0) req->num_cached_tokens = hit.num_tokens;
      running_.push_back(req);
      out.admitted.push_back(req);
      account(req, n);
    }
  }
  return out;
}

}  // namespace lmwarden::engine
