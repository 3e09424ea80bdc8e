// Header fields found by their known name (Beast's field enum) in one pass
// over a message's fields that compares integers. For the dozen fields a
// request or reply carries this is cheaper than the fields' own lookup, an
// ordered index searched by case-insensitive string comparison.
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

// Whether a field called `name` (a known field) is present.
template <class Fields>
bool has_field(const Fields& fields, boost::beast::http::field name) {
  for (const auto& f : fields)
    if (f.name() == name) return true;
  return false;
}

}  // namespace lmwarden::net
