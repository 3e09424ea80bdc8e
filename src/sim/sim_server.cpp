#include "sim/sim_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <chrono>
#include <csignal>
#include <future>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <unordered_map>

#include "engine/dp_server.h"
#include "engine/output_text.h"
#include "net/http_server.h"
#include "sim/api_request.h"
#include "sim/api_response.h"
#include "sim/metrics_text.h"
#include "sim/response_routes.h"
#include "sim/response_store.h"
#include "sim/token_routes.h"

namespace lmwarden::sim {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using namespace asio::experimental::awaitable_operators;
using net::kAsTuple;
using Clock = std::chrono::steady_clock;

// What vLLM reports at /version; the simulator follows that release's API.
constexpr std::string_view kVllmVersion = "0.11.0";

// Bodies as FastAPI answers them. Named rather than written inline: GCC 12
// miscompiles string literals inside co_await expressions.
constexpr std::string_view kNotFound = R"({"detail":"Not Found"})";
constexpr std::string_view kMethodNotAllowed = R"({"detail":"Method Not Allowed"})";
constexpr std::string_view kEmptyPrompt = "The prompt cannot be empty.";
constexpr std::string_view kDuplicateId = "duplicate request id";
constexpr std::string_view kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::string_view kEventStreamType = "text/event-stream; charset=utf-8";
constexpr std::string_view kNoCache = "no-cache";
constexpr std::string_view kModelMissing = "The model `{}` does not exist.";
constexpr std::string_view kRankOutOfRange = "data_parallel_rank {} is out of range [0, {}).";
constexpr std::string_view kContextTooLong =
    "This model's maximum context length is {} tokens. However, your request has {} input "
    "tokens. Please reduce the length of the input messages.";

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Looks like vLLM's uuid4().hex. The low half is the request's id, so a
// simulator never repeats one; the high half mixes in `draw`, a number each
// simulator draws at start, so two of them (the same --seed or not) do not
// share ids.
std::string response_id(engine::RequestId id, std::uint64_t draw) {
  const std::uint64_t mixed = (id * 0x9e3779b97f4a7c15ull) ^ draw;
  const std::uint64_t hi = (mixed ^ (mixed >> 29)) * 0xbf58476d1ce4e5b9ull;
  return fmt::format("{:016x}{:016x}", hi, id);
}

std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find('?'));
}

std::string_view query_of(std::string_view target) {
  const std::size_t mark = target.find('?');
  return mark == std::string_view::npos ? std::string_view{} : target.substr(mark + 1);
}

std::optional<Api> api_of(std::string_view path) {
  if (path == "/v1/chat/completions") return Api::kChatCompletions;
  if (path == "/v1/completions") return Api::kCompletions;
  if (path == "/v1/messages") return Api::kMessages;
  if (path == "/v1/messages/count_tokens") return Api::kCountTokens;
  if (path == "/v1/responses") return Api::kResponses;
  return std::nullopt;
}

// The X-data-parallel-rank header's value, its spaces trimmed.
std::string_view rank_text(const net::Request& req) {
  const auto found = req.find("X-data-parallel-rank");
  if (!found) return {};
  std::string_view v = *found;
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  return v;
}

// X-data-parallel-rank as vLLM reads it: an integer pins, anything else is
// ignored (so is an absent header).
std::optional<std::int64_t> pinned_rank(const net::Request& req) {
  const std::string_view v = rank_text(req);
  std::int64_t rank = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), rank);
  if (end != v.data() + v.size() || v.empty()) return std::nullopt;
  // An integer too large for 64 bits is still an integer, out of range (vLLM
  // reads it with Python's int); from_chars leaves `rank` unset then.
  if (ec == std::errc::result_out_of_range)
    return v.front() == '-' ? std::numeric_limits<std::int64_t>::min()
                            : std::numeric_limits<std::int64_t>::max();
  if (ec != std::errc{}) return std::nullopt;
  return rank;
}

net::Response json_response(http::status status, std::string body) {
  net::Response res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = std::move(body);
  return res;
}

