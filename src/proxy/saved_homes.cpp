#include "proxy/saved_homes.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/json_dump.h"

namespace lmwarden::proxy {
namespace {

namespace dom = simdjson::dom;

// A name as a JSON string (escaped; bytes that are not UTF-8 replaced).
std::string json_string(std::string_view text) {
  return json_dump(nlohmann::json(text));
}

void append_homes(std::string& out, std::string_view list, const std::vector<SavedHome>& homes,
                  bool last) {
  fmt::format_to(std::back_inserter(out), "   \"{}\": [", list);
  for (std::size_t i = 0; i < homes.size(); ++i) {
    const SavedHome& h = homes[i];
    fmt::format_to(std::back_inserter(out), "{}\n    [\"{:016x}\", {}, {}, {}]", i == 0 ? "" : ",",
                   h.key, h.server, h.rank, h.idle_ms);
  }
  out += homes.empty() ? "]" : "\n   ]";
  out += last ? "}" : ",\n";
}

// A whole number from `min` to `max`, or nullopt.
std::optional<std::int64_t> whole(dom::element e, std::int64_t min, std::int64_t max) {
  std::int64_t value = 0;
  if (e.get_int64().get(value) || value < min || value > max) return std::nullopt;
  return value;
}

// Reads one list of homes of `model` ("conversations" or "responses").
Result<std::vector<SavedHome>, std::string> read_homes(dom::object model, std::string_view list,
                                                       std::size_t servers,
                                                       std::string_view where) {
  std::vector<SavedHome> homes;
  dom::array entries;
  if (const auto error = model[list].get_array().get(entries); error)
    return unexpected(fmt::format("{}: \"{}\" is {}", where, list,
                                  error == simdjson::NO_SUCH_FIELD ? "missing" : "not a list"));
  homes.reserve(entries.size());
  std::size_t index = 0;
  for (dom::element entry : entries) {
    const auto bad = [&](std::string_view why) {
      return unexpected(fmt::format("{}: {}[{}]: {}", where, list, index, why));
    };
    dom::array fields;
    if (entry.get_array().get(fields) || fields.size() != 4)
      return bad("must be [key, server, rank, idle ms]");
    std::string_view key_text;
    if (fields.at(0).get_string().get(key_text) || key_text.size() != 16)
      return bad("the key must be a string of 16 hex digits");
    SavedHome home;
    const auto [end, ec] =
        std::from_chars(key_text.data(), key_text.data() + key_text.size(), home.key, 16);
    if (ec != std::errc{} || end != key_text.data() + key_text.size())
      return bad("the key must be a string of 16 hex digits");
    const auto server = whole(fields.at(1), 0, static_cast<std::int64_t>(servers) - 1);
    if (!server)
      return bad(fmt::format("the server must be an index into \"servers\" (0 to {})",
                             static_cast<std::int64_t>(servers) - 1));
    const auto rank = whole(fields.at(2), 0, kMaxSavedRank);
    if (!rank)
      return bad(fmt::format("the rank must be a whole number from 0 to {}", kMaxSavedRank));
    const auto idle = whole(fields.at(3), 0, kMaxSavedIdleMs);
    if (!idle)
      return bad(fmt::format("the idle time must be a whole number of milliseconds from 0 to {}",
                             kMaxSavedIdleMs));
    home.server = static_cast<int>(*server);
    home.rank = static_cast<int>(*rank);
    home.idle_ms = *idle;
    homes.push_back(home);
    ++index;
  }
  return homes;
}

Result<SavedModel, std::string> read_model(dom::element element, std::size_t index) {
  const std::string at = fmt::format("models[{}]", index);
  dom::object model;
  if (element.get_object().get(model)) return unexpected(at + ": must be an object");
  SavedModel saved;
  std::string_view name;
  if (model["name"].get_string().get(name) || name.empty())
    return unexpected(at + ": \"name\" must be a non-empty string");
  saved.name = name;
  const std::string where = fmt::format("{} ({})", at, saved.name);
  dom::array servers;
  if (model["servers"].get_array().get(servers))
    return unexpected(where + ": \"servers\" must be a list of server names");
  for (dom::element server : servers) {
    std::string_view text;
    if (server.get_string().get(text))
      return unexpected(where + ": \"servers\" must be a list of server names");
    saved.servers.emplace_back(text);
  }
  auto conversations = read_homes(model, "conversations", saved.servers.size(), where);
  if (!conversations) return unexpected(conversations.error());
  auto responses = read_homes(model, "responses", saved.servers.size(), where);
  if (!responses) return unexpected(responses.error());
  saved.conversations = std::move(conversations).value();
  saved.responses = std::move(responses).value();
  return saved;
}

}  // namespace

std::string format_saved_homes(const SavedHomes& homes) {
  std::string out;
  std::size_t entries = 0;
  for (const SavedModel& m : homes.models) entries += m.conversations.size() + m.responses.size();
  out.reserve(256 + 40 * entries);
  fmt::format_to(std::back_inserter(out),
                 "{{\"lmwarden_saved_homes\": {},\n \"saved_at_unix_ms\": {},\n \"models\": [",
                 kSavedHomesVersion, homes.saved_at_unix_ms);
  for (std::size_t m = 0; m < homes.models.size(); ++m) {
    const SavedModel& model = homes.models[m];
    fmt::format_to(std::back_inserter(out), "{}\n  {{\"name\": {},\n   \"servers\": [",
                   m == 0 ? "" : ",", json_string(model.name));
    for (std::size_t s = 0; s < model.servers.size(); ++s)
      out.append(s == 0 ? "" : ", ").append(json_string(model.servers[s]));
    out += "],\n";
    append_homes(out, "conversations", model.conversations, false);
    append_homes(out, "responses", model.responses, true);
  }
  out += homes.models.empty() ? "]}\n" : "\n ]}\n";
  return out;
}

Result<SavedHomes, std::string> parse_saved_homes(std::string_view text) {
  dom::parser parser;
  const simdjson::padded_string padded{text};
  dom::element root;
  if (const auto error = parser.parse(padded).get(root); error)
    return unexpected(std::string("not JSON: ") + simdjson::error_message(error));
  dom::object top;
  if (root.get_object().get(top)) return unexpected(std::string("not a JSON object"));
  dom::element marker;
  if (top["lmwarden_saved_homes"].get(marker))
    return unexpected(std::string("not a file of saved homes (no \"lmwarden_saved_homes\")"));
  const auto version = whole(marker, 1, std::numeric_limits<std::int64_t>::max());
  if (!version)
    return unexpected(
        std::string("\"lmwarden_saved_homes\" must be the format's version, a whole number"));
  if (*version != kSavedHomesVersion)
    return unexpected(fmt::format("version {} of the format; this warden reads version {}",
                                  *version, kSavedHomesVersion));
  SavedHomes homes;
  dom::element saved_at;
  const auto at =
      top["saved_at_unix_ms"].get(saved_at) ? std::nullopt : whole(saved_at, 0, kMaxSavedAtUnixMs);
  if (!at)
    return unexpected(
        fmt::format("\"saved_at_unix_ms\" must be a whole number of milliseconds from 0 to {}",
                    kMaxSavedAtUnixMs));
  homes.saved_at_unix_ms = *at;
  dom::array models;
  if (top["models"].get_array().get(models))
    return unexpected(std::string("\"models\" must be a list"));
  std::size_t index = 0;
  for (dom::element element : models) {
    auto model = read_model(element, index++);
    if (!model) return unexpected(model.error());
    homes.models.push_back(std::move(model).value());
  }
  return homes;
}

}  // namespace lmwarden::proxy
