// The shared_homes and saved_homes sections of the warden's file, read as
// config_loader.cpp reads the rest (whose Loader is built on this), into the
// same list of errors.
#pragma once

#include <string>
#include <string_view>

#include "config/config.h"
#include "config/yaml_reader.h"

namespace lmwarden::config {

class HomesSections : protected yaml::Reader {
 protected:
  explicit HomesSections(std::string_view file) : Reader(file) {}

  void read_shared_homes(const yaml::Entry& section, Config& config);
  void read_saved_homes(const yaml::Entry& section, Config& config);

 private:
  // saved_homes.path, beyond being a file the warden can replace: not a file
  // kept for something else, and its lock usable.
  void check_homes_path(const yaml::Entry& e, const std::string& path, const Config& config);
  // shared_homes.tls_*: files for a rediss:// URL only; the warden's
  // certificate and its key together.
  void read_redis_tls(const yaml::MapView& map, bool tls, SharedHomes& homes);
};

}  // namespace lmwarden::config
