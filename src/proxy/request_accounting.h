// Per-request accounting on the relayed reply: time to first byte, and the
// usage the engine reported (read by telemetry::UsageTap from the bytes on
// their way through). A chunked event stream reaches the client in whole
// events (telemetry::WholeEventGate), so that one cut short ends cleanly. With
// `inject_stream_usage` the warden asked for a usage chunk the client did not;
// the stripper, which holds events the same way, removes it from what the
// client gets.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string_view>
#include <variant>

#include "proxy/access_log.h"
#include "proxy/dialect.h"
#include "proxy/model_telemetry.h"
#include "proxy/relay.h"
#include "telemetry/stream_usage_injection.h"
#include "telemetry/usage_tap.h"
#include "telemetry/whole_events.h"

namespace lmwarden::proxy {

class RequestAccounting final : public RelayObserver {
 public:
  // `replica`: where the request went (-1: unassigned); `done` runs once the
  // upstream reply has ended (the warden ends the in-flight count there),
  // before its last bytes reach the client.
  using Done = std::function<void()>;
  using Stored = std::function<void(std::string_view stored_response)>;
  RequestAccounting(ModelTelemetry& model, bool strip_injected_usage, int replica, int server,
                    Done done)
      : model_(model),
        strip_(strip_injected_usage),
        replica_(replica),
        server_(server),
        done_(std::move(done)) {}
  // A reply whose client left ends without on_upstream_done or on_cut_short:
  // the usage read until then is booked here (an Anthropic stream's
  // message_start carries its prompt's).
  ~RequestAccounting() override;
  RequestAccounting(const RequestAccounting&) = delete;
  RequestAccounting& operator=(const RequestAccounting&) = delete;

  // Also notes the reply's status, first byte and usage in `record` (the
  // access log's), which must outlive this.
  void log_to(AccessRecord* record) noexcept { record_ = record; }
  // What the route's replies report (dialect.h). A reply of a route that
  // reports no usage (count_tokens, tokenize) is not counted as unmeasured
  // when it has none: it had no tokens to chart. One whose route never says
  // how much was cached (embeddings) is not taken as a sign that the server
  // was started without --enable-prompt-tokens-details.
  void expect(UsageReport report) noexcept { expected_ = report; }
  // The request asks its server to store the response (Responses' `store`):
  // a successful reply's response id goes to `stored`, once, as soon as it is
  // known: a stream's first event that names it (response.created), before
  // that event reaches the client, so that the response's place is known
  // (to other wardens too) long before the client can chain to it; a JSON
  // body's when the whole body has come.
  void read_response_id(Stored stored) noexcept { stored_ = std::move(stored); }

  void on_request_sent() noexcept override { sent_ = std::chrono::steady_clock::now(); }
  void on_response_header(unsigned status, std::string_view content_type, bool chunked) override;
  std::span<const std::string_view> on_body(std::string_view bytes) override;
  std::span<const std::string_view> on_end() override;
  // Runs `done` and books the usage on the replica (a successful reply only).
  void on_upstream_done() override;
  // Counts the failure in lmwarden_upstream_errors_total, then runs `done`
  // and books the usage read until then, as on_upstream_done does.
  void on_cut_short(std::string_view kind) override;

 private:
  // The reply has ended, well (`complete`) or not, and the client has not yet
  // heard it: `done`, then the usage (once).
  void end_reply(bool complete);
  void book();
  void close_open() noexcept;
  // Hands the response id to `stored_`, the first time the tap has one.
  void tell_stored();

  ModelTelemetry& model_;
  bool strip_;
  int replica_;
  int server_;  // the index of the model's backend that serves it
  UsageReport expected_ = UsageReport::kFull;
  Done done_;
  Stored stored_;  // empty: no id wanted, or told already
  bool ok_status_ = false;
  std::chrono::steady_clock::time_point sent_{};  // the relay sends before any reply byte comes
  std::optional<telemetry::WallTime> first_byte_;
  // The second this reply is counted open at (ModelTelemetry::open_requests),
  // from its first byte until its tokens are booked or it ends unbooked.
  std::optional<std::int64_t> open_second_;
  std::optional<telemetry::UsageTap> tap_;
  // What holds a chunked event stream's bytes until their event is whole:
  // the stripper when it has a usage chunk to remove, else the gate.
  std::variant<std::monostate, telemetry::InjectedUsageStripper, telemetry::WholeEventGate> events_;
  std::string_view single_[1];
  bool upstream_done_ = false;
  bool complete_ = false;  // the reply ended whole (end_reply)
  bool booked_ = false;
  AccessRecord* record_ = nullptr;
};

}  // namespace lmwarden::proxy