// A request waiting for its tokens. The rank coroutine appends and wakes it by
// expiring `signal`; the request re-arms it (expiry at infinity) before it
// looks at `pending`. An expired timer also completes waits that start later,
// so a wake-up that comes before the wait is registered is not lost.
struct Sink {
  explicit Sink(net::Executor ex) : signal(ex, Clock::time_point::max()) {}
  std::vector<engine::TokenOutput> pending;
  net::Timer signal;
};

}  // namespace

// State shared by the rank coroutines and the request handlers; owned through
// shared_ptr by every coroutine frame, so it outlives them all at shutdown.
class Core : public std::enable_shared_from_this<Core> {
 public:
  Core(asio::io_context& io, SimOptions options)
      : io_(io),
        options_(std::move(options)),
        dp_(options_.dp_size, options_.engine),
        start_(Clock::now()),
        started_unix_(unix_now()),
        responses_(options_.responses_store_limit) {
    std::random_device device;
    id_draw_ = (static_cast<std::uint64_t>(device()) << 32) | device();
    for (std::int32_t r = 0; r < dp_.size(); ++r) {
      wake_.push_back(std::make_unique<net::Timer>(io_, Clock::time_point::max()));
      clock_.push_back(0.0);
    }
  }

  void start() {
    for (std::int32_t r = 0; r < dp_.size(); ++r) {
      asio::co_spawn(io_, run_rank(shared_from_this(), r), asio::detached);
    }
  }

  static net::Awaitable<void> handle(std::shared_ptr<Core> self, net::Exchange& ex) {
    co_await self->dispatch(ex);
  }

  const SimOptions& options() const { return options_; }

  // After the I/O thread has stopped: drops the objects bound to the
  // io_context, which dies before this Core (coroutine frames own it).
  void release_io_objects() { wake_.clear(); }

