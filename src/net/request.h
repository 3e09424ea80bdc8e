// The request a server handler reads: its start line, its header fields in
// the order received, and its body.
//
// Read once per request on the hot path, so it is built for that: the start
// line and the fields are copied, as they are parsed, into one character
// store, and each field is a slot of offsets into it (not a node of an
// ordered index allocated per field, as in Beast's fields). The server keeps
// one Request per connection and clears it between requests, so a kept-alive
// connection's requests reuse its storage and allocate nothing for the header.
// Offsets rather than views keep a Request valid when it is copied or moved.
#pragma once

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <boost/container/small_vector.hpp>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace lmwarden::net {

namespace http = boost::beast::http;

// One header field as it was received: its known name (http::field::unknown
// for others), the name as spelled, and its value. Read like Beast's fields.
class FieldView {
 public:
  constexpr FieldView(http::field name, std::string_view name_string,
                      std::string_view value) noexcept
      : name_(name), name_string_(name_string), value_(value) {}
  constexpr http::field name() const noexcept { return name_; }
  constexpr std::string_view name_string() const noexcept { return name_string_; }
  constexpr std::string_view value() const noexcept { return value_; }

 private:
  http::field name_;
  std::string_view name_string_;
  std::string_view value_;
};

// Padding kept readable after a request body so that it can be parsed in
// place by simdjson (which reads up to 64 bytes past the end).
inline constexpr std::size_t kBodyPadding = 64;

// A request body: bytes read straight into it, then kBodyPadding zero bytes
// past its end. Unlike std::string, it is sized for a read without writing
// zeros over the bytes the read is about to write (a whole pass over a large
// body, which C++20's string has no way to skip).
class Body {
 public:
  Body() = default;
  Body(const Body& other) { assign(other); }
  Body& operator=(const Body& other) {
    if (this != &other) assign(other);
    return *this;
  }
  Body(Body&& other) noexcept { swap(other); }
  Body& operator=(Body&& other) noexcept {
    Body(std::move(other)).swap(*this);
    return *this;
  }

  const char* data() const noexcept { return bytes_ ? bytes_.get() : ""; }
  char* data() noexcept { return bytes_.get(); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  // Bytes readable from data(): at least size() + kBodyPadding once sized.
  std::size_t capacity() const noexcept { return capacity_ ? capacity_ + kBodyPadding : 0; }
  std::string_view view() const noexcept { return {data(), size_}; }
  operator std::string_view() const noexcept { return view(); }
  friend bool operator==(const Body& body, std::string_view bytes) noexcept {
    return body.view() == bytes;
  }

  // Makes the body `n` bytes long. Bytes past what it held before are left
  // as they are, for the caller to write.
  void resize_for_overwrite(std::size_t n);
  // `bytes` must not view this body (growing it may move its bytes first).
  void assign(std::string_view bytes);
  void append(std::string_view bytes);
  void clear() noexcept { resize_unchecked(0); }
  // Clears it and gives back storage beyond `keep` bytes.
  void clear_and_shrink(std::size_t keep) noexcept;

 private:
  void swap(Body& other) noexcept {
    std::swap(bytes_, other.bytes_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
  }
  void reserve(std::size_t n);  // room for n bytes; keeps the content
  void resize_unchecked(std::size_t n) noexcept;

  std::unique_ptr<char[]> bytes_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;  // body bytes the storage holds, not counting the padding
};

class Request {
  struct Slot;

 public:
  // Header bytes and body bytes a cleared request keeps for the next one; a
  // larger store is given back, so that an idle connection holds at most
  // this much (a request's header and a small body reuse it; a large body,
  // rarer, is allocated for its request).
  static constexpr std::size_t kKeptHeaderBytes = 16 * 1024;
  static constexpr std::size_t kKeptBodyBytes = 64 * 1024;
  // Header store made at once for a connection's first request (a usual
  // header fits: no reallocation as the fields come).
  static constexpr std::size_t kFirstHeaderBytes = 1024;

  Request() = default;
  // A request built in code (tests, clients): add its fields with insert().
  Request(http::verb method, std::string_view target, unsigned version = 11);

  http::verb method() const noexcept { return method_; }
  std::string_view method_string() const noexcept { return view(method_string_); }
  std::string_view target() const noexcept { return view(target_); }
  unsigned version() const noexcept { return version_; }
  // Whether the client keeps the connection open after this request: HTTP/1.1
  // unless a Connection field lists "close", HTTP/1.0 only when one lists
  // "keep-alive".
  bool keep_alive() const noexcept;

  // The fields, in the order received (a range of FieldView).
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = FieldView;
    using difference_type = std::ptrdiff_t;
    using reference = FieldView;
    using pointer = void;
    const_iterator() = default;
    FieldView operator*() const noexcept { return owner_->field(*slot_); }
    const_iterator& operator++() noexcept {
      ++slot_;
      return *this;
    }
    const_iterator operator++(int) noexcept {
      const_iterator before = *this;
      ++slot_;
      return before;
    }
    friend bool operator==(const const_iterator& a, const const_iterator& b) noexcept {
      return a.slot_ == b.slot_;
    }

   private:
    friend class Request;
    const_iterator(const Request* owner, const Slot* slot) noexcept : owner_(owner), slot_(slot) {}
    const Request* owner_ = nullptr;
    const Slot* slot_ = nullptr;
  };
  const_iterator begin() const noexcept { return {this, slots_.data()}; }
  const_iterator end() const noexcept { return {this, slots_.data() + slots_.size()}; }
  std::size_t field_count() const noexcept { return slots_.size(); }

  // The value of the first field of that name, or "" when there is none.
  std::string_view operator[](http::field name) const noexcept;
  std::string_view operator[](std::string_view name) const noexcept;  // any case
  // The same, telling an absent field from an empty one.
  std::optional<std::string_view> find(http::field name) const noexcept;
  std::optional<std::string_view> find(std::string_view name) const noexcept;

  // Building (the server's parser, or code): the start line, then each field.
  void set_start_line(http::verb method, std::string_view method_string, std::string_view target,
                      unsigned version);
  void insert(http::field name, std::string_view name_string, std::string_view value);
  void insert(std::string_view name, std::string_view value);
  // Replaces the method (the server hands a HEAD to its handler as a GET).
  void set_method(http::verb method);

  Body& body() noexcept { return body_; }
  const Body& body() const noexcept { return body_; }

  // Forgets the request and keeps its storage (up to the kKept* sizes) for
  // the next one.
  void clear() noexcept;

 private:
  struct Span {
    std::uint32_t at = 0;
    std::uint32_t size = 0;
  };
  struct Slot {
    http::field name;
    Span name_string;
    Span value;
  };

  std::string_view view(Span s) const noexcept { return {text_.data() + s.at, s.size}; }
  FieldView field(const Slot& s) const noexcept {
    return {s.name, view(s.name_string), view(s.value)};
  }
  Span store(std::string_view bytes);

  http::verb method_ = http::verb::unknown;
  unsigned version_ = 11;
  Span method_string_;
  Span target_;
  boost::container::small_vector<Slot, 16> slots_;
  std::string text_;  // the start line's parts and the fields' names and values, back to back
  Body body_;
};

}  // namespace lmwarden::net
