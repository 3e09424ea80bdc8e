// What a forwarded request is before it is routed: the model that serves
// it and the facts that route it, or the error the warden answers instead
// (an empty or unparsable body, no or an unknown model, a missing API key).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/identity.h"
#include "net/http_server.h"
#include "proxy/dialect.h"
#include "proxy/warden.h"

namespace lmwarden::proxy {

// What a forwarded request is, read from it without suspending (so its
// header list lives on the stack, not in a coroutine frame): the model that
// serves it and the facts that route it, or the refusal to send instead.
struct Admission {
  ModelState* model = nullptr;
  core::RequestFacts facts;
  std::optional<net::Response> refusal;
  std::string_view reason;    // of the refusal, as lmwarden_refused_requests_total says it
  std::string unknown_model;  // the name asked for, when no model has it
};

// `stored`: the id in the path of a stored response's own route (dialect.h),
// or "".
Admission admit(const net::Request& request, Dialect dialect, const ModelSet& set,
                std::string_view stored);

}  // namespace lmwarden::proxy
