#include "proxy/saved_homes.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <charconv>
#include <nlohmann/json.hpp>

namespace lmwarden::proxy {
namespace {

namespace dom = simdjson::dom;

// A name as a JSON string (escaped; bytes that are not UTF-8 replaced).
std::string json_string(std::string_view text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
    std::int64_t server = 0;
    std::int64_t rank = 0;
    std::int64_t idle_ms = 0;
    if (fields.at(0).get_string().get(key_text) || key_text.size() != 16)
      return bad("the key must be a string of 16 hex digits");
    SavedHome home;
    const auto [end, ec] =
        std::from_chars(key_text.data(), key_text.data() + key_text.size(), home.key, 16);
    if (ec != std::errc{} || end != key_text.data() + key_text.size())
      return bad("the key must be a string of 16 hex digits");
    if (fields.at(1).get_int64().get(server) || server < 0 ||
        static_cast<std::size_t>(server) >= servers)
      return bad("the server must be an index into \"servers\"");
    if (fields.at(2).get_int64().get(rank) || rank < 0 || rank > 1'000'000)
      return bad("the rank must be a whole number, 0 or more");
    if (fields.at(3).get_int64().get(idle_ms) || idle_ms < 0)
      return bad("the idle time must be a whole number of milliseconds, 0 or more");
    home.server = static_cast<int>(server);
    home.rank = static_cast<int>(rank);
    home.idle_ms = idle_ms;
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
  std::int64_t version = 0;
  if (top["lmwarden_saved_homes"].get_int64().get(version))
    return unexpected(std::string("not a file of saved homes (no \"lmwarden_saved_homes\")"));
  if (version != kSavedHomesVersion)
    return unexpected(fmt::format("version {} of the format; this warden reads version {}", version,
                                  kSavedHomesVersion));
  SavedHomes homes;
  if (top["saved_at_unix_ms"].get_int64().get(homes.saved_at_unix_ms))
    return unexpected(std::string("\"saved_at_unix_ms\" must be a whole number"));
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
