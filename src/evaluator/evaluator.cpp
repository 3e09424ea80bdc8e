#include "evaluator/evaluator.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <queue>
#include <unordered_map>

#include "common/hash.h"
#include "engine/chat_template.h"
#include "engine/engine.h"
#include "engine/hardware_profile.h"
#include "engine/output_text.h"
#include "engine/tokenizer.h"
#include "evaluator/policy.h"
#include "workload/closed_loop.h"

namespace lmwarden::evaluator {
namespace {

using engine::Seconds;

// A request between its arrival and its last token.
struct InFlight {
  int slot = 0;
  Placement placement;
  Seconds arrival = 0;
  std::string reply;
  std::int32_t output_tokens = 0;
};

// One replica: its engine and the step it is running, if any. The step's
// tokens become visible at running->end().
struct Replica {
  std::unique_ptr<engine::Engine> engine;
  std::optional<engine::StepResult> running;
};

class StepRun {
 public:
  StepRun(const EvaluatorConfig& config, const workload::Workload& workload, int sessions,
          const std::string& arm, std::unique_ptr<Policy> policy,
          const engine::EngineConfig& engine_config)
      : config_(config),
        policy_(std::move(policy)),
        loop_(workload, sessions, arm + "/" + std::to_string(sessions)),
        last_replica_(static_cast<std::size_t>(sessions), -1),
        live_(static_cast<std::size_t>(config.replicas)) {
    for (int r = 0; r < config.replicas; ++r) {
      replicas_.push_back({std::make_unique<engine::Engine>(engine_config), std::nullopt});
      result_.samples.replicas.push_back({.replica = r, .preemptions = 0.0, .requests = 0.0});
    }
    result_.sessions = sessions;
    result_.arm = arm;
    result_.policy = policy_->name();
    result_.duration_s = config.step_seconds;
  }

  StepResult run() {
    const Seconds end = config_.step_seconds;
    Seconds now = 0;
    Seconds next_scrape = 0;
    for (int slot = 0; slot < loop_.concurrency(); ++slot) submit(slot, now);
    for (;;) {
      // Every idle engine with work starts a step now.
      for (Replica& r : replicas_) {
        if (r.running || !r.engine->has_unfinished_requests()) continue;
        engine::StepResult step = r.engine->step(now);
        if (!step.idle()) r.running = std::move(step);
      }
      Seconds next = next_scrape;
      for (const Replica& r : replicas_) {
        if (r.running) next = std::min(next, r.running->end());
      }
      if (!pauses_.empty()) next = std::min(next, pauses_.top().first);
      if (next > end) break;
      now = next;
      for (std::size_t r = 0; r < replicas_.size(); ++r) {
        if (replicas_[r].running && replicas_[r].running->end() <= now) deliver(r, now);
      }
      while (!pauses_.empty() && pauses_.top().first <= now) {
        const int slot = pauses_.top().second;
        pauses_.pop();
        submit(slot, now);
      }
      if (now >= next_scrape) {
        scrape(now);
        next_scrape += config_.scrape_interval_s;
      }
    }
    for (std::size_t r = 0; r < replicas_.size(); ++r) {
      const engine::EngineCounters& c = replicas_[r].engine->counters();
      ReplicaStep& out = result_.samples.replicas[r];
      out.prefix_cache_queries = static_cast<double>(c.prefix_cache_queries);
      out.prefix_cache_hits = static_cast<double>(c.prefix_cache_hits);
      out.preemptions = static_cast<double>(c.num_preemptions);
    }
    result_.sessions_completed = loop_.sessions_completed();
    summarize(result_);
    return std::move(result_);
  }

 private:
  std::span<const ReplicaSnapshot> snapshot() {
    for (std::size_t r = 0; r < replicas_.size(); ++r) {
      const engine::Engine& e = *replicas_[r].engine;
      live_[r] = {
          .running = e.num_running(), .waiting = e.num_waiting(), .kv_used = e.kv_cache_usage()};
    }
    return live_;
  }

  void scrape(Seconds now) {
    const auto scraped = snapshot();
    policy_->observe(scraped, now);
    double busy = 0;
    for (std::size_t r = 0; r < scraped.size(); ++r) {
      if (scraped[r].running > 0) {
        busy += 1;
        result_.samples.replicas[r].busy_polls += 1;
      }
    }
    result_.samples.replicas_busy.push_back(busy);
  }

