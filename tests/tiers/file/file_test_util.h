// Helpers for the file:// and io tests: a temporary directory, a small layout, and payloads whose
// bytes follow from their key, so any misplaced byte is detected.
#pragma once

#include "support/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "kvtier/keys.h"
#include "kvtier/tier.h"

namespace kvtier::testing {


// 2 layers x 2 heads x 16 dims fp16 x 10 tokens = 2560 bytes: not a multiple of 4096, so padding is
// exercised.
inline Layout SmallLayout(uint32_t tokens = 10) { return Layout{2, 2, 16, DType::kFP16, tokens}; }

inline Namespace TestNamespace(const std::string& tenant = "tenant-a", uint32_t tokens = 10) {
  return Namespace::Make("test/model", SmallLayout(tokens), tenant).value();
}

inline ChunkKey KeyNo(const Namespace& ns, uint32_t n) {
  std::vector<uint32_t> tokens(ns.layout().tokens_per_chunk, n);
  return NextChunkKey(ns, nullptr, tokens);
}

inline std::vector<std::byte> PayloadFor(const ChunkKey& key, size_t size) {
  std::vector<std::byte> out(size);
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x = x << 8 | key.bytes[i];
  for (size_t i = 0; i < size; ++i) {
    x += 0x9E3779B97F4A7C15ull;  // splitmix64 step
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    out[i] = static_cast<std::byte>(z >> 56);
  }
  return out;
}

// A whole-chunk view for Put/Get.
struct OnePiece {
  explicit OnePiece(std::vector<std::byte>& b) : read{std::span<std::byte>(b)}, write{std::span<const std::byte>(b)} {}
  std::span<const std::span<std::byte>> dst() const { return {&read, 1}; }
  std::span<const std::span<const std::byte>> src() const { return {&write, 1}; }
  std::span<std::byte> read;
  std::span<const std::byte> write;
};

// Flips one byte of a file at `offset`.
inline void FlipByte(const std::string& path, uint64_t offset) {
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fseek(f, static_cast<long>(offset), SEEK_SET), 0);
  const int c = std::fgetc(f);
  ASSERT_NE(c, EOF);
  ASSERT_EQ(std::fseek(f, static_cast<long>(offset), SEEK_SET), 0);
  std::fputc(c ^ 0x5A, f);
  std::fclose(f);
}

}  // namespace kvtier::testing
