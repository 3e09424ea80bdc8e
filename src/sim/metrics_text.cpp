#include "sim/metrics_text.h"

#include <fmt/format.h>

#include <cstdint>
#include <functional>

namespace lmwarden::sim {
namespace {

using engine::DpServer;
using engine::Engine;

// Prometheus label values escape backslash, quote and newline.
std::string escape(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Writer {
 public:
  Writer(const DpServer& server, std::string_view model, double started)
      : server_(server), model_(escape(model)), started_(started) {}

  void gauge(std::string_view name, std::string_view help,
             const std::function<double(const Engine&)>& value) {
    header(name, help, "gauge");
    for (std::int32_t r = 0; r < server_.size(); ++r) {
      fmt::format_to(std::back_inserter(out_), "{}{{engine=\"{}\",model_name=\"{}\"}} {}\n", name,
                     r, model_, number(value(server_.engine(r))));
    }
  }

  void counter(std::string_view name, std::string_view help,
               const std::function<double(const Engine&)>& value) {
    header(name, help, "counter");
    for (std::int32_t r = 0; r < server_.size(); ++r) {
      fmt::format_to(std::back_inserter(out_), "{}_total{{engine=\"{}\",model_name=\"{}\"}} {}\n",
                     name, r, model_, number(value(server_.engine(r))));
    }
    created(name, "");
  }

  void request_success() {
    constexpr std::string_view kName = "vllm:request_success";
    header(kName, "Count of successfully processed requests.", "counter");
    for (std::int32_t r = 0; r < server_.size(); ++r) {
      for (auto reason : {engine::FinishReason::kStop, engine::FinishReason::kLength,
                          engine::FinishReason::kAbort, engine::FinishReason::kError}) {
        fmt::format_to(
            std::back_inserter(out_),
            "{}_total{{engine=\"{}\",finished_reason=\"{}\",model_name=\"{}\"}} {}\n", kName, r,
            engine::to_string(reason), model_,
            number(static_cast<double>(server_.engine(r).counters().finished_with(reason))));
      }
    }
  }

  void ttft_histogram() {
    constexpr std::string_view kName = "vllm:time_to_first_token_seconds";
    header(kName, "Histogram of time to first token in seconds.", "histogram");
    for (std::int32_t r = 0; r < server_.size(); ++r) {
      const auto& h = server_.engine(r).counters().time_to_first_token;
      const auto cumulative = h.cumulative();
      for (std::size_t i = 0; i < engine::kTtftBuckets.size(); ++i) {
        fmt::format_to(std::back_inserter(out_),
                       "{}_bucket{{engine=\"{}\",le=\"{}\",model_name=\"{}\"}} {}\n", kName, r,
                       number(engine::kTtftBuckets[i]), model_,
                       number(static_cast<double>(cumulative[i])));
      }
      fmt::format_to(std::back_inserter(out_),
                     "{}_bucket{{engine=\"{}\",le=\"+Inf\",model_name=\"{}\"}} {}\n", kName, r,
                     model_, number(static_cast<double>(cumulative.back())));
      fmt::format_to(std::back_inserter(out_), "{}_count{{engine=\"{}\",model_name=\"{}\"}} {}\n",
                     kName, r, model_, number(static_cast<double>(h.count())));
      fmt::format_to(std::back_inserter(out_), "{}_sum{{engine=\"{}\",model_name=\"{}\"}} {}\n",
                     kName, r, model_, number(h.sum()));
    }
  }

  void cache_config() {
    header("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge");
    for (std::int32_t r = 0; r < server_.size(); ++r) {
      const auto& c = server_.engine(r).config();
      fmt::format_to(std::back_inserter(out_),
                     "vllm:cache_config_info{{block_size=\"{}\",cache_dtype=\"auto\","
                     "enable_prefix_caching=\"{}\",engine=\"{}\",gpu_memory_utilization=\"0.9\","
                     "num_gpu_blocks=\"{}\",prefix_caching_hash_algo=\"builtin\"}} 1.0\n",
                     c.block_size, c.enable_prefix_caching ? "True" : "False", r, c.num_gpu_blocks);
    }
  }

  std::string take() { return std::move(out_); }

 private:
  // Python's float repr for whole numbers ("3.0"), as prometheus_client prints.
  static std::string number(double v) {
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }

  void header(std::string_view name, std::string_view help, std::string_view type) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                   type);
  }

  void created(std::string_view name, std::string_view) {
    for (std::int32_t r = 0; r < server_.size(); ++r) {
      fmt::format_to(std::back_inserter(out_), "{}_created{{engine=\"{}\",model_name=\"{}\"}} {}\n",
                     name, r, model_, fmt::format("{:.6e}", started_));
    }
  }

  const DpServer& server_;
  std::string model_;
  double started_;
  std::string out_;
};

}  // namespace

std::string render_metrics(const DpServer& server, std::string_view model_name,
                           double started_unix) {
  Writer w(server, model_name, started_unix);
  w.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
          [](const Engine& e) { return e.num_running(); });
  w.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
          [](const Engine& e) { return e.num_waiting(); });
  w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          [](const Engine& e) { return e.kv_cache_usage(); });
  w.counter("vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            [](const Engine& e) { return static_cast<double>(e.counters().prefix_cache_queries); });
  w.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            [](const Engine& e) { return static_cast<double>(e.counters().prefix_cache_hits); });
  w.counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
            [](const Engine& e) { return static_cast<double>(e.counters().prompt_tokens); });
  w.counter("vllm:generation_tokens", "Number of generation tokens processed.",
            [](const Engine& e) { return static_cast<double>(e.counters().generation_tokens); });
  w.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
            [](const Engine& e) { return static_cast<double>(e.counters().num_preemptions); });
  w.request_success();
  w.ttft_histogram();
  w.cache_config();
  return w.take();
}

}  // namespace lmwarden::sim