 private:
  engine::Seconds virtual_now() const {
    return std::chrono::duration<double>(Clock::now() - start_).count() * options_.time_scale;
  }
  Clock::time_point wall_time_of(engine::Seconds t) const {
    return start_ + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(t / options_.time_scale));
  }

  // One rank: step whenever there is work, let the step's virtual duration
  // pass on the wall clock, then publish its tokens.
  static net::Awaitable<void> run_rank(std::shared_ptr<Core> self, std::int32_t rank) {
    engine::Engine& engine = self->dp_.engine(rank);
    net::Timer step_timer(self->io_);
    for (;;) {
      if (!engine.has_unfinished_requests()) {
        auto& wake = *self->wake_[static_cast<std::size_t>(rank)];
        co_await wake.async_wait(kAsTuple);
        wake.expires_at(Clock::time_point::max());
        continue;
      }
      // Never step into the past: if the thread fell behind, virtual time
      // continues from the last step's end.
      const engine::Seconds now =
          std::max(self->virtual_now(), self->clock_[static_cast<std::size_t>(rank)]);
      engine::StepResult step = engine.step(now);
      if (step.idle()) {  // nothing schedulable: cannot happen with valid requests
        step_timer.expires_after(std::chrono::milliseconds(1));
        co_await step_timer.async_wait(kAsTuple);
        continue;
      }
      self->clock_[static_cast<std::size_t>(rank)] = step.end();
      step_timer.expires_at(self->wall_time_of(step.end()));
      co_await step_timer.async_wait(kAsTuple);
      self->deliver(step);
    }
  }

  void deliver(const engine::StepResult& step) {
    for (const engine::TokenOutput& out : step.outputs) {
      auto it = sinks_.find(out.id);
      if (it == sinks_.end()) continue;  // its client left during the step
      it->second->pending.push_back(out);
      it->second->signal.expires_at(Clock::time_point::min());
    }
  }

  net::Awaitable<void> dispatch(net::Exchange& ex) {
    const net::Request& req = ex.request();
    const std::string_view path = path_of(req.target());
    const bool get = req.method() == http::verb::get;
    const bool post = req.method() == http::verb::post;

    if (auto api = api_of(path)) {
      if (!post) {
        co_await not_allowed(ex);
        co_return;
      }
      {
        co_await generate(ex, *api);
        co_return;
      }
    }
    // A kept response's routes answer whether the store is on or not: off,
    // nothing was kept, so every id is unknown, as in vLLM.
    if (auto route = stored_response_route(path)) {
      const bool allowed = route->action == StoredResponseAction::kRetrieve ? get : post;
      if (!allowed) {
        co_await not_allowed(ex);
        co_return;
      }
      StoredResponseReply r = stored_response_reply(responses_, *route, query_of(req.target()));
      co_await ex.respond(json_response(static_cast<http::status>(r.status), std::move(r.body)));
      co_return;
    }
    if (path == "/tokenize" || path == "/detokenize") {
      if (!post) {
        co_await not_allowed(ex);
        co_return;
      }
      TokenReply r = path == "/tokenize" ? tokenize_reply(req.body(), options_.engine.max_model_len)
                                         : detokenize_reply(req.body());
      co_await ex.respond(json_response(static_cast<http::status>(r.status), std::move(r.body)));
      co_return;
    }
    if (path == "/health") {
      if (!get) {
        co_await not_allowed(ex);
        co_return;
      }
      net::Response res{http::status::ok, 11};
      co_await ex.respond(std::move(res));
    } else if (path == "/version") {
      if (!get) {
        co_await not_allowed(ex);
        co_return;
      }
      std::string body = version_body();
      co_await ex.respond(json_response(http::status::ok, std::move(body)));
    } else if (path == "/v1/models") {
      if (!get) {
        co_await not_allowed(ex);
        co_return;
      }
      co_await ex.respond(json_response(http::status::ok, models_body()));
    } else if (path == "/metrics") {
      if (!get) {
        co_await not_allowed(ex);
        co_return;
      }
      net::Response res{http::status::ok, 11};
      res.set(http::field::content_type, kMetricsType);
      res.body() = render_metrics(dp_, options_.model, started_unix_);
      co_await ex.respond(std::move(res));
    } else {
      co_await ex.respond(json_response(http::status::not_found, std::string(kNotFound)));
    }
  }

  net::Awaitable<void> not_allowed(net::Exchange& ex) {
    co_await ex.respond(
        json_response(http::status::method_not_allowed, std::string(kMethodNotAllowed)));
  }

  static std::string version_body() { return nlohmann::json{{"version", kVllmVersion}}.dump(); }

  std::string models_body() const {
    using Json = nlohmann::ordered_json;
    const auto created = static_cast<std::int64_t>(started_unix_);
    return Json{{"object", "list"},
                {"data", Json::array({Json{{"id", options_.model},
                                           {"object", "model"},
                                           {"created", created},
                                           {"owned_by", "vllm"},
                                           {"root", options_.model},
                                           {"parent", nullptr},
                                           {"max_model_len", options_.engine.max_model_len},
                                           {"permission", Json::array()}}})}}
        .dump();
  }

  net::Awaitable<void> fail(net::Exchange& ex, Api api, http::status status, std::string_view msg) {
    co_await ex.respond(json_response(status, error_body(api, static_cast<int>(status), msg)));
  }

  net::Awaitable<void> generate(net::Exchange& ex, Api api) {
    ParseResult parsed =
        parse_api_request(api, ex.request().body(), ex.request().body().capacity());
    if (!parsed.request) {
      co_await fail(ex, api, http::status::bad_request, parsed.error);
      co_return;
    }
    ApiRequest& request = *parsed.request;
    if (request.model.empty()) request.model = options_.model;
    if (options_.strict_model && request.model != options_.model) {
      {
        co_await fail(ex, api, http::status::not_found,
                      fmt::format(fmt::runtime(kModelMissing), request.model));
        co_return;
      }
    }
    // A chained Responses request continues the stored conversation. vLLM
    // looks the id up before it builds the prompt; without the store nothing
    // was kept, so every id is unknown.
    std::shared_ptr<const StoredTurn> previous;
    if (request.previous_response_id) {
      if (options_.responses_store) previous = responses_.find(*request.previous_response_id);
      if (!previous) {
        std::string body = response_not_found_body(*request.previous_response_id);
        co_await ex.respond(json_response(http::status::not_found, std::move(body)));
        co_return;
      }
      render_with_history(request, conversation_of(*previous));
    }
    const bool keep = api == Api::kResponses && options_.responses_store && request.store;

    std::vector<engine::TokenId> tokens = prompt_token_ids(request);
    if (api == Api::kCountTokens) {
      {
        co_await ex.respond(json_response(
            http::status::ok, count_tokens_body(static_cast<std::int32_t>(tokens.size()))));
        co_return;
      }
    }

    // vLLM's /v1/responses passes no rank to its engine: the header is not
    // read there, and the balancer picks.
    const std::optional<std::int64_t> pin =
        api == Api::kResponses ? std::nullopt : pinned_rank(ex.request());
    if (pin && !dp_.valid_rank(*pin)) {
      {
        co_await fail(
            ex, api, http::status::bad_request,
            fmt::format(fmt::runtime(kRankOutOfRange), rank_text(ex.request()), dp_.size()));
        co_return;
      }
    }
    const engine::RequestId id = dp_.next_request_id();
    const std::int32_t prompt_len = static_cast<std::int32_t>(tokens.size());
    const engine::DpServer::Placement placement =
        dp_.add_request({.id = id, .prompt = std::move(tokens), .max_tokens = request.max_tokens},
                        virtual_now(), pin);
    switch (placement.result.status) {
      case engine::AddStatus::kOk:
        break;
      case engine::AddStatus::kPromptTooLong: {
        co_await fail(
            ex, api, http::status::bad_request,
            fmt::format(fmt::runtime(kContextTooLong), options_.engine.max_model_len, prompt_len));
        co_return;
      }
      case engine::AddStatus::kEmptyPrompt: {
        co_await fail(ex, api, http::status::bad_request, kEmptyPrompt);
        co_return;
      }
      case engine::AddStatus::kDuplicateId: {
        co_await fail(ex, api, http::status::internal_server_error, kDuplicateId);
        co_return;
      }
    }

    const std::int32_t rank = placement.rank;
    Sink sink(ex.stream().get_executor());
    sinks_.emplace(id, &sink);
    wake_[static_cast<std::size_t>(rank)]->expires_at(Clock::time_point::min());
    // Whatever ends this coroutine — completion, a failed write, a client that
    // left — the request leaves the engine and its blocks are freed.
    struct Release {
      Core& core;
      engine::RequestId id;
      std::int32_t rank;
      ~Release() {
        core.sinks_.erase(id);
        core.dp_.engine(rank).abort_request(id);  // no-op once finished
      }
    } release{*this, id, rank};

    ResponseBuilder builder(request, request.model, response_id(id, id_draw_),
                            static_cast<std::int64_t>(unix_now()), options_.prompt_tokens_details);
    if (request.stream) {
      net::ResponseHeader header{http::status::ok, 11};
      header.set(http::field::content_type, kEventStreamType);
      header.set(http::field::cache_control, kNoCache);
      if (co_await ex.begin_stream(std::move(header), true)) co_return;
    }

    std::string chunk;
    for (;;) {
      chunk.clear();
      sink.signal.expires_at(Clock::time_point::max());
      for (const engine::TokenOutput& out : sink.pending) {
        const std::string_view piece =
            engine::output_piece_of(out.token).value_or(std::string_view{});
        builder.on_token(out, piece, request.stream ? &chunk : nullptr);
      }
      sink.pending.clear();
      // Stored before the last bytes go out, as vLLM stores before it sends
      // `response.completed`: a client that chains on that event finds it.
      if (keep && builder.finished()) remember(request, builder, std::move(previous));
      if (!chunk.empty() && co_await ex.write_body(chunk)) co_return;
      if (builder.finished()) break;
      auto woke = co_await (
          sink.signal.async_wait(asio::as_tuple(asio::use_awaitable_t<net::Executor>{})) ||
          ex.client_closed());
      if (woke.index() == 1 && std::get<1>(woke)) co_return;  // the client left: abort
    }

    if (request.stream) {
      co_await ex.end_stream();
    } else {
      co_await ex.respond(json_response(http::status::ok, builder.body()));
    }
  }

  // Keeps a finished Responses reply under its id: what its request added to
  // the conversation and what it answered, linked to the turn it continued.
  void remember(ApiRequest& request, const ResponseBuilder& builder,
                std::shared_ptr<const StoredTurn> previous) {
    auto turn = std::make_shared<StoredTurn>();
    auto& own = request.chat.messages;
    const auto input = own.begin() + static_cast<std::ptrdiff_t>(request.instruction_messages);
    turn->previous = std::move(previous);
    turn->instructions.assign(std::make_move_iterator(own.begin()), std::make_move_iterator(input));
    turn->input.assign(std::make_move_iterator(input), std::make_move_iterator(own.end()));
    turn->output = builder.text();
    // What the client got: the body, or the stream's last event's `response`,
    // which the builder writes from the same body.
    turn->response = builder.body();
    responses_.add(builder.id(), std::move(turn));
  }

  asio::io_context& io_;
  SimOptions options_;
  engine::DpServer dp_;
  Clock::time_point start_;
  double started_unix_;
  std::uint64_t id_draw_ = 0;                      // see response_id
  std::vector<std::unique_ptr<net::Timer>> wake_;  // per rank: new work arrived
  std::vector<engine::Seconds> clock_;             // per rank: end of the last step
  std::unordered_map<engine::RequestId, Sink*> sinks_;
  ResponseStore responses_;  // filled only with options_.responses_store
};

