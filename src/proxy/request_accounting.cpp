#include "proxy/request_accounting.h"

#include <spdlog/spdlog.h>

#include "common/coarse_clock.h"

namespace lmwarden::proxy {

void RequestAccounting::on_response_header(unsigned status, std::string_view content_type, bool chunked) {
  ok_status_ = status >= 200 && status < 300;
  if (record_) record_->status = status;
  // Counted before any of the reply reaches the client, so that a client that
  // has the reply finds it counted (a 5xx retried elsewhere never gets here:
  // the warden counts it).
  if (status >= 500) model_.replica(replica_).count_error("status_5xx");
  const bool sse = content_type.starts_with("text/event-stream");
  if (expected_ != UsageReport::kRepeated)
    tap_.emplace(sse ? telemetry::BodyFormat::kEventStream
                 : content_type.starts_with("application/json") ? telemetry::BodyFormat::kJson
                                                                : telemetry::BodyFormat::kAuto);
  if (stored_ && ok_status_ && tap_) tap_->read_response_id();
  // Stripping changes the length, so only a chunked stream can have it; and
  // only a chunked stream is ended with an error event when cut short.
  if (sse && chunked) {
    if (strip_) {
      events_.emplace<telemetry::InjectedUsageStripper>();
    } else {
      events_.emplace<telemetry::WholeEventGate>();
    }
  }
}

std::span<const std::string_view> RequestAccounting::on_body(std::string_view bytes) {
  if (!first_byte_) {
    first_byte_ = coarse_system_now();  // a stamp for the per-second chart
    const auto now = std::chrono::steady_clock::now();
    const std::chrono::duration<double> ttfb = now - sent_;
    model_.time_to_first_byte().observe(ttfb.count());
    // Only a successful reply books tokens, so only one holds the chart open.
    if (ok_status_ && tap_) open_second_ = model_.open_requests().open(*first_byte_);
    if (record_) record_->first_byte = now;
  }
  if (tap_) tap_->feed(bytes);
  if (stored_ && ok_status_ && tap_ && tap_->format() == telemetry::BodyFormat::kEventStream)
    tell_stored();
  if (auto* gate = std::get_if<telemetry::WholeEventGate>(&events_)) return gate->feed(bytes);
  if (auto* stripper = std::get_if<telemetry::InjectedUsageStripper>(&events_)) return stripper->feed(bytes);
  single_[0] = bytes;
  return {single_, 1};
}

std::span<const std::string_view> RequestAccounting::on_end() {
  if (auto* gate = std::get_if<telemetry::WholeEventGate>(&events_)) return gate->finish();
  if (auto* stripper = std::get_if<telemetry::InjectedUsageStripper>(&events_)) return stripper->finish();
  return {};
}

void RequestAccounting::on_upstream_done() {
  end_reply(/*complete=*/true);
}

void RequestAccounting::on_cut_short(std::string_view kind) {
  // The warden's own shutdown is no error of the upstream's.
  if (kind != kShutdownKind) model_.replica(replica_).count_error(std::string(kind));
  end_reply(/*complete=*/false);
}

void RequestAccounting::end_reply(bool complete) {
  if (upstream_done_) return;
  upstream_done_ = true;
  complete_ = complete;
  // A JSON body's id is read once the body is whole.
  if (complete && stored_ && ok_status_ && tap_) {
    tap_->finish();  // (book() reads the usage of the finished tap)
    tell_stored();
  }
  if (done_) done_();
  book();
}

void RequestAccounting::tell_stored() {
  if (tap_->response_id().empty()) return;
  const Stored stored = std::exchange(stored_, nullptr);
  stored(tap_->response_id());
}

RequestAccounting::~RequestAccounting() { book(); }

void RequestAccounting::close_open() noexcept {
  if (!open_second_) return;
  model_.open_requests().close(*open_second_);
  open_second_.reset();
}

void RequestAccounting::book() {
  if (booked_ || !tap_ || !ok_status_) return close_open();
  booked_ = true;
  tap_->finish();
  const telemetry::RequestUsage usage = tap_->usage();
  if (record_) record_->usage = usage;
  ReplicaTelemetry& r = model_.replica(replica_);
  if (!usage.cache_measured) {
    // No usage read: the prompt's size is not known here, so no tokens are
    // booked; the count says how many whole replies went unmeasured (one cut
    // short, or left by its client, before its usage came says nothing of
    // the server's reporting).
    if (expected_ != UsageReport::kNone && complete_)
      r.unmeasured_requests.fetch_add(1, std::memory_order_relaxed);
    return close_open();
  }
  if (expected_ == UsageReport::kFull && model_.count_usage(server_, usage.cached_reported))
    spdlog::warn(
        "model={} server={}: {} replies reported usage and none how many prompt tokens came from "
        "the prefix cache, so every prompt token counts as computed; vLLM reports the count only "
        "when started with --enable-prompt-tokens-details",
        model_.name, model_.server_url(server_), CachedCountCheck::kExpectedWithin);
  const telemetry::TokenCounts counts{usage.cached_tokens, usage.computed_tokens(), usage.completion_tokens};
  r.prompt_cached.fetch_add(counts.cached, std::memory_order_relaxed);
  r.prompt_computed.fetch_add(counts.computed, std::memory_order_relaxed);
  r.completion.fetch_add(counts.completion, std::memory_order_relaxed);
  const auto now = coarse_system_now();
  r.series.record_request(first_byte_.value_or(now), now, counts);
  close_open();  // after the record, which it releases to snapshot()
}

}  // namespace lmwarden::proxy
