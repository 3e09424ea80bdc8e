#include "proxy/admission.h"

#include <boost/container/small_vector.hpp>
#include <mutex>
#include <string>

#include "common/ascii.h"
#include "common/coarse_clock.h"
#include "common/hash.h"
#include "core/identity.h"
#include "proxy/api.h"
#include "proxy/dialect.h"

namespace lmwarden::proxy {

namespace http = net::http;

namespace {

// The client's credential: `Authorization: Bearer K` (OpenAI) or `x-api-key: K`
// (Anthropic); a client that sends both is let in when either is a key.
bool client_key_accepted(const net::Request& request, const std::vector<std::string>& keys) {
  const auto accepted = [&](std::string_view offered) {
    bool ok = false;
    for (const auto& k : keys) ok |= constant_time_equal(offered, k);
    return !offered.empty() && ok;
  };
  const auto bearer = bearer_credentials(request[http::field::authorization]);
  return accepted(request["x-api-key"]) || (bearer && accepted(*bearer));
}

// The model whose router remembers the stored response `key`, if any.
ModelState* holding_response(const ModelSet& set, std::uint64_t key) {
  const auto now = coarse_steady_now();
  for (const auto& m : set.models) {
    std::lock_guard lock{m->mutex};
    if (m->router.holds_response(key, now)) return m.get();
  }
  return nullptr;
}

}  // namespace

// `stored`: the id in the path of a stored response's own route (dialect.h),
// or "".
Admission admit(const net::Request& request, Dialect dialect, const ModelSet& set,
                std::string_view stored) {
  // A stored response's routes carry no body. Every other inference route
  // wants a JSON object, as vLLM does: an empty body (which would scan as one
  // naming nothing) would reach it only to be refused there.
  if (stored.empty() && request.body().empty())
    return {.refusal = error_response(dialect, http::status::bad_request,
                                      "invalid request body: it is empty; a JSON object is "
                                      "expected"),
            .reason = "invalid_body"};
  // One pass over the body collects the model's name and every field any
  // model's session sources read; the named model's sources then decide.
  core::BodyScan scan = core::scan_body(request.body(), request.body().capacity(), set.body_fields);
  // A stored response's routes read no body (nor does vLLM): one that is not
  // JSON is no error there.
  if (!stored.empty() && scan.error != core::BodyError::kNone) scan = core::BodyScan{};
  if (scan.error != core::BodyError::kNone) {
    // A compressed body (vLLM decodes none either) is named as such, not as
    // bad JSON; asked only of a body that did not parse.
    const std::string_view coding = request[http::field::content_encoding];
    if (!coding.empty() && !ascii_iequals(coding, "identity"))
      return {.refusal = error_response(
                  dialect, http::status::unsupported_media_type,
                  "the request body is sent with Content-Encoding: " + std::string(coding) +
                      ", which is not decoded here; send it uncompressed"),
              .reason = "unsupported_encoding"};
    return {.refusal = error_response(dialect, http::status::bad_request,
                                      "invalid request body: " + scan.error_detail),
            .reason = "invalid_body"};
  }
  // A stored response's routes go to the model that remembers the response,
  // whatever a body names: vLLM reads no body there, and one naming another
  // model (of the same server, with other keys or none) must not choose
  // whose keys are asked for.
  ModelState* model = stored.empty() ? nullptr : holding_response(set, stable_hash(stored));
  if (!model) {
    if (scan.model.empty()) {
      if (set.models.size() == 1) model = set.models.front().get();
    } else {
      model = set.find(scan.model);
    }
  }
  if (!model && !stored.empty() && scan.model.empty())
    return {.refusal = error_response(dialect, http::status::not_found,
                                      "Response with id '" + std::string(stored) +
                                          "' not found: no model here knows where it is stored",
                                      "invalid_request_error"),  // as vLLM's 404 says it
            .reason = "unknown_response"};
  if (!model) {
    if (scan.model.empty())
      return {.refusal = error_response(dialect, http::status::bad_request,
                                        "the request names no model: its body needs \"model\": "
                                        "\"NAME\" (see GET /v1/models)"),
              .reason = "no_model"};
    return {.refusal = error_response(dialect, http::status::not_found,
                                      "model '" + scan.model + "' is not served here"),
            .reason = "unknown_model",
            .unknown_model = std::move(scan.model)};
  }
  if (!model->api_keys.empty() && !client_key_accepted(request, model->api_keys))
    return {.model = model,
            .refusal =
                error_response(dialect, http::status::unauthorized,
                               "a valid API key is required (Authorization: Bearer or x-api-key)"),
            .reason = "unauthorized"};
  boost::container::small_vector<core::HeaderField, 32> headers;
  for (const auto& field : request) headers.emplace_back(field.name_string(), field.value());
  core::Identity identity = core::resolve_identity(core::HeaderList(headers.data(), headers.size()),
                                                   scan, set.body_fields, model->identity);
  if (!stored.empty()) identity.previous_response = stable_hash(stored);
  return {.model = model,
          .facts = {std::move(scan.model), scan.stream, scan.stream_include_usage,
                    scan.has_stream_options, scan.store, std::move(identity)}};
}

}  // namespace lmwarden::proxy
