// All of the online benchmark's I/O: one io_context on the calling thread,
// Beast coroutines for the session slots, the metrics poller and the control
// calls. Nothing here decides what a number means; that is summarize()'s.
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <exception>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/online.h"
#include "bench/stream_tap.h"
#include "bench/warden_calls.h"
#include "common/exception_text.h"
#include "net/http_client.h"
#include "telemetry/counter_delta.h"
#include "telemetry/vllm_snapshot.h"
#include "workload/closed_loop.h"

namespace lmwarden::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Of a refused request's body, what is kept to say why.
constexpr std::size_t kErrorBodyKept = 4096;

// What the run shares with its steps: a signal's request to stop.
struct RunState {
  int signal = 0;  // the first that came; 0 while none has
  bool cancelled() const { return signal != 0; }
};

// One step × arm.
class StepRunner {
 public:
  StepRunner(const OnlineOptions& o, const RunState& state, const workload::Workload& w,
             const Endpoint& warden, const std::vector<Endpoint>& backends,
             const std::vector<std::string>& model_names, int sessions, const std::string& arm,
             std::uint64_t first_index)
      : o_(o),
        model_names_(model_names),
        state_(state),
        warden_(warden),
        backends_(backends),
        loop_(w, sessions, o.run_id + "/" + arm + "/" + std::to_string(sessions), first_index),
        slots_(static_cast<std::size_t>(sessions)) {
    result_.sessions = sessions;
    result_.arm = arm;
    result_.duration_s = o.step_seconds;
    result_.policy = arm == "off" ? "vllm (warden affinity off)"
                                  : "warden (" + ModelSettings::of_arm(arm).describe() + ")";
  }

  std::function<void(const Progress&)> on_progress;
  Progress progress;

