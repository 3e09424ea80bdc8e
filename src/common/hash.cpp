#include "common/hash.h"

#include <fmt/format.h>

namespace lmwarden {

std::string short_hash(std::uint64_t h) { return fmt::format("{:08x}", h >> 32); }

}  // namespace lmwarden
