// vLLM's two routes on kept Responses replies, GET /v1/responses/{id}
// (retrieve_responses) and POST /v1/responses/{id}/cancel (cancel_responses):
// pure functions from the request's target to the reply's status and body.
//
// The simulator has no background mode, so every kept response is finished:
// a retrieve gives it back, a cancel is refused as vLLM refuses one of a
// response that is neither queued nor in progress, and `stream=true` (vLLM's
// replay of a background response's events) is refused, as there are no
// events kept to replay. An id never kept — any id without the store — is
// the same 404 as a chained request to it gets.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "sim/response_store.h"

namespace lmwarden::sim {

enum class StoredResponseAction { kRetrieve, kCancel };

struct StoredResponseRoute {
  StoredResponseAction action;
  std::string id;  // percent-decoded, as FastAPI hands a path parameter over
};

// The route `path` (a target without its query) names, or none. As in
// FastAPI, the path is percent-decoded first and an id is one non-empty
// segment: an id with a `/` in it (`%2F` included) matches neither route.
std::optional<StoredResponseRoute> stored_response_route(std::string_view path);

// vLLM's 404 for response `id` never kept (or dropped), whether a request
// names it in `previous_response_id` or in the path.
std::string response_not_found_body(std::string_view id);

struct StoredResponseReply {
  int status = 200;
  std::string body;
};

// The answer to `route`, whose method was checked; `query` is what follows
// the target's `?` (empty if none). Only a retrieve reads it: `stream`, a
// boolean as pydantic reads one, and `starting_after`, an integer; a value of
// another kind is a 400, as vLLM answers a request that fails validation.
StoredResponseReply stored_response_reply(const ResponseStore& store,
                                          const StoredResponseRoute& route, std::string_view query);

}  // namespace lmwarden::sim