  net::Awaitable<Result<evaluator::StepResult, std::string>> run() {
    auto ex = co_await asio::this_coro::executor;
    const bool affinity = result_.arm != "off";
    if (auto err = co_await switch_arm()) co_return unexpected(*err);
    std::optional<std::pair<double, double>> counters_before;
    if (affinity) {
      auto c = co_await warden_counters();
      if (!c) co_return unexpected(c.error());
      counters_before = *c;
    }
    // Baseline of every rank's counters: only increases after it count.
    if (auto err = co_await poll(/*record=*/false)) co_return unexpected(*err);

    start_ = Clock::now();
    const auto wall = std::chrono::duration<double>(o_.step_seconds / o_.time_scale);
    deadline_ = start_ + std::chrono::duration_cast<Clock::duration>(wall);
    for (int s = 0; s < loop_.concurrency(); ++s) {
      ++running_slots_;
      // Counted out once its frame is gone, returned or thrown: a slot that
      // threw (std::bad_alloc) ends the step with what it said, rather than
      // leaving the wait below to count on it for ever, and leaves no
      // pointer to its stream or timer for the stop below. The handler runs
      // at once after the frame goes (Asio dispatches it there, and posts
      // first only for a slot that never waited, which never set one). A
      // frame destroyed with the io_context (a second signal) never calls it,
      // so nothing here touches this runner, gone by then.
      asio::co_spawn(ex, run_slot(s), [this, s](std::exception_ptr e) {
        slots_[static_cast<std::size_t>(s)] = {};
        --running_slots_;
        if (e && !slot_failure_) slot_failure_ = exception_text(e);
      });
    }
    const auto poll_every = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::max(0.02, o_.poll_interval_s / o_.time_scale)));
    net::Timer timer(ex);
    auto next_poll = start_ + poll_every;
    std::optional<std::string> gave_up;
    while (Clock::now() < deadline_ && !state_.cancelled() && !gave_up) {
      timer.expires_at(std::min(next_poll, deadline_));
      co_await timer.async_wait(net::kAsTuple);
      if (Clock::now() >= next_poll) {
        next_poll += poll_every;
        if (auto err = co_await poll(/*record=*/true)) gave_up = std::move(err);
        report_progress();
      }
      if (!gave_up) gave_up = connects_failing();
      if (!gave_up && slot_failure_) gave_up = "a session slot failed: " + *slot_failure_;
    }
    // Stop: close every connection and wake every pausing slot.
    stopping_ = true;
    for (auto& slot : slots_) {
      if (slot.stream) {
        beast::error_code ec;
        slot.stream->socket().cancel(ec);
        slot.stream->socket().close(ec);
      }
      if (slot.timer) slot.timer->cancel();
    }
    while (running_slots_ > 0) {
      timer.expires_after(std::chrono::milliseconds(5));
      co_await timer.async_wait(net::kAsTuple);
    }
    if (state_.cancelled()) co_return unexpected(std::string("interrupted"));
    if (gave_up) co_return unexpected(*gave_up);
    if (auto err = co_await poll(/*record=*/false)) co_return unexpected(*err);
    for (auto& [key, counters] : ranks_) {
      auto& r = replica(key);
      r.prefix_cache_queries = counters.totals().prefix_cache_queries;
      r.prefix_cache_hits = counters.totals().prefix_cache_hits;
    }
    if (affinity) {
      auto after = co_await warden_counters();
      if (!after) co_return unexpected(after.error());
      result_.samples.warden_sticky = after->first - counters_before->first;
      result_.samples.warden_moved = after->second - counters_before->second;
    }
    result_.sessions_completed = loop_.sessions_completed();
    evaluator::summarize(result_);
    co_return result_;
  }

  std::uint64_t sessions_started() const { return loop_.sessions_started(); }

 private:
  struct Slot {
    net::Stream* stream = nullptr;  // while a request is open
    net::Timer* timer = nullptr;    // while pausing
  };

  double simulated_since(Clock::time_point t) const {
    return std::chrono::duration<double>(Clock::now() - t).count() * o_.time_scale;
  }

  net::Awaitable<std::optional<std::string>> switch_arm() {
    // Without a token the warden is already at the arm (run_steps checked).
    if (!o_.admin_token) co_return std::nullopt;
    auto r = co_await fetch(warden_, http::verb::patch, "/api/models/" + o_.model,
                            ModelSettings::of_arm(result_.arm).patch().dump(), o_.admin_token);
    if (!r) co_return "cannot switch the warden to the arm: " + r.error();
    if (r->status != 200)
      co_return fmt::format("PATCH /api/models/{}: HTTP {}: {}", o_.model, r->status, r->body);
    co_return std::nullopt;
  }

  // (sticky, spilled_in + rehomed) summed over the model's replicas.
  net::Awaitable<Result<std::pair<double, double>, std::string>> warden_counters() {
    auto r = co_await fetch(warden_, http::verb::get, "/api/models/" + o_.model);
    if (!r) co_return unexpected(r.error());
    const json j = json::parse(r->body, nullptr, false);
    if (r->status != 200 || !j.is_object() || !j.contains("replicas"))
      co_return unexpected(fmt::format("GET /api/models/{}: HTTP {}", o_.model, r->status));
    double sticky = 0, moved = 0;
    for (const auto& rep : j["replicas"]) {
      sticky += percent_or(rep, "sticky");
      moved += percent_or(rep, "spilled_in") + percent_or(rep, "rehomed");
    }
    co_return std::pair{sticky, moved};
  }

  evaluator::ReplicaStep& replica(std::pair<int, int> key) {
    auto [it, added] = replica_index_.emplace(key, result_.samples.replicas.size());
    if (added) {
      result_.samples.replicas.push_back({.replica = static_cast<int>(it->second)});
    }
    return result_.samples.replicas[it->second];
  }

  // Scrapes every backend; with `record`, adds a "replicas busy" sample. A
  // backend that does not answer is a gap in its figures (its counters
  // resume from their last reading); only when none has answered for
  // give_up_after is it an error.
  net::Awaitable<std::optional<std::string>> poll(bool record) {
    double busy = 0;
    bool any = false;
    std::string error;
    for (std::size_t b = 0; b < backends_.size(); ++b) {
      auto r = co_await fetch(backends_[b], http::verb::get, "/metrics");
      if (r && r->status != 200)
        r = unexpected(fmt::format("{}/metrics: HTTP {}", backends_[b].url, r->status));
      if (!r) {
        ++result_.samples.metrics_polls_failed;
        error = r.error();
        continue;
      }
      any = true;
      const auto snap = telemetry::extract_vllm_snapshot(r->body, model_names_);
      for (const auto& rank : snap.ranks) {
        const std::pair key{static_cast<int>(b), rank.rank};
        ranks_[key].observe(rank);
        auto& rep = replica(key);
        if (record && rank.running.value_or(0) > 0) {
          busy += 1;
          rep.busy_polls += 1;
        }
      }
    }
    if (record) {
      result_.samples.replicas_busy.push_back(busy);
      progress.replicas_busy = busy;
    }
    if (any) {
      polls_failing_since_.reset();
    } else if (!polls_failing_since_) {
      polls_failing_since_ = Clock::now();
    }
    if (polls_failing_since_ && Clock::now() - *polls_failing_since_ >= o_.give_up_after)
      co_return fmt::format("no backend's /metrics has answered for {} s: {}",
                            o_.give_up_after.count(), error);
    co_return std::nullopt;
  }

  // The warden has refused every connection for give_up_after: why, then.
  std::optional<std::string> connects_failing() const {
    if (!connects_failing_since_ || Clock::now() - *connects_failing_since_ < o_.give_up_after)
      return std::nullopt;
    return fmt::format("the warden at {} has accepted no connection for {} s: {}", warden_.url,
                       o_.give_up_after.count(), last_connect_error_);
  }

  void report_progress() {
    if (!on_progress) return;
    progress.elapsed_s = std::min(simulated_since(start_), o_.step_seconds);
    progress.requests = result_.samples.requests_sent;
    progress.failed = result_.samples.requests_failed;
    progress.first_failure = result_.samples.first_failure;
    progress.sessions_completed = loop_.sessions_completed();
    progress.ttfb_p50_s = evaluator::percentile(result_.samples.ttfb_s, 50);
    on_progress(progress);
  }

  net::Awaitable<void> pause(int s, double simulated_seconds) {
    auto ex = co_await asio::this_coro::executor;
    net::Timer timer(ex);
    timer.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(simulated_seconds / o_.time_scale)));
    slots_[static_cast<std::size_t>(s)].timer = &timer;
    co_await timer.async_wait(net::kAsTuple);
    slots_[static_cast<std::size_t>(s)].timer = nullptr;
  }

  // One slot of the closed loop: its sessions' turns, one after the other,
  // on one keep-alive connection.
  net::Awaitable<void> run_slot(int s) {
    auto ex = co_await asio::this_coro::executor;
    auto [rec, results] = co_await net::look_up(ex, warden_.host, warden_.port,
                                                std::chrono::steady_clock::now() + kControlTimeout);
    std::optional<net::Stream> stream;
    beast::flat_buffer buffer;
    while (!rec && !stopping_) {
      const double wait = loop_.pause_before_next(s);
      if (wait > 0) co_await pause(s, wait);
      if (stopping_) break;
      const workload::Conversation& conv = loop_.conversation(s);
      const workload::WireRequest wire =
          workload::build_request(o_.dialect, conv, o_.model, o_.session_ids);
      // An attempt, whether or not it connects; one the step's end cuts short
      // is taken back, as its outcome belongs to no step.
      ++result_.samples.requests_sent;
      if (!stream) {
        stream.emplace(ex);
        slots_[static_cast<std::size_t>(s)].stream = &*stream;
        stream->expires_after(kControlTimeout);
        const auto cec = co_await net::connect_any(*stream, results);
        if (cec) {
          slots_[static_cast<std::size_t>(s)].stream = nullptr;
          stream.reset();
          if (stopping_) {
            --result_.samples.requests_sent;
            break;
          }
          last_connect_error_ = cec.message();
          if (!connects_failing_since_) connects_failing_since_ = Clock::now();
          co_await fail(s, /*abandon=*/false, "cannot connect: " + cec.message());
          continue;
        }
        connects_failing_since_.reset();
        buffer.clear();
      }
      slots_[static_cast<std::size_t>(s)].stream = &*stream;
      http::request<http::string_body> req{http::verb::post, warden_.base_path + wire.target, 11};
      req.set(http::field::host, warden_.host);
      req.set(http::field::content_type, "application/json");
      req.set(http::field::accept, "text/event-stream");
      req.set(http::field::user_agent, "lmwarden-bench");
      for (const auto& [k, v] : wire.headers) req.set(k, v);
      req.body() = wire.body;
      req.prepare_payload();
      const auto sent = Clock::now();
      stream->expires_after(o_.request_timeout);
      auto [wec, wn] = co_await http::async_write(*stream, req, net::kAsTuple);
      StreamTap tap(o_.dialect);
      bool ok = !wec;
      bool keep_alive = false;
      std::string failure = wec ? "sending the request: " + wec.message() : std::string();
      if (ok) {
        http::response_parser<http::buffer_body> parser;
        parser.body_limit(boost::none);
        auto [hec, hn] = co_await http::async_read_header(*stream, buffer, parser, net::kAsTuple);
        const int status = hec ? 0 : parser.get().result_int();
        ok = status == 200;
        if (hec) failure = "reading the reply: " + hec.message();
        std::string error_body;  // a refusal's body, for the failure's reason
        char chunk[16 * 1024];
        while (!hec && !parser.is_done()) {
          parser.get().body().data = chunk;
          parser.get().body().size = sizeof chunk;
          stream->expires_after(o_.request_timeout);
          auto [rec2, rn] = co_await http::async_read(*stream, buffer, parser, net::kAsTuple);
          if (rec2 && rec2 != http::error::need_buffer) {
            if (ok) failure = "reading the reply: " + rec2.message();
            ok = false;
            break;
          }
          const std::size_t got = sizeof chunk - parser.get().body().size;
          if (!ok && error_body.size() < kErrorBodyKept) error_body.append(chunk, got);
          if (ok && tap.feed({chunk, got}) && !stopping_) {
            result_.samples.ttfb_s.push_back(
                std::chrono::duration<double>(Clock::now() - sent).count() * o_.time_scale);
          }
        }
        if (status != 0 && status != 200) failure = refusal(status, error_body);
        keep_alive = ok && parser.is_done() && parser.get().keep_alive();
      }
      slots_[static_cast<std::size_t>(s)].stream = nullptr;
      if (!stopping_) result_.output_tokens += static_cast<double>(tap.output_tokens());
      if (!keep_alive) stream.reset();
      if (stopping_) {
        --result_.samples.requests_sent;
        break;
      }
      if (ok && tap.error()) failure = "an error event: " + *tap.error();
      if (ok && failure.empty() && !tap.first_token_seen()) {
        failure = tap.done() ? "the reply ended without content" : "the reply ended early";
      }
      if (!failure.empty()) {
        co_await fail(s, /*abandon=*/true, std::move(failure));
        continue;
      }
      result_.samples.turn_s.push_back(std::chrono::duration<double>(Clock::now() - sent).count() *
                                       o_.time_scale);
      result_.samples.output_tokens.push_back(static_cast<double>(tap.output_tokens()));
      if (loop_.complete_turn(s, tap.text())) {
        result_.samples.session_end_s.push_back(simulated_since(start_));
      }
    }
  }

  // A request failed: count it, keep the step's first reason, drop the
  // session if it was mid-way (its history would now be wrong), and back off
  // a little before the next try.
  net::Awaitable<void> fail(int s, bool abandon, std::string why) {
    ++result_.samples.requests_failed;
    if (result_.samples.first_failure.empty()) result_.samples.first_failure = std::move(why);
    if (abandon) loop_.abandon(s);
    co_await pause(s, 0.2 * o_.time_scale);
  }

  const OnlineOptions& o_;
  // The backends' series of this model, where a server labels several: the
  // name --model gave and the one the warden's card says.
  const std::vector<std::string>& model_names_;
  const RunState& state_;
  const Endpoint& warden_;
  const std::vector<Endpoint>& backends_;
  workload::ClosedLoop loop_;
  std::vector<Slot> slots_;
  std::map<std::pair<int, int>, telemetry::RankCounters> ranks_;  // (backend, rank)
  std::map<std::pair<int, int>, std::size_t> replica_index_;
  evaluator::StepResult result_;
  Clock::time_point start_;
  Clock::time_point deadline_;
  bool stopping_ = false;
  int running_slots_ = 0;
  std::optional<std::string> slot_failure_;  // the first slot that threw, what it said
  std::optional<Clock::time_point> polls_failing_since_;
  std::optional<Clock::time_point> connects_failing_since_;
  std::string last_connect_error_;
};

