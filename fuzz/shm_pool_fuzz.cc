// Fuzz target: a shm:// pool file as another process (or a damaged /dev/shm) may leave it: the header
// (identity, geometry, checksum), the slots, the index, the page chains and the pin records. Properties:
// no crash or hang; a refused open is InvalidArgument, VersionMismatch, Corruption or IOError with a
// message; a read-only opener's List, Check, Contains, Stats and usage per namespace answer (a chunk
// check is OK, NotFound or Corruption) and leave the file byte for byte as it was.
//
// Each input is tried twice: as it is, and with the header's owner set to this uid and its checksum
// recomputed, so mutated geometry and slots get past those checks to the ones behind them. The read-write path is not fuzzed: it
// takes the pool's robust mutex, which lives in the file (see docs/shared-pool.md, "Damaged pools").
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/xxh3.h"
#include "fuzz_check.h"
#include "kvtier/tier.h"
#include "tiers/shm/shm_layout.h"
#include "tiers/shm/shm_tier.h"

namespace kvtier::fuzz {
namespace {

// One scratch directory per process, removed at exit.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp != nullptr ? tmp : "/tmp") + "/kvtier-fuzz-shm-" + std::to_string(getpid());
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

bool WritePool(const std::string& path, const std::vector<std::byte>& bytes) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return done == bytes.size();
}

std::vector<std::byte> ReadBack(const std::string& path) {
  std::vector<std::byte> out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  std::byte buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

void OpenAndLook(const std::string& dir, const std::vector<std::byte>& bytes) {
  const std::string path = dir + "/kvtier-shm-fuzz";
  if (!WritePool(path, bytes)) return;
  auto url = TierUrl::Parse("shm://fuzz?dir=" + dir);
  KVTIER_FUZZ_CHECK(url.ok());
  auto tier = internal::OpenShmTier(*url, TierOpenOptions{.read_only = true});
  if (!tier.ok()) {
    const Code c = tier.status().code();
    KVTIER_FUZZ_CHECK(c == Code::kInvalidArgument || c == Code::kVersionMismatch || c == Code::kCorruption ||
                      c == Code::kIOError);
    KVTIER_FUZZ_CHECK(!tier.status().message().empty());
    return;
  }
  Tier& t = **tier;
  const TierStats stats = t.Stats();
  KVTIER_FUZZ_CHECK(stats.url == url->ToString());
  (void)internal::ShmNamespaceUsage(t);
  std::vector<ChunkInfo> infos;
  const Status listed = t.List([&](const ChunkInfo& info) {
    infos.push_back(info);
    return infos.size() < 64;
  });
  KVTIER_FUZZ_CHECK(listed.ok());
  for (const ChunkInfo& info : infos) {
    (void)t.Contains(info.id);
    const Status s = t.Check(info);
    KVTIER_FUZZ_CHECK(s.ok() || s.IsNotFound() || s.IsCorruption());
  }
  tier->reset();
  KVTIER_FUZZ_CHECK(ReadBack(path) == bytes);  // looking changed nothing
}

}  // namespace

int FuzzShmPool(const uint8_t* data, size_t size) {
  static const ScratchDir root;
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  OpenAndLook(root.path, bytes);
  if (bytes.size() >= sizeof(internal::shm::PoolHeader)) {
    const uint64_t uid = ::geteuid();  // the seeds' creator may be another uid than this run's
    std::memcpy(bytes.data() + offsetof(internal::shm::PoolHeader, owner_uid), &uid, sizeof(uid));
    const size_t at = offsetof(internal::shm::PoolHeader, geometry_sum);
    const uint64_t sum = XXH3_64bits(bytes.data(), at);
    std::memcpy(bytes.data() + at, &sum, sizeof(sum));
    OpenAndLook(root.path, bytes);
  }
  return 0;
}

}  // namespace kvtier::fuzz

KVTIER_FUZZ_ENTRY(FuzzShmPool)
