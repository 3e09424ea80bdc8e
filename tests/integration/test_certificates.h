// Certificates for one test, made with the openssl command: a CA, server
// certificates it signed for 127.0.0.1 and localhost and for another host,
// a client certificate it signed, and a second CA that signed nothing here. Keys are P-256, the
// certificates valid for two days; all removed with the test's directory.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "scratch.h"

namespace lmwarden::testing {

class TestCertificates {
 public:
  TestCertificates() {
    make_ca("ca");
    make_ca("other-ca");
    make_signed("server", "redis", "IP:127.0.0.1,DNS:localhost");
    make_signed("client", "warden", "DNS:warden");
    make_signed("elsewhere", "redis-elsewhere", "DNS:redis.elsewhere.invalid");
  }

  // "<name>.crt" / "<name>.key" for ca, other-ca, server, client and
  // elsewhere (a server certificate for another host).
  std::string crt(const std::string& name) const { return dir_.file(name + ".crt"); }
  std::string key(const std::string& name) const { return dir_.file(name + ".key"); }

 private:
  static constexpr const char* kNewKey =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 ";

  void run(const std::string& command) const {
    const std::string quiet = command + " >" + dir_.file("openssl.log") + " 2>&1";
    if (std::system(quiet.c_str()) != 0)
      throw std::runtime_error("openssl failed (is the openssl package installed?): " + command);
  }

  void make_ca(const std::string& name) const {
    run(std::string(kNewKey) + "-subj /CN=lmwarden-test-" + name + " -keyout " + key(name) +
        " -out " + crt(name));
  }

  void make_signed(const std::string& name, const std::string& common_name,
                   const std::string& alt_names) const {
    run(std::string(kNewKey) + "-CA " + crt("ca") + " -CAkey " + key("ca") +
        " -subj /CN=" + common_name + " -addext subjectAltName=" + alt_names +
        " -addext basicConstraints=critical,CA:FALSE -keyout " + key(name) + " -out " + crt(name));
  }

  TempDir dir_{"lmwarden-certs"};
};

}  // namespace lmwarden::testing