net::Awaitable<Result<OnlineRun, std::string>> run_steps(
    const OnlineOptions& o, const RunState& state,
    const std::function<void(const Progress&)>& on_progress,
    const std::function<void(const evaluator::StepResult&)>& on_step) {
  auto warden = endpoint_of(o.target);
  if (!warden) co_return unexpected(warden.error());
  auto r = co_await fetch(*warden, http::verb::get, "/api/models/" + o.model);
  if (!r) co_return unexpected("cannot reach the warden: " + r.error());
  const json card = json::parse(r->body, nullptr, false);
  if (r->status != 200 || !card.is_object()) {
    // A warden lists its models at /api/models; a vLLM server, or anything
    // else, has no such route.
    std::string hint = "is --target a warden (lmwarden serve)? it has no /api/models";
    if (auto all = co_await fetch(*warden, http::verb::get, "/api/models"); all) {
      const json listed = json::parse(all->body, nullptr, false);
      if (all->status == 200 && listed.is_object() && listed.contains("models") &&
          listed["models"].is_array()) {
        std::vector<std::string> names;
        for (const auto& m : listed["models"])
          if (m.contains("name") && m["name"].is_string()) names.push_back(m["name"]);
        hint = fmt::format("is --model right? the warden serves {}", fmt::join(names, ", "));
      }
    }
    co_return unexpected(
        fmt::format("GET {}/api/models/{}: HTTP {} ({})", o.target, o.model, r->status, hint));
  }
  std::vector<std::string> model_names{o.model};
  if (card.contains("name") && card["name"].is_string() && card["name"] != o.model)
    model_names.push_back(card["name"].get<std::string>());
  const auto found = ModelSettings::of_card(card);
  if (!found)
    co_return unexpected(
        fmt::format("GET {}/api/models/{}: no affinity in its reply", o.target, o.model));
  // Without the admin token the warden cannot be switched: it must already
  // be at every arm, or the run would measure one arm under another's name.
  if (!o.admin_token) {
    for (const auto& arm : o.arms)
      if (!found->serves(ModelSettings::of_arm(arm)))
        co_return unexpected(fmt::format(
            "arm {}: model {} is at {}, and switching it needs the warden's admin token; run "
            "--arms {}, or give the token",
            arm, o.model, found->describe(), found->arm()));
  }

  std::vector<std::string> urls = o.backend_metrics;
  if (urls.empty()) {
    if (card.contains("backends")) {
      for (const auto& b : card["backends"])
        if (b.contains("url") && b["url"].is_string()) urls.push_back(b["url"].get<std::string>());
    }
    if (urls.empty()) co_return unexpected("the warden lists no backends; pass --backend-metrics");
  }
  std::vector<Endpoint> backends;
  for (const auto& u : urls) {
    auto ep = endpoint_of(u);
    if (!ep) co_return unexpected(ep.error());
    backends.push_back(*ep);
  }
  const workload::Workload workload(o.workload);
  OnlineRun run;
  run.backends = urls;
  const int total = static_cast<int>(o.steps.size() * o.arms.size());
  int index = 0;
  for (int sessions : o.steps) {
    for (const auto& arm : o.arms) {
      if (state.cancelled()) break;
      // Every arm of a step opens the same session indexes (the salt keeps
      // their caches apart), and steps never reuse one.
      StepRunner step(
          o, state, workload, *warden, backends, model_names, sessions, arm,
          static_cast<std::uint64_t>(index / static_cast<int>(o.arms.size())) * 1'000'000);
      step.on_progress = on_progress;
      step.progress = {.index = index,
                       .total = total,
                       .sessions = sessions,
                       .arm = arm,
                       .duration_s = o.step_seconds};
      auto result = co_await step.run();
      if (!result) {
        run.stopped =
            state.cancelled()
                ? fmt::format(
                      "interrupted; the step under way ({} sessions, arm {}) "
                      "was dropped",
                      sessions, arm)
                : fmt::format("at {} sessions, arm {}: {}", sessions, arm, result.error());
        break;
      }
      run.replicas = std::max(run.replicas, static_cast<int>(result->samples.replicas.size()));
      if (on_step) on_step(*result);
      run.steps.push_back(std::move(result).value());
      ++index;
    }
    if (run.stopped) break;
  }
  run.signal = state.signal;
  if (run.interrupted() && !run.stopped) run.stopped = "interrupted between steps";
  // Put the model back as the run found it.
  if (o.admin_token) {
    auto put = co_await fetch(*warden, http::verb::patch, "/api/models/" + o.model,
                              found->patch().dump(), o.admin_token);
    if (put && put->status == 200) {
      run.settings_restored = found->describe();
    } else {
      run.settings_not_restored =
          fmt::format("model {} could not be put back to {}: {}", o.model, found->describe(),
                      put ? fmt::format("HTTP {}: {}", put->status, put->body) : put.error());
    }
  }
  co_return run;
}

