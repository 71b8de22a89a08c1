// A key file for encrypted tiers' tests: 64 hex characters (an AES-256 key) of one character, mode
// 0600, in `dir`. Returns its path, empty when it could not be written.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <string>

#include "core/chunk_cipher.h"

namespace kvtier::testing {

inline std::string WriteKeyFile(const std::string& dir, char hex_digit) {
  const std::string path = dir + "/key";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return "";
  const bool wrote = std::fputs(std::string(64, hex_digit).c_str(), f) >= 0;
  if (std::fclose(f) != 0 || !wrote || ::chmod(path.c_str(), 0600) != 0) return "";
  return path;
}

// The cipher of a fresh key file (WriteKeyFile) in `dir`; null, with a failed expectation, when the
// file could not be written or read.
inline std::shared_ptr<const internal::ChunkCipher> KeyFileCipher(const std::string& dir, char hex_digit) {
  const std::string path = WriteKeyFile(dir, hex_digit);
  EXPECT_FALSE(path.empty()) << "no key file in " << dir;
  auto cipher = internal::ChunkCipher::FromKeyFile(path);
  EXPECT_TRUE(cipher.ok()) << cipher.status().ToString();
  return cipher.ok() ? *cipher : nullptr;
}

}  // namespace kvtier::testing
