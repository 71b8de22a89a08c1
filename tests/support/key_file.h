// A key file for encrypted tiers' tests: 64 hex characters (an AES-256 key) of one character, mode
// 0600, in `dir`. Returns its path, empty when it could not be written.
#pragma once

#include <sys/stat.h>

#include <cstdio>
#include <string>

namespace kvtier::testing {

inline std::string WriteKeyFile(const std::string& dir, char hex_digit) {
  const std::string path = dir + "/key";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return "";
  const bool wrote = std::fputs(std::string(64, hex_digit).c_str(), f) >= 0;
  if (std::fclose(f) != 0 || !wrote || ::chmod(path.c_str(), 0600) != 0) return "";
  return path;
}

}  // namespace kvtier::testing
