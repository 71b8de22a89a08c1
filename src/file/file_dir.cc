#include "file/file_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "core/chunk_format.h"
#include "file/file_layout.h"
#include "file/file_tier.h"
#include "io/chunk_io.h"

namespace kvtier::internal {

bool ProbeDirectIo(const std::string& dir) {
  const std::string probe = TempPathFor(dir + "/.direct-probe");
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644);
  if (fd < 0) return false;
  ::close(fd);
  ::unlink(probe.c_str());
  return true;
}

Result<uint64_t> SettleCapacity(const std::string& dir, uint64_t given) {
  const std::string path = dir + "/" + std::string(kCapacityFileName);
  uint64_t recorded = 0;
  if (std::ifstream in(path); in) in >> recorded;
  if (given == 0) return recorded != 0 ? recorded : kDefaultFileCapacity;
  if (given != recorded) {
    const std::string tmp = TempPathFor(path);
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << given << "\n";
      if (!out.flush()) return Status::IOError("cannot write " + tmp);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return Status::FromErrno(err, "rename " + tmp);
    }
  }
  return given;
}

Status CorruptFileChunkForTesting(const std::string& dir, const ChunkId& id) {
  const std::string path = ChunkFilePath(dir, id.ns, id.key);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  unsigned char b = 0;
  Status s;
  if (::pread(fd, &b, 1, kChunkHeaderSize) != 1) {
    s = Status::IOError("read " + path);
  } else {
    b ^= 0x01;
    if (::pwrite(fd, &b, 1, kChunkHeaderSize) != 1) s = Status::IOError("write " + path);
  }
  ::close(fd);
  return s;
}

}  // namespace kvtier::internal
