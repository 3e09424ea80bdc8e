// libFuzzer target: the usage tap and the injected-usage stripper on arbitrary
// response bytes. The first two input bytes choose cut points; the rest is the
// body. Properties checked beyond "no crash":
//   - the tap reads the same usage whether the body arrives whole or cut;
//   - a body's usage read from its end (merge_body_usage) is what the whole
//     parse reads, wherever simdjson accepts the body as an object without a
//     root "message" or "response" wrapper;
//   - the stripper sends the client the same bytes whole or cut, and only ever
//     removes bytes (its output is a subsequence of the input, in order);
//   - the request splice adds exactly the member it promises;
//   - find_usage_key finds the key where std::string_view::find does;
//   - the whole-event gate passes the body on byte for byte however it is
//     cut, and while it holds bytes, what it has passed on ends where an
//     event does (a blank line, by a plain line splitter's reading).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "telemetry/stream_usage_injection.h"
#include "telemetry/usage_tap.h"
#include "telemetry/whole_events.h"
#include "sse_reference.h"

using namespace lmwarden::telemetry;

namespace {

// Gives `feed` the body in three pieces, cut at cut1 and cut2, each from one
// buffer that is reused and scribbled over afterwards, as a relay's read
// buffer is.
template <class Feed>
void feed_cut(std::string_view body, std::size_t cut1, std::size_t cut2, Feed feed) {
  std::string buffer;
  for (std::string_view piece :
       {body.substr(0, cut1), body.substr(cut1, cut2 - cut1), body.substr(cut2)}) {
    buffer.assign(piece);
    feed(std::string_view(buffer));
    buffer.assign(buffer.size(), '#');
  }
}

RequestUsage tap(std::string_view body, std::size_t cut1, std::size_t cut2) {
  UsageTap t;
  feed_cut(body, cut1, cut2, [&](std::string_view piece) { t.feed(piece); });
  t.finish();
  return t.usage();
}

std::string strip(std::string_view body, std::size_t cut1, std::size_t cut2) {
  InjectedUsageStripper s;
  std::string out;
  feed_cut(body, cut1, cut2, [&](std::string_view piece) {
    for (std::string_view v : s.feed(piece)) out.append(v);
  });
  for (std::string_view v : s.finish()) out.append(v);
  return out;
}

// merge_body_usage() against merge_usage(), on documents both must read alike.
bool body_read_agrees(std::string_view body) {
  PaddedBuffer doc;
  doc.append(body);
  UsageFields fast;
  merge_body_usage(doc.padded(), fast);
  simdjson::dom::parser parser;
  simdjson::dom::object root;
  if (parser.parse(doc.view().data(), doc.size(), false).get_object().get(root) !=
      simdjson::SUCCESS) {
    return true;
  }
  for (const simdjson::dom::key_value_pair field : root) {
    if (field.key == "message" || field.key == "response") return true;
  }
  UsageFields full;
  merge_usage(doc.padded(), full);
  return fast == full;
}

// The gate's output for the body cut at cut1 and cut2; aborts when what it
// has passed on while holding bytes does not end an event.
std::string gate(std::string_view body, std::size_t cut1, std::size_t cut2) {
  const auto event_ends = lmwarden::test_support::sse_event_ends(body);
  WholeEventGate g;
  std::string out;
  feed_cut(body, cut1, cut2, [&](std::string_view piece) {
    for (std::string_view v : g.feed(piece)) out.append(v);
    if (!body.starts_with(out)) std::abort();
    if (g.held_bytes() > 0 && !out.empty() && !event_ends.contains(out.size())) std::abort();
  });
  for (std::string_view v : g.finish()) out.append(v);
  return out;
}

bool is_subsequence(std::string_view small, std::string_view big) {
  std::size_t j = 0;
  for (char c : big) {
    if (j < small.size() && small[j] == c) ++j;
  }
  return j == small.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);
  std::size_t cut1 = body.empty() ? 0 : data[0] % (body.size() + 1);
  std::size_t cut2 = body.empty() ? 0 : data[1] % (body.size() + 1);
  if (cut1 > cut2) std::swap(cut1, cut2);

  if (!(tap(body, 0, 0) == tap(body, cut1, cut2))) std::abort();
  if (!body_read_agrees(body)) std::abort();

  const std::string whole = strip(body, 0, 0);
  if (whole != strip(body, cut1, cut2)) std::abort();
  if (!is_subsequence(whole, body)) std::abort();

  if (find_usage_key(body) != body.find("\"usage\"")) std::abort();
  if (gate(body, 0, 0) != body || gate(body, cut1, cut2) != body) std::abort();

  if (const auto spliced = with_stream_usage(body)) {
    if (spliced->size() < body.size() + kIncludeUsageMember.size()) std::abort();
  }
  return 0;
}
