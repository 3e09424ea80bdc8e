// Health as the data plane sees it, between the scraper's probes: a server
// that could not be reached is taken out of service at once, and a replica
// whose server errors (5xx) another replica then served well is ejected
// (docs/reliability.md).
#pragma once

#include <string_view>

#include "config/config.h"

namespace lmwarden::proxy {

struct ModelState;

// A server the data plane could not reach takes no new work, and its
// conversations re-home, until the scraper's next good probe of it (rather
// than after `unhealthy_after` failed probes, each request meanwhile paying a
// failed connect first).
void take_out_of_service(ModelState& model, int backend, std::string_view why);

// Passive health. A server error (5xx) counts against a replica only when
// the same request was then served well elsewhere: the evidence that the
// fault was the replica's, not the request's (a prompt every engine refuses
// with a 500 ejects nothing). eject_after_5xx of them in a row, with no good
// reply between, eject it (Router::eject) for eject_for. The count is the
// replica's telemetry's, so that a good reply takes no lock.
struct ServerError {
  int replica;
  int backend;
  int rank;
};
void note_served_well(ModelState& model, int replica);
void note_server_error(ModelState& model, const config::Config& config, const ServerError& e);

}  // namespace lmwarden::proxy
