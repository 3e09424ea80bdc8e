// JSON text for the wire, the logs and files. Strings from the configuration
// file (a model's name or alias), a loader's message or a client may hold
// bytes that are not UTF-8, and nlohmann's dump() throws on them by default,
// which ended a connection without a reply. They are written as U+FFFD.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace lmwarden {

template <class Json>
std::string json_dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace lmwarden
