#include "engine/engine.h"

#include <algorithm>
#include <span>

#include "engine/output_text.h"

namespace lmwarden::engine {
namespace {

std::uint64_t derive_output_seed(std::uint64_t seed, std::span<const TokenId> prompt) noexcept {
  std::uint64_t h = seed ^ 0x243f6a8885a308d3ull;
  for (TokenId t : prompt) {
    h ^= t;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

}  // namespace

EngineConfig EngineConfig::from_profile(const HardwareProfile& profile) {
  return EngineConfig{
      .num_gpu_blocks = profile.num_gpu_blocks,
      .block_size = profile.block_size,
      .max_num_seqs = profile.max_num_seqs,
      .max_num_batched_tokens = profile.max_num_batched_tokens,
      .max_model_len = profile.max_model_len,
      .step_time = profile.step_time,
  };
}

std::optional<std::string> cache_shortfall(const EngineConfig& config) {
  const std::int64_t holds = static_cast<std::int64_t>(config.num_gpu_blocks) * config.block_size;
  if (holds >= config.max_model_len) return std::nullopt;
  const std::int64_t needed = (config.max_model_len + config.block_size - 1) / config.block_size;
  return "the KV cache would hold " + std::to_string(holds) + " tokens (" +
         std::to_string(config.num_gpu_blocks) + " blocks of " + std::to_string(config.block_size) +
         "), fewer than max_model_len " + std::to_string(config.max_model_len) +
         ", and vLLM refuses to start so: give at least " + std::to_string(needed) + " blocks";
}

Engine::Engine(EngineConfig config)
    : config_(config),
      // A request that could never fit the whole cache would preempt everything
      // forever; vLLM refuses to start in that case, the model caps the window.
      context_limit_(std::min(config.max_model_len, config.num_gpu_blocks * config.block_size)),
      kv_(config.num_gpu_blocks, config.block_size, config.enable_prefix_caching),
      scheduler_({.max_num_seqs = config.max_num_seqs,
                  .max_num_batched_tokens = config.max_num_batched_tokens},
                 kv_) {}

AddResult Engine::add_request(NewRequest request, Seconds now) {
  AddResult result;
  result.prompt_tokens = static_cast<std::int32_t>(request.prompt.size());
  if (request.prompt.empty()) {
    result.status = AddStatus::kEmptyPrompt;
    return result;
  }
  if (result.prompt_tokens >= context_limit_) {
    result.status = AddStatus::kPromptTooLong;
    return result;
  }
  if (requests_.contains(request.id)) {
    result.status = AddStatus::kDuplicateId;
    return result;
  }
  const std::int32_t room = context_limit_ - result.prompt_tokens;
  result.max_tokens = request.max_tokens > 0 ? std::min(request.max_tokens, room) : room;

  auto state = std::make_unique<RequestState>();
  state->id = request.id;
  state->output_seed =
      request.output_seed.value_or(derive_output_seed(config_.seed, request.prompt));
  const OutputPlan plan =
      plan_output(state->output_seed, result.max_tokens, config_.early_stop_probability);
  state->target_output_tokens = plan.num_tokens;
  state->finish = plan.finish;
  state->num_prompt_tokens = result.prompt_tokens;
  state->tokens = std::move(request.prompt);
  state->tokens.reserve(state->tokens.size() + static_cast<std::size_t>(plan.num_tokens));
  state->arrival_time = now;

  RequestState* raw = state.get();
  requests_.emplace(raw->id, std::move(state));
  scheduler_.add(raw);
  return result;
}

bool Engine::abort_request(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  scheduler_.remove(it->second.get());
  ++counters_.finished[static_cast<std::size_t>(FinishReason::kAbort)];
  requests_.erase(it);
  return true;
}

const RequestState* Engine::find(RequestId id) const noexcept {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

StepResult Engine::step(Seconds now) {
  StepResult result;
  result.start = now;
  SchedulerOutput batch = scheduler_.schedule();

  counters_.num_preemptions += batch.preempted.size();
  for (const RequestState* req : batch.preempted) result.preempted.push_back(req->id);
  // vLLM looks a prompt up, and counts the lookup, only with prefix caching
  // on: off, its queries stay 0 and the hit rate has no data.
  for (const RequestState* req : batch.admitted) {
    if (req->num_preemptions == 0 && config_.enable_prefix_caching) {
      counters_.prefix_cache_queries += static_cast<std::uint64_t>(req->num_prompt_tokens);
      counters_.prefix_cache_hits += static_cast<std::uint64_t>(req->num_cached_tokens);
    }
  }
  result.shape = batch.shape;
  if (batch.scheduled.empty()) return result;

  result.duration = config_.step_time.step_time(batch.shape);
  const Seconds end = now + result.duration;
  ++counters_.num_steps;
  counters_.busy_time += result.duration;

  std::vector<RequestState*> finished;
  for (const ScheduledRequest& s : batch.scheduled) {
    RequestState& req = *s.request;
    result.num_scheduled_tokens += s.num_tokens;
    req.num_computed_tokens += s.num_tokens;
    // Still inside its prompt (a chunk of a longer prefill): no token yet.
    if (req.num_computed_tokens < req.num_tokens()) continue;

    const std::int32_t index = req.num_output_tokens();
    const TokenId token = output_token(req.output_seed, index);
    req.tokens.push_back(token);
    ++counters_.generation_tokens;
    if (index == 0) {
      req.first_token_time = end;
      counters_.time_to_first_token.observe(end - req.arrival_time);
      counters_.prompt_tokens += static_cast<std::uint64_t>(req.num_prompt_tokens);
    }
    TokenOutput out{.id = req.id,
                    .token = token,
                    .index = index,
                    .num_prompt_tokens = req.num_prompt_tokens,
                    .num_cached_tokens = std::max(req.num_cached_tokens, 0)};
    if (index + 1 >= req.target_output_tokens) {
      out.finished = req.finish;
      finished.push_back(&req);
    }
    result.outputs.push_back(out);
  }

  for (RequestState* req : finished) {
    scheduler_.remove(req);
    ++counters_.finished[static_cast<std::size_t>(req->finish)];
    requests_.erase(req->id);
  }
  return result;
}

}  // namespace lmwarden::engine
