// A header field found by its known name (Beast's field enum) in one pass
// over a list of fields that compares integers: for the fields of a reply
// (ReplyParser's list has no lookup of its own) or of Beast's fields, whose
// own lookup searches an ordered index by case-insensitive comparison. A
// Request has find() for this.
#pragma once

#include <boost/beast/http/field.hpp>
#include <string_view>

namespace lmwarden::net {

// The value of the first field called `name` (a known field), or "" if none.
// `Fields`: Beast's fields, or any range of elements with name() and value().
template <class Fields>
std::string_view first_value(const Fields& fields, boost::beast::http::field name) {
  for (const auto& f : fields)
    if (f.name() == name) return f.value();
  return {};
}

}  // namespace lmwarden::net
