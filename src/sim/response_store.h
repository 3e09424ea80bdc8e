// The Responses API's store, as vLLM keeps it when started with
// VLLM_ENABLE_RESPONSES_API_STORE=1: a response id → the messages its request
// was built from and the response it answered, so that a later request naming
// it in `previous_response_id` continues that conversation, and
// GET /v1/responses/{id} gives the response back. Pure code, no I/O;
// the server's one I/O thread owns it, so it takes no lock.
//
// Bounded, unlike vLLM's (which keeps every response until the process
// ends): past `limit` responses the oldest stored one is dropped, first in,
// first out (a lookup does not refresh it), and a request chained to it gets
// the 404 of an id never stored.
//
// A turn is kept as a link to the turn it continued plus what its own request
// added (its instructions and its input), not as a copy of the whole
// conversation: an agent's session of N chained turns would otherwise hold
// O(N²) text. A dropped turn that a stored one continues stays alive through
// that link, so chains stay whole; their length is bounded by the context
// length, since every turn adds tokens to the next one's prompt.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/chat_template.h"

namespace lmwarden::sim {

struct StoredTurn {
  StoredTurn() = default;
  StoredTurn(const StoredTurn&) = delete;
  StoredTurn& operator=(const StoredTurn&) = delete;
  // Unlinks the chain iteratively: destroying a long one link by link would
  // recurse once per turn.
  ~StoredTurn();

  // The turn this one continued; null for a conversation's first.
  std::shared_ptr<const StoredTurn> previous;
  // What the request added: its instructions (a system message, or none),
  // which vLLM puts before the stored conversation, and its input after it.
  std::vector<engine::ChatMessage> instructions;
  std::vector<engine::ChatMessage> input;
  // The reply's text.
  std::string output;
  // The response object as its client got it (the body of a reply not
  // streamed; the `response` of a stream's last event), the answer to
  // GET /v1/responses/{id}. It holds the output text a second time, so a
  // kept turn costs about twice its reply's length; rebuilding the object on
  // request instead would mean keeping its usage, ids and timestamps apart.
  std::string response;
};

// The messages a request continuing `turn` starts from, laid out as vLLM's
// _construct_input_messages does: the messages `turn`'s request was built
// from (which hold its own predecessors the same way), then its output as one
// assistant message (none when the output was empty).
std::vector<engine::ChatMessage> conversation_of(const StoredTurn& turn);

class ResponseStore {
 public:
  static constexpr std::size_t kDefaultLimit = 100'000;

  explicit ResponseStore(std::size_t limit = kDefaultLimit);

  // The stored turn of response `id`, or null.
  std::shared_ptr<const StoredTurn> find(const std::string& id) const;
  // Stores `turn` as response `id`, dropping the oldest when full. Ids are
  // unique per simulator; a repeated one replaces the turn and keeps its age.
  void add(std::string id, std::shared_ptr<const StoredTurn> turn);
  std::size_t size() const noexcept { return by_id_.size(); }

 private:
  std::size_t limit_;
  std::unordered_map<std::string, std::shared_ptr<const StoredTurn>> by_id_;
  std::deque<std::string> order_;  // stored ids, oldest first
};

}  // namespace lmwarden::sim
