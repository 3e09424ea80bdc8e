#include "net/request.h"

#include <algorithm>
#include <boost/beast/http/rfc7230.hpp>
#include <cassert>
#include <cstring>
#include <limits>

#include "common/ascii.h"

namespace lmwarden::net {

// ---------------------------------------------------------------- Body

void Body::reserve(std::size_t n) {
  if (n <= capacity_) return;
  const std::size_t grown = std::max(n, capacity_ + capacity_ / 2);
  auto bytes = std::make_unique_for_overwrite<char[]>(grown + kBodyPadding);
  if (size_ > 0) std::memcpy(bytes.get(), bytes_.get(), size_);
  bytes_ = std::move(bytes);
  capacity_ = grown;
}

void Body::resize_unchecked(std::size_t n) noexcept {
  size_ = n;
  if (bytes_) std::memset(bytes_.get() + n, 0, kBodyPadding);
}

void Body::resize_for_overwrite(std::size_t n) {
  reserve(n);
  resize_unchecked(n);
}

void Body::assign(std::string_view bytes) {
  if (bytes.empty()) return clear();
  reserve(bytes.size());
  std::memcpy(bytes_.get(), bytes.data(), bytes.size());
  resize_unchecked(bytes.size());
}

void Body::append(std::string_view bytes) {
  if (bytes.empty()) return;
  const std::size_t at = size_;
  reserve(at + bytes.size());
  std::memcpy(bytes_.get() + at, bytes.data(), bytes.size());
  resize_unchecked(at + bytes.size());
}

void Body::clear_and_shrink(std::size_t keep) noexcept {
  if (capacity_ > keep) {
    bytes_.reset();
    size_ = capacity_ = 0;
  }
  clear();
}

// ---------------------------------------------------------------- Request

Request::Request(http::verb method, std::string_view target, unsigned version) {
  const auto name = http::to_string(method);
  set_start_line(method, {name.data(), name.size()}, target, version);
}

Request::Span Request::store(std::string_view bytes) {
  assert(text_.size() + bytes.size() <= std::numeric_limits<std::uint32_t>::max());
  const Span span{static_cast<std::uint32_t>(text_.size()), static_cast<std::uint32_t>(bytes.size())};
  text_.append(bytes);
  return span;
}

void Request::set_method(http::verb method) {
  const auto name = http::to_string(method);
  method_ = method;
  method_string_ = store({name.data(), name.size()});
}

void Request::set_start_line(http::verb method, std::string_view method_string,
                             std::string_view target, unsigned version) {
  method_ = method;
  version_ = version;
  if (text_.capacity() < kFirstHeaderBytes) text_.reserve(kFirstHeaderBytes);
  method_string_ = store(method_string);
  target_ = store(target);
}

void Request::insert(http::field name, std::string_view name_string, std::string_view value) {
  const Span name_span = store(name_string);
  slots_.push_back({name, name_span, store(value)});
}

void Request::insert(std::string_view name, std::string_view value) {
  insert(http::string_to_field(name), name, value);
}

std::string_view Request::operator[](http::field name) const noexcept {
  return find(name).value_or(std::string_view{});
}

std::string_view Request::operator[](std::string_view name) const noexcept {
  return find(name).value_or(std::string_view{});
}

std::optional<std::string_view> Request::find(http::field name) const noexcept {
  for (const Slot& s : slots_)
    if (s.name == name) return view(s.value);
  return std::nullopt;
}

std::optional<std::string_view> Request::find(std::string_view name) const noexcept {
  // A known name is compared as its number; only other names as text.
  if (const http::field known = http::string_to_field(name); known != http::field::unknown)
    return find(known);
  for (const Slot& s : slots_)
    if (s.name == http::field::unknown && ascii_iequals(view(s.name_string), name))
      return view(s.value);
  return std::nullopt;
}

bool Request::keep_alive() const noexcept {
  // RFC 9112 §9.3, over every Connection field the request has.
  bool close = false;
  bool keep_alive = false;
  for (const Slot& s : slots_) {
    if (s.name != http::field::connection) continue;
    for (const auto token : http::token_list{view(s.value)}) {
      close |= ascii_iequals(token, "close");
      keep_alive |= ascii_iequals(token, "keep-alive");
    }
  }
  if (close) return false;
  return version_ >= 11 || keep_alive;
}

void Request::clear() noexcept {
  method_ = http::verb::unknown;
  version_ = 11;
  method_string_ = target_ = {};
  slots_.clear();
  text_.clear();
  if (text_.capacity() > kKeptHeaderBytes) std::string().swap(text_);
  body_.clear_and_shrink(kKeptBodyBytes);
}

}  // namespace lmwarden::net
