// libFuzzer target: conversation identity on arbitrary request bytes. The first
// input byte is split into a header value length; those bytes become the
// X-data-parallel-rank and session-id header values, the rest is the body.
// Properties checked beyond "no crash / no sanitizer report":
//   - a padded in-place scan and a copied scan give the same result;
//   - an error leaves the request anonymous; a session always carries the hash
//     of its id and a non-empty id, except one found by its opening (bit 0x40
//     of the first byte lists that source alone), which has none;
//   - decode_claude_user_id never yields an empty id.
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
//     fuzz/identity_fuzz.cpp src/core/identity.cpp src/config/config.cpp src/common/hash.cpp \
//     -lsimdjson -lfmt -o build/fuzz/identity_fuzz
//   build/fuzz/identity_fuzz -max_total_time=60 -max_len=8192 CORPUS
// Seeds: the request bodies of /work/shared/fixtures/clients/*.json, each
// prefixed with one byte (0x00).
#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/hash.h"
#include "core/identity.h"

using namespace lmwarden;
using namespace lmwarden::core;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t header_len = std::min<std::size_t>(data[0] % 16, size - 1);
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string header_value(input.substr(0, header_len));
  const std::string_view body = input.substr(header_len);

  const std::vector<HeaderField> headers = {{"X-Data-Parallel-Rank", header_value},
                                            {"session-id", header_value}};
  IdentityOptions options;
  options.honor_client_rank = (data[0] & 0x10) != 0;
  if (data[0] & 0x20)
    options.sources = {{config::SessionSource::Kind::kBody, "a.b"},
                       {config::SessionSource::Kind::kClaudeUserId, "metadata.user_id"}};
  const bool opening = (data[0] & 0x40) != 0;
  if (opening) options.sources = {{config::SessionSource::Kind::kOpening, ""}};

  std::string padded(body);
  padded.reserve(body.size() + simdjson::SIMDJSON_PADDING);
  const ExtractResult in_place = extract_request_facts(headers, padded, padded.capacity(), options);
  const ExtractResult copied = extract_request_facts(headers, body, body.size(), options);

  if (in_place.error != copied.error || in_place.facts.model != copied.facts.model ||
      in_place.facts.stream != copied.facts.stream ||
      in_place.facts.stream_include_usage != copied.facts.stream_include_usage ||
      !(in_place.facts.identity == copied.facts.identity) ||
      in_place.facts.session_id != copied.facts.session_id)
    std::abort();
  const Identity& id = copied.facts.identity;
  const std::string& session_id = copied.facts.session_id;
  if (copied.error != BodyError::kNone && id.kind != IdentityKind::kAnonymous) std::abort();
  if (id.kind == IdentityKind::kSession && !opening &&
      (session_id.empty() || id.session_hash != stable_hash(session_id)))
    std::abort();
  if (opening && !session_id.empty()) std::abort();
  if (id.kind != IdentityKind::kSession && !session_id.empty()) std::abort();

  if (auto decoded = decode_claude_user_id(body); decoded && decoded->empty()) std::abort();
  (void)parse_client_rank(header_value);
  return 0;
}
