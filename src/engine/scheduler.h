// Continuous batching after vLLM V1's Scheduler (FCFS policy).
//
// Each step has a token budget (max_num_batched_tokens). Running requests are
// served first, in admission order: a decoding request takes one token, a
// request in (chunked) prefill takes as much of its remaining prompt as the
// budget allows. When the KV cache cannot hold a running request's next
// tokens, the newest running request is preempted — its blocks are freed and
// it goes back to the head of the waiting queue to be recomputed later (its
// own freed blocks often still serve it from the prefix cache) — until the
// request fits or is itself the one preempted. Only when no request was
// preempted this step are waiting requests admitted, in arrival order, while
// there is budget, a free sequence slot (max_num_seqs) and room in the cache;
// an admitted request starts after its cached prefix.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/request_state.h"
#include "engine/step_time_model.h"

namespace lmwarden::engine {

struct SchedulerConfig {
  std::int32_t max_num_seqs = 256;
  std::int32_t max_num_batched_tokens = 2048;
};

struct ScheduledRequest {
  RequestState* request = nullptr;
  std::int32_t num_tokens = 0;  // tokens computed for it this step
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;
  std::vector<RequestState*> preempted;
  // Requests admitted from the waiting queue this step (already in scheduled).
  std::vector<RequestState*> admitted;
  BatchShape shape;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv);

  void add(RequestState* req);
  // Takes a finished or aborted request out of the queues and frees its blocks.
  void remove(RequestState* req) noexcept;

  // Chooses the next step's batch and reserves its KV slots. The caller runs
  // the step and advances num_computed_tokens of each scheduled request.
  SchedulerOutput schedule();

  std::int32_t num_running() const noexcept { return static_cast<std::int32_t>(running_.size()); }
  std::int32_t num_waiting() const noexcept { return static_cast<std::int32_t>(waiting_.size()); }
  bool has_requests() const noexcept { return !running_.empty() || !waiting_.empty(); }
  const std::vector<RequestState*>& running() const noexcept { return running_; }
  const std::deque<RequestState*>& waiting() const noexcept { return waiting_; }

 private:
  void preempt(RequestState* req, SchedulerOutput& out);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::vector<RequestState*> running_;  // admission order; back() is the newest
  std::deque<RequestState*> waiting_;   // arrival order; preempted ones go to the front
  std::uint64_t next_admission_ = 0;
};

}  // namespace lmwarden::engine
