// Fuzz target: chunk files as the persistent tiers read them back from storage, through both the
// parallel reader (ChunkReader::ReadMany) and the scrubber (VerifyChunkFile). Properties: no crash;
// a read reported OK delivered exactly the stored payload, whose checksum matches its header; the
// reader and the scrubber agree on whether the file is a valid chunk.
//
// Input: byte 0 = mode (bit 0: repair the header checksum; bit 1: also repair the payload checksum, so
// valid chunks are reached; bit 2: ask for the wrong key), the rest = the file's bytes.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/chunk_format.h"
#include "fuzz_check.h"
#include "io/chunk_io.h"
#include "io/filesystem.h"

namespace kvtier::fuzz {
namespace {

using internal::kChunkHeaderSize;
constexpr size_t kFieldsEnd = 104;

void Repair(std::vector<std::byte>& f, bool payload_too) {
  if (f.size() < kFieldsEnd + 8) return;
  const uint64_t magic = internal::kChunkMagic;
  std::memcpy(f.data(), &magic, 8);
  if (payload_too) {
    uint64_t n = 0;
    std::memcpy(&n, f.data() + 88, 8);
    const uint64_t avail = f.size() > kChunkHeaderSize ? f.size() - kChunkHeaderSize : 0;
    if (n > avail) n = avail;  // make the length honest too
    std::memcpy(f.data() + 88, &n, 8);
    const uint64_t sum = internal::PayloadChecksum(std::span<const std::byte>(f.data() + kChunkHeaderSize, n));
    std::memcpy(f.data() + 96, &sum, 8);
  }
  const uint64_t sum = internal::PayloadChecksum(std::span<const std::byte>(f.data(), kFieldsEnd));
  std::memcpy(f.data() + kFieldsEnd, &sum, 8);
}

// One scratch directory per process, removed at exit; the chunk file is "chunk" inside it, read through
// a FileSystem rooted there, as the tiers read theirs.
constexpr const char* kScratchName = "chunk";

struct ScratchDir {
  std::string path;
  std::shared_ptr<internal::FileSystem> fs;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const ScratchDir& Scratch() {
  static const ScratchDir dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    ScratchDir d;
    d.path = std::string(tmp != nullptr ? tmp : "/tmp") + "/kvtier-fuzz-chunk-" + std::to_string(getpid());
    auto fs = internal::OpenPosixFileSystem(d.path, internal::PosixFsOptions{.create = true});
    if (fs.ok()) d.fs = *fs;
    return d;
  }();
  return dir;
}

internal::ChunkReader& Reader() {
  static auto reader = [] {
    internal::ReaderOptions o;
    o.direct_io = false;  // the scratch file may live on tmpfs
    o.use_io_uring = false;
    o.fallback_threads = 1;
    return internal::ChunkReader::Create(o);
  }();
  return *reader;
}

}  // namespace

int FuzzChunkFile(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::vector<std::byte> file(size - 1);
  if (!file.empty()) std::memcpy(file.data(), data + 1, size - 1);
  if (mode & 1) Repair(file, mode & 2);
  const ScratchDir& scratch = Scratch();
  if (scratch.fs == nullptr) return 0;
  FILE* f = std::fopen((scratch.path + "/" + kScratchName).c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(file.data(), 1, file.size(), f);
  std::fclose(f);

  // Ask for the chunk the header names (when it decodes), so the reader can succeed.
  ChunkId expected;
  uint64_t payload_bytes = 64;
  if (auto h = internal::DecodeChunkHeader(file); h.ok()) {
    expected = h->id;
    payload_bytes = h->payload_bytes;
  }
  if (mode & 4) expected.key.bytes[5] ^= 1;
  if (payload_bytes > (1u << 20)) payload_bytes = 64;  // bound memory; a wrong size is a valid test
  std::vector<std::byte> dst(payload_bytes);
  const std::span<std::byte> piece(dst);
  internal::ChunkRead read;
  read.fs = scratch.fs.get();
  read.path = kScratchName;
  read.expected = expected;
  read.dst = ScatterList(&piece, 1);
  Reader().ReadMany(std::span<internal::ChunkRead>(&read, 1));
  const Code c = read.status.code();
  KVTIER_FUZZ_CHECK(c == Code::kOk || c == Code::kCorruption || c == Code::kInvalidArgument ||
                    c == Code::kVersionMismatch || c == Code::kIOError || c == Code::kNotFound);
  auto scrub = internal::VerifyChunkFile(*scratch.fs, kScratchName, expected);
  if (read.status.ok()) {
    KVTIER_FUZZ_CHECK(!(mode & 4));
    KVTIER_FUZZ_CHECK(file.size() >= kChunkHeaderSize + payload_bytes);
    KVTIER_FUZZ_CHECK(payload_bytes == 0 ||
                      std::memcmp(dst.data(), file.data() + kChunkHeaderSize, payload_bytes) == 0);
    KVTIER_FUZZ_CHECK(scrub.ok());
  }
  if (scrub.ok() && c != Code::kInvalidArgument) KVTIER_FUZZ_CHECK(read.status.ok());
  if (!read.status.ok()) {  // a failed read leaves no stored byte in the destination
    for (std::byte b : dst) KVTIER_FUZZ_CHECK(b == std::byte{0});
  }
  return 0;
}

}  // namespace kvtier::fuzz

KVTIER_FUZZ_ENTRY(FuzzChunkFile)