  // The slot's conversation sends its next turn at `now`.
  void submit(int slot, Seconds now) {
    // Sessions given up in a row here: past this many, the slot stays idle
    // (validate() refuses a workload whose every first turn fails).
    constexpr int kMostAbandoned = 64;
    for (int abandoned = 0; abandoned < kMostAbandoned; ++abandoned) {
      const workload::Conversation& c = loop_.conversation(slot);
      const workload::Session& s = c.session();
      const core::Identity identity{.kind = core::IdentityKind::kSession,
                                    .session_hash = stable_hash(s.id)};
      const Placement p =
          policy_->place({.identity = identity, .turn = c.next_turn(), .now = now}, snapshot());
      engine::ChatPrompt prompt{.messages = c.messages()};
      engine::NewRequest request{.id = next_id_++,
                                 .prompt = engine::tokenize(engine::render_chat(prompt)),
                                 .max_tokens = s.max_output_tokens};
      const engine::RequestId id = request.id;
      ++result_.samples.requests_sent;
      const auto added = replicas_[static_cast<std::size_t>(p.replica)].engine->add_request(
          std::move(request), now);
      if (!added.ok()) {
        // The prompt cannot be served (too long for the context): as a client
        // would, give up on this session and start the next.
        ++result_.samples.requests_failed;
        if (result_.samples.first_failure.empty())
          result_.samples.first_failure = fmt::format(
              "a prompt of {} tokens, too long for the replica's context", added.prompt_tokens);
        policy_->finished(p, now);
        loop_.abandon(slot);
        continue;
      }
      auto& slot_last = last_replica_[static_cast<std::size_t>(slot)];
      if (c.next_turn() > 0) {
        ++result_.samples.followups;
        if (slot_last == p.replica) ++result_.samples.followups_stayed;
      }
      slot_last = p.replica;
      *result_.samples.replicas[static_cast<std::size_t>(p.replica)].requests += 1;
      in_flight_.emplace(id, InFlight{.slot = slot, .placement = p, .arrival = now});
      return;
    }
  }

  void deliver(std::size_t r, Seconds now) {
    engine::StepResult step = std::move(*replicas_[r].running);
    replicas_[r].running.reset();
    for (const engine::TokenOutput& out : step.outputs) {
      const auto it = in_flight_.find(out.id);
      if (it == in_flight_.end()) continue;
      InFlight& f = it->second;
      if (out.index == 0) result_.samples.ttfb_s.push_back(now - f.arrival);
      f.reply += engine::output_piece_of(out.token).value_or(std::string_view{});
      ++f.output_tokens;
      result_.output_tokens += 1;
      if (!out.finished) continue;
      policy_->finished(f.placement, now);
      result_.samples.turn_s.push_back(now - f.arrival);
      result_.samples.output_tokens.push_back(f.output_tokens);
      const int slot = f.slot;
      const bool session_done = loop_.complete_turn(slot, std::move(f.reply));
      in_flight_.erase(it);
      if (session_done) {
        last_replica_[static_cast<std::size_t>(slot)] = -1;
        result_.samples.session_end_s.push_back(now);
      }
      const double pause = loop_.pause_before_next(slot);
      if (pause > 0) {
        pauses_.emplace(now + pause, slot);
      } else {
        submit(slot, now);
      }
    }
  }

