// An event stream split the plain way an SSE client splits it, to check the
// fast paths against (tests/unit and fuzz/ both use it).
#pragma once

#include <cstddef>
#include <set>
#include <string_view>

namespace lmwarden::test_support {

// The offsets just past each blank line of `stream`: where its events end.
// Lines end at LF, CR LF or CR, as in the SSE specification; a CR at the very
// end counts as a line end.
inline std::set<std::size_t> sse_event_ends(std::string_view stream) {
  std::set<std::size_t> ends;
  bool line_empty = true;
  for (std::size_t i = 0; i < stream.size(); ++i) {
    const char c = stream[i];
    if (c != '\n' && c != '\r') {
      line_empty = false;
      continue;
    }
    std::size_t end = i + 1;
    if (c == '\r' && end < stream.size() && stream[end] == '\n') ++end;
    if (line_empty) ends.insert(end);
    line_empty = true;
    i = end - 1;
  }
  return ends;
}

}  // namespace lmwarden::test_support