struct SimServer::Impl {
  explicit Impl(SimOptions options) : io(std::make_unique<net::IoThreads>(1)) {
    core = std::make_shared<Core>(io->at(0), std::move(options));
    net::ServerOptions server_options;
    server_options.server_name = "lmwarden-sim";
    server_options.max_body_bytes = core->options().max_body_bytes;
    server_options.error_response = [](std::string_view target, http::status status,
                                       std::string_view message) {
      const auto api = api_of(path_of(target)).value_or(Api::kChatCompletions);
      return json_response(status, error_body(api, static_cast<int>(status), message));
    };
    http = std::make_unique<net::HttpServer>(
        *io, std::move(server_options),
        [c = core](net::Exchange& ex) { return Core::handle(c, ex); });
  }

  ~Impl() { stop(); }

  // Teardown order matters: the threads stop; the listening socket and the
  // signal set go while their io_context exists; the io_context goes next,
  // destroying the unfinished coroutines (which hold the last references to
  // the engines and still count themselves out of `http`); `http` goes last.
  void stop() {
    if (stopped) return;
    stopped = true;
    http->stop_accepting();
    io->stop();
    io->join();
    signals.reset();
    http->close_acceptor();
    core->release_io_objects();
    core.reset();
    io.reset();
  }

  std::unique_ptr<net::IoThreads> io;
  std::shared_ptr<Core> core;
  std::unique_ptr<net::HttpServer> http;
  std::unique_ptr<asio::signal_set> signals;
  std::promise<void> signalled;