  const EvaluatorConfig& config_;
  std::unique_ptr<Policy> policy_;
  workload::ClosedLoop loop_;
  std::vector<int> last_replica_;  // per slot: where its previous turn went
  std::vector<Replica> replicas_;
  std::vector<ReplicaSnapshot> live_;
  std::unordered_map<engine::RequestId, InFlight> in_flight_;
  // Slots running a tool before their next turn: (when it is sent, slot),
  // earliest first; ties by slot, so the order never depends on the heap.
  std::priority_queue<std::pair<Seconds, int>, std::vector<std::pair<Seconds, int>>, std::greater<>>
      pauses_;
  engine::RequestId next_id_ = 1;
  StepResult result_;
};

// The replicas' engine: the profile's, with the run's seed and block count.
engine::EngineConfig engine_config_of(const EvaluatorConfig& config,
                                      const engine::HardwareProfile& profile) {
  engine::EngineConfig engine = engine::EngineConfig::from_profile(profile);
  engine.seed = config.workload.seed;
  if (config.num_gpu_blocks > 0) engine.num_gpu_blocks = config.num_gpu_blocks;
  return engine;
}

}  // namespace

std::optional<std::string> EvaluatorConfig::validate() const {
  if (auto e = workload.validate()) return e;
  const engine::HardwareProfile* hardware = engine::find_hardware_profile(profile);
  if (!hardware) return "unknown hardware profile '" + profile + "'";
  if (replicas < 1 || replicas > 64) return std::string("replicas must be in [1, 64]");
  if (steps.empty()) return std::string("no steps");
  for (int s : steps) {
    if (s < 1 || s > 4096) return std::string("sessions per step must be in [1, 4096]");
  }
  if (!(step_seconds > 0)) return std::string("step seconds must be > 0");
  if (repeats < 1 || repeats > kMaxRepeats)
    return fmt::format("repeats must be in [1, {}]", kMaxRepeats);
  if (!(scrape_interval_s > 0)) return std::string("scrape interval must be > 0");
  if (num_gpu_blocks < 0) return std::string("num_gpu_blocks must be >= 1 (0: the profile's)");
  const engine::EngineConfig engine = engine_config_of(*this, *hardware);
  if (auto shortfall = engine::cache_shortfall(engine)) return "--num-gpu-blocks: " + *shortfall;
  // A first turn no replica can take: every session would fail at once.
  const std::int64_t context = std::min<std::int64_t>(
      engine.max_model_len, std::int64_t{engine.num_gpu_blocks} * engine.block_size);
  if (const std::int64_t first =
          std::int64_t{workload.system_prompt_tokens} + workload.first_user_tokens;
      first >= context)
    return fmt::format(
        "--system-tokens {} and --first-user-tokens {} make a first turn of {} tokens, and the "
        "replicas' context is {} (profile {}): no session could start",
        workload.system_prompt_tokens, workload.first_user_tokens, first, context, profile);
  if (arms.empty()) return std::string("no arms");
  for (const auto& arm : arms) {
    auto p = make_policy(arm, replicas);
    if (!p) return p.error();
  }
  return std::nullopt;
}

Result<StepResult, std::string> run_step(const EvaluatorConfig& config,
                                         const workload::Workload& workload, int sessions,
                                         const std::string& arm) {
  const engine::HardwareProfile* profile = engine::find_hardware_profile(config.profile);
  if (!profile) return unexpected("unknown hardware profile '" + config.profile + "'");
  auto policy = make_policy(arm, config.replicas);
  if (!policy) return unexpected(policy.error());
  return run_step(config, workload, sessions, arm, std::move(policy).value());
}

Result<StepResult, std::string> run_step(const EvaluatorConfig& config,
                                         const workload::Workload& workload, int sessions,
                                         const std::string& arm, std::unique_ptr<Policy> policy) {
  const engine::HardwareProfile* profile = engine::find_hardware_profile(config.profile);
  if (!profile) return unexpected("unknown hardware profile '" + config.profile + "'");
  if (!policy) return unexpected(std::string("no policy"));
  if (sessions < 1) return unexpected(std::string("sessions must be >= 1"));
  StepRun run(config, workload, sessions, arm, std::move(policy),
              engine_config_of(config, *profile));
  return run.run();
}

Result<std::vector<StepResult>, std::string> run_offline(
    const EvaluatorConfig& config, const std::function<void(const StepResult&)>& on_step) {
  if (auto error = config.validate()) return unexpected(*error);
  // One configuration per seed; the engines draw from it too. A seed's
  // workload (its system prompt's text) is made for each run and dropped
  // after it, so that many repeats of a long prompt never hold them all:
  // making one is a small part of a run.
  std::vector<EvaluatorConfig> runs(static_cast<std::size_t>(config.repeats), config);
  for (std::size_t r = 0; r < runs.size(); ++r) runs[r].workload.seed = config.workload.seed + r;
  std::vector<StepResult> results;
  for (int sessions : config.steps) {
    for (const auto& arm : config.arms) {
      std::optional<StepResult> cell;
      for (std::size_t r = 0; r < runs.size(); ++r) {
        const workload::Workload workload(runs[r].workload);
        auto step = run_step(runs[r], workload, sessions, arm);
        if (!step) return unexpected(step.error());
        if (cell) {
          pool(*cell, *step);
        } else {
          cell = std::move(step).value();
        }
      }
      if (on_step) on_step(*cell);
      results.push_back(std::move(*cell));
    }
  }
  return results;
}

}  // namespace lmwarden::evaluator