// co_spawn's completion wants a default-constructible result; Result is not.
net::Awaitable<void> run_all(const OnlineOptions& o, const RunState& state,
                             const std::function<void(const Progress&)>& on_progress,
                             const std::function<void(const evaluator::StepResult&)>& on_step,
                             std::optional<Result<OnlineRun, std::string>>& out) {
  out.emplace(co_await run_steps(o, state, on_progress, on_step));
}

}  // namespace

std::optional<std::string> validate_online_arm(const std::string& arm) {
  if (ModelSettings::parse_arm(arm)) return std::nullopt;
  return "arm '" + arm + "': online arms are off, on and warden:N (N from 1 to 1000000)";
}

Result<OnlineRun, std::string> run_online(
    const OnlineOptions& options, const std::function<void(const Progress&)>& on_progress,
    const std::function<void(const evaluator::StepResult&)>& on_step) {
  for (const auto& arm : options.arms) {
    if (auto e = validate_online_arm(arm)) return unexpected(*e);
  }
  if (auto e = options.workload.validate()) return unexpected(*e);
  if (!(options.time_scale > 0)) return unexpected(std::string("time scale must be > 0"));
  if (!(options.step_seconds > 0)) return unexpected(std::string("step seconds must be > 0"));
  asio::io_context io{1};
  RunState state;
  std::optional<asio::signal_set> signals;
  bool abandoned = false;
  // The first signal ends the run in order (the step under way dropped, the
  // model put back); a second one stops everything at once. Declared out
  // here: the handler re-arms itself by reference.
  std::function<void(const boost::system::error_code&, int)> on_signal;
  if (options.stop_on_signal) {
    signals.emplace(io, SIGINT, SIGTERM);
    on_signal = [&](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (state.cancelled()) {
        abandoned = true;
        io.stop();
        return;
      }
      state.signal = sig;
      signals->async_wait(on_signal);
    };
    signals->async_wait(on_signal);
  }
  std::optional<Result<OnlineRun, std::string>> out;
  asio::co_spawn(io, run_all(options, state, on_progress, on_step, out), [&](std::exception_ptr e) {
    if (signals) signals->cancel();
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      out.emplace(unexpected(std::string("benchmark aborted: ") + ex.what()));
    }
  });
  io.run();
  if (abandoned) {
    OnlineRun run;
    run.stopped = "interrupted twice: stopped at once";
    run.signal = state.signal;
    if (options.admin_token)
      run.settings_not_restored = "model " + options.model +
                                  " was not put back (interrupted again before the end): check "
                                  "its affinity and spill threshold";
    return run;
  }
  if (!out) return unexpected(std::string("benchmark ended without a result"));
  return std::move(*out);
}

}  // namespace lmwarden::bench