  void wait_for_signal() {
    signals->async_wait([this](const boost::system::error_code& ec, int signal) {
      if (ec) return;
      if (signal != SIGHUP) {
        signalled.set_value();
        return;
      }
      spdlog::info("SIGHUP: the simulator has nothing to reload; still serving");
      wait_for_signal();
    });
  }
  bool started = false;
  bool stopped = false;
};

SimServer::SimServer(SimOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

SimServer::~SimServer() {
  stop();
}

std::string SimServer::Address::url() const {
  return host.find(':') == std::string::npos ? fmt::format("http://{}:{}", host, port)
                                             : fmt::format("http://[{}]:{}", host, port);
}

SimServer::Address SimServer::listen(std::string_view host_port) {
  Address address;
  if (!net::split_host_port(host_port, address.host, address.port)) {
    throw std::invalid_argument("--listen wants HOST:PORT, got '" + std::string(host_port) + "'");
  }
  address.port = impl_->http->listen(address.host, address.port).port();
  return address;
}

void SimServer::start() {
  if (impl_->started) return;
  impl_->started = true;
  // Installed before anyone can read our address, so an early SIGTERM is ours.
  // SIGHUP too: an operator's `pkill -HUP lmwarden`, meant for the warden,
  // must not end the simulator beside it (its default action), which has no
  // configuration file to read again.
  impl_->signals = std::make_unique<asio::signal_set>(impl_->io->at(0), SIGINT, SIGTERM, SIGHUP);
  impl_->wait_for_signal();
  impl_->core->start();
  impl_->io->start();
}

void SimServer::wait_for_shutdown_signal() {
  impl_->signalled.get_future().wait();
}

void SimServer::stop() {
  impl_->stop();
}

}  // namespace lmwarden::sim
