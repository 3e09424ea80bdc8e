// What an exception caught as a std::exception_ptr says, for a log line or
// an error: its what(), or that it was of no std::exception type.
#pragma once

#include <exception>
#include <string>

namespace lmwarden {

inline std::string exception_text(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

}  // namespace lmwarden
