#include "file/file_scan.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "core/chunk_format.h"
#include "file/file_layout.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLiveTempMaxAgeS = 3600;

// Every name in `dir` with its type; IOError when the directory cannot be listed.
Result<std::vector<fs::directory_entry>> ListDir(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::directory_entry> out;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) out.push_back(*it);
  if (ec) return Status::FromErrno(ec.value(), "list " + dir.string());
  return out;
}

bool RemoveFile(const fs::path& path) { return ::unlink(path.c_str()) == 0; }

// A temporary is a leftover when its writer is gone, or when it is far older than any write takes
// (the pid may have been reused). A live writer's temporary is left alone, so tools may open the tier
// beside a running engine.
bool IsStaleTemp(const std::string& name, const fs::path& path) {
  const size_t at = name.find(".tmp.");
  const long pid = std::strtol(name.c_str() + at + 5, nullptr, 10);
  if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) return true;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return false;
  return ::time(nullptr) - st.st_mtim.tv_sec > kLiveTempMaxAgeS;
}

bool RemoveIfStaleTemp(const std::string& name, const fs::path& path) {
  return IsStaleTemp(name, path) && RemoveFile(path);
}

// A chunk file is a 4 KiB header plus a payload padded to 4 KiB; anything else is a torn write.
bool PossibleSize(uint64_t size) { return size >= kChunkHeaderSize && size % kChunkAlign == 0; }

Status ScanFanDir(const fs::path& path, const std::string& ns_name, ScanResult* out) {
  KVTIER_ASSIGN_OR_RETURN(auto files, ListDir(path));
  const std::string fan_name = path.filename().string();
  for (const auto& f : files) {
    const std::string name = f.path().filename().string();
    if (IsTempName(name)) {
      out->temp_removed += RemoveIfStaleTemp(name, f.path()) ? 1 : 0;
      continue;
    }
    auto id = ParseChunkPath(ns_name, fan_name, name);
    struct stat st {};
    if (!id || ::lstat(f.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (!PossibleSize(size)) {
      out->bad_size_removed += RemoveFile(f.path()) ? 1 : 0;
      continue;
    }
    out->chunks.push_back(
        {*id, size, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  return Status::OK();
}

}  // namespace

Result<ScanResult> ScanChunkDir(const std::string& dir) {
  ScanResult out;
  KVTIER_ASSIGN_OR_RETURN(auto top, ListDir(dir));
  for (const auto& ns_entry : top) {
    const std::string ns_name = ns_entry.path().filename().string();
    std::error_code ec;
    if (IsTempName(ns_name) && ns_entry.is_regular_file(ec)) {
      out.temp_removed += RemoveIfStaleTemp(ns_name, ns_entry.path()) ? 1 : 0;
      continue;
    }
    if (!DigestFromHex(ns_name).ok() || !ns_entry.is_directory(ec)) continue;
    KVTIER_ASSIGN_OR_RETURN(auto fans, ListDir(ns_entry.path()));
    for (const auto& fan : fans) {
      if (fan.path().filename().string().size() != 2 || !fan.is_directory(ec)) continue;
      KVTIER_RETURN_IF_ERROR(ScanFanDir(fan.path(), ns_name, &out));
    }
  }
  std::sort(out.chunks.begin(), out.chunks.end(),
            [](const ScannedChunk& a, const ScannedChunk& b) { return a.mtime_ns < b.mtime_ns; });
  return out;
}

}  // namespace kvtier::internal
