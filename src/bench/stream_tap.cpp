#include "bench/stream_tap.h"

#include <nlohmann/json.hpp>

namespace lmwarden::bench {
namespace {

using nlohmann::json;

// The end of the next event in `s` (index past its blank line) and the length
// of its separator, or npos. Events end with a blank line: "\n\n" or "\r\n\r\n".
std::pair<std::size_t, std::size_t> next_event_end(std::string_view s) {
  const std::size_t lf = s.find("\n\n");
  const std::size_t crlf = s.find("\r\n\r\n");
  if (crlf != std::string_view::npos && (lf == std::string_view::npos || crlf < lf))
    return {crlf, 4};
  if (lf != std::string_view::npos) return {lf, 2};
  return {std::string_view::npos, 0};
}

std::optional<std::int64_t> int_at(const json& j, const char* a, const char* b) {
  if (!j.is_object() || !j.contains(a) || !j[a].is_object()) return std::nullopt;
  const json& inner = j[a];
  if (!inner.contains(b) || !inner[b].is_number_integer()) return std::nullopt;
  return inner[b].get<std::int64_t>();
}

}  // namespace

std::optional<std::string> error_message(const json& error) {
  if (error.is_string()) return error.get<std::string>();
  if (error.is_object() && error.contains("message") && error["message"].is_string())
    return error["message"].get<std::string>();
  return std::nullopt;
}

bool StreamTap::feed(std::string_view bytes) {
  const bool had_first = first_token_seen();
  pending_.append(bytes);
  std::size_t consumed = 0;
  for (;;) {
    const std::string_view rest = std::string_view(pending_).substr(consumed);
    const auto [end, sep] = next_event_end(rest);
    if (end == std::string_view::npos) break;
    std::string_view block = rest.substr(0, end);
    consumed += end + sep;
    std::string_view event;
    std::string data;
    while (!block.empty()) {
      const std::size_t nl = block.find('\n');
      std::string_view line = block.substr(0, nl);
      block = nl == std::string_view::npos ? std::string_view{} : block.substr(nl + 1);
      if (line.ends_with('\r')) line.remove_suffix(1);
      auto value = [&](std::string_view field) {
        std::string_view v = line.substr(field.size());
        if (v.starts_with(' ')) v.remove_prefix(1);
        return v;
      };
      if (line.starts_with("event:")) {
        event = value("event:");
      } else if (line.starts_with("data:")) {
        if (!data.empty()) data += '\n';
        data += value("data:");
      }
    }
    if (!data.empty()) on_event(event, data);
  }
  pending_.erase(0, consumed);
  return !had_first && first_token_seen();
}

void StreamTap::on_event(std::string_view event, std::string_view data) {
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return;  // not ours to judge; keep reading
  if (event == "error" || (j.contains("error") && !j.contains("choices"))) {
    error_ = error_message(j.contains("error") ? j["error"] : j).value_or(std::string(data));
    done_ = true;
    return;
  }
  if (dialect_ == workload::Dialect::kOpenAi) {
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const json& choice = j["choices"][0];
      if (choice.contains("delta") && choice["delta"].is_object()) {
        add_piece(choice["delta"], "content");
      }
    }
    if (auto n = int_at(j, "usage", "completion_tokens")) usage_output_ = n;
    return;
  }
  const std::string_view type = j.contains("type") && j["type"].is_string()
                                    ? std::string_view(j["type"].get_ref<const std::string&>())
                                    : event;
  if (dialect_ == workload::Dialect::kResponses) {
    on_responses_event(type, j);
    return;
  }
  if (type == "content_block_delta" && j.contains("delta") && j["delta"].is_object()) {
    add_piece(j["delta"], "text");
  } else if (type == "message_delta") {
    if (auto n = int_at(j, "usage", "output_tokens")) usage_output_ = n;
  } else if (type == "message_stop") {
    done_ = true;
  }
}

// Responses: text in `response.output_text.delta`; the last event is
// `response.completed` or `response.incomplete` (cut at max_output_tokens),
// whose response carries usage.output_tokens, or `response.failed`.
void StreamTap::on_responses_event(std::string_view type, const nlohmann::json& j) {
  if (type == "response.output_text.delta") {
    add_piece(j, "delta");
    return;
  }
  if (type != "response.completed" && type != "response.incomplete" && type != "response.failed")
    return;
  done_ = true;
  if (!j.contains("response") || !j["response"].is_object()) return;
  const json& response = j["response"];
  if (auto n = int_at(response, "usage", "output_tokens")) usage_output_ = n;
  if (type == "response.failed") {
    error_ = (response.contains("error") ? error_message(response["error"]) : std::nullopt)
                 .value_or("response.failed");
  }
}

void StreamTap::add_piece(const nlohmann::json& holder, const char* field) {
  if (!holder.contains(field) || !holder[field].is_string()) return;
  const auto& piece = holder[field].get_ref<const std::string&>();
  if (piece.empty()) return;
  text_ += piece;
  ++content_pieces_;
}

}  // namespace lmwarden::bench
