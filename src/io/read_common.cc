#include "io/read_common.h"

#include "core/stream_copy.h"
#include "core/thread_annotations.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

namespace kvtier::internal {
namespace {

}  // namespace

Result<OpenedChunk> OpenChunk(FileSystem& fs, const std::string& path, uint64_t payload_bytes, bool direct) {
  OpenedChunk c;
  auto fd = fs.OpenForRead(path, direct);
  if (!fd.ok() && direct && fd.status().code() == Code::kInvalidArgument) {
    fd = fs.OpenForRead(path, false);  // EINVAL: this filesystem refuses O_DIRECT
    direct = false;
  }
  if (!fd.ok()) return fd.status();
  c.fd = std::move(fd).value();
  c.direct = direct;
  struct stat st {};
  if (::fstat(c.fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  c.file_size = static_cast<uint64_t>(st.st_size);
  if (c.file_size < kChunkHeaderSize) {
    return Status::Corruption("chunk truncated: " + path + " holds " + std::to_string(c.file_size) +
                              " bytes, less than a header");
  }
  c.read_len = std::min(AlignUp(c.file_size), StoredChunkBytes(payload_bytes));
  return c;
}

Status ReopenBuffered(FileSystem& fs, const std::string& path, OpenedChunk* chunk) {
  KVTIER_ASSIGN_OR_RETURN(chunk->fd, fs.OpenForRead(path, false));
  chunk->direct = false;
  return Status::OK();
}

Result<uint64_t> PreadAll(FileSystem& fs, int fd, std::byte* buf, uint64_t len, const std::string& path) {
  return PreadAt(fs, fd, buf, len, 0, path);
}

Result<uint64_t> PreadAt(FileSystem& fs, int fd, std::byte* buf, uint64_t len, uint64_t offset,
                         const std::string& path) {
  uint64_t done = 0;
  while (done < len) {
    auto n = fs.ReadAt(fd, buf + done, len - done, offset + done);
    if (!n.ok()) return Status(n.status().code(), "read " + path + ": " + n.status().message(), n.status().retryable());
    if (*n == 0) break;  // end of file; a short read is resumed
    done += *n;
  }
  return done;
}

namespace {

// Decodes the header and checks it against the requested chunk, the file's size, the destination's size
// and the bytes actually read.
// `padded`: a file (header, payload, padding to 4 KiB); else an object (header and payload only).
Result<ChunkHeader> CheckReadHeader(std::span<const std::byte> header_bytes, uint64_t file_size,
                                    uint64_t valid_bytes, const ChunkId& expected, uint64_t want,
                                    bool padded = true) {
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header, DecodeChunkHeader(header_bytes));
  KVTIER_RETURN_IF_ERROR(CheckChunkHeader(header, expected, file_size));
  const uint64_t stored = padded ? StoredChunkBytes(header.payload_bytes) : kChunkHeaderSize + header.payload_bytes;
  if (file_size != stored) {  // extended or cut short behind our back
    return Status::Corruption("chunk " + std::string(padded ? "file" : "object") + " holds " +
                              std::to_string(file_size) + " bytes, a chunk of this payload " + std::to_string(stored));
  }
  if (header.payload_bytes != want) {
    return Status::InvalidArgument("destination holds " + std::to_string(want) +
                                   " bytes but the stored chunk has " +
                                   std::to_string(header.payload_bytes));
  }
  if (valid_bytes < kChunkHeaderSize + want) return Status::Corruption("chunk truncated while being read");
  return header;
}

}  // namespace

unsigned DefaultVerifyThreads() {
  // One per core: the ring thread sleeps in the kernel while reads are in flight, so it does not need a
  // core of its own (2 vCPUs, 32 MiB chunks, one chunk in flight: 3.67 GB/s with one verification
  // thread, 4.13 GB/s with two, where fio read 4.22 and 3.88 GB/s; docs/qualification.md).
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp(cores, 1u, 8u);
}

uint64_t BounceMemoryCap(uint64_t max_inflight_bytes) {
  const uint64_t want = max_inflight_bytes + max_inflight_bytes / 8 + (4ull << 20);
  return std::min<uint64_t>(AlignUp(want, 2ull << 20), 1ull << 30);
}

Result<ChunkHeader> CheckFileHeader(std::span<const std::byte> header, uint64_t file_size,
                                    const ChunkId& expected, uint64_t want) {
  return CheckReadHeader(header, file_size, UINT64_MAX, expected, want);
}

Result<std::unique_ptr<PayloadVerifier>> PayloadVerifier::Make(ChunkHeader header, const ChunkCipher* cipher,
                                                               bool verify_payload) {
  std::unique_ptr<NamespaceKey> key;
  if (header.encrypted()) {
    if (cipher == nullptr) {
      return Status::Corruption("chunk is encrypted and this tier has no key (set key_file=)");
    }
    key = std::make_unique<NamespaceKey>();
    KVTIER_RETURN_IF_ERROR(cipher->DeriveKey(header.id.ns, key.get()));
  } else if (cipher != nullptr) {
    return Status::Corruption("chunk is not encrypted, but this tier accepts only encrypted chunks");
  }
  return std::unique_ptr<PayloadVerifier>(new PayloadVerifier(std::move(header), std::move(key), verify_payload));
}

Status PayloadVerifier::Piece(uint32_t i, GatherList src, ScatterList dst, bool in_place) const {
  if (i >= pieces()) return Status::Internal("piece index out of range");
  std::vector<std::span<const std::byte>> in;
  std::vector<std::span<std::byte>> out;
  SubList(src, header_.PieceOffset(i), header_.PieceLength(i), in);
  SubList(dst, header_.PieceOffset(i), header_.PieceLength(i), out);
  return PieceBytes(i, in, out, in_place);
}

Status PayloadVerifier::PieceBytes(uint32_t i, GatherList in, ScatterList out, bool in_place) const {
  if (TotalBytes(in) != TotalBytes(out)) return Status::Internal("piece source and destination differ in size");
  if (key_ != nullptr) return OpenPiece(header_, *key_, i, in, out);
  if (verify_) KVTIER_RETURN_IF_ERROR(CheckPiece(header_, i, in));
  if (in_place) return Status::OK();
  size_t ii = 0, io = 0;
  for (const auto& o : out) {  // copy: both lists cover the same byte count
    for (size_t done = 0; done < o.size();) {
      if (io == in[ii].size()) {
        ++ii;
        io = 0;
        continue;
      }
      const size_t n = std::min(o.size() - done, in[ii].size() - io);
      StreamCopy(o.data() + done, in[ii].data() + io, n);
      done += n;
      io += n;
    }
  }
  return Status::OK();
}

Status PayloadVerifier::All(GatherList src, ScatterList dst, bool in_place, ThreadPool* pool) const {
  const uint32_t n = pieces();
  if (pool == nullptr || pool->size() == 0 || n < 2) {
    for (uint32_t i = 0; i < n; ++i) KVTIER_RETURN_IF_ERROR(Piece(i, src, dst, in_place));
    return Status::OK();
  }
  // Helpers that start after every piece is claimed touch only `shared`, which they keep alive; a
  // claimed piece is always finished before this call returns, so `src`, `dst` and `this` outlive it.
  struct Shared {
    std::atomic<uint32_t> next{0};
    Mutex mu;
    CondVar cv;
    uint32_t done GUARDED_BY(mu) = 0;
    Status first GUARDED_BY(mu);
  };
  auto shared = std::make_shared<Shared>();
  auto work = [this, src, dst, in_place, n](Shared& sh) {
    for (uint32_t i; (i = sh.next.fetch_add(1)) < n;) {
      Status st = Piece(i, src, dst, in_place);
      MutexLock lock(sh.mu);
      if (!st.ok() && sh.first.ok()) sh.first = std::move(st);
      if (++sh.done == n) sh.cv.NotifyAll();
    }
  };
  const uint32_t helpers = std::min<uint32_t>(pool->size(), n - 1);
  for (uint32_t h = 0; h < helpers; ++h) pool->Schedule([shared, work] { work(*shared); });
  work(*shared);
  MutexLock lock(shared->mu);
  while (shared->done != n) shared->cv.Wait(shared->mu);
  return shared->first;
}

std::unique_ptr<ThreadPool> MakeVerifyPool(const ReaderOptions& options) {
  if (options.verify_threads == 0) return nullptr;
  return std::make_unique<ThreadPool>(options.verify_threads);
}

Status VerifyAndScatter(std::span<const std::byte> image, uint64_t file_size, const ChunkId& expected,
                        ScatterList dst, const ChunkCipher* cipher, ThreadPool* pool, bool verify_payload) {
  const uint64_t want = TotalBytes(dst);
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header,
                          CheckReadHeader(image, file_size, image.size(), expected, want));
  KVTIER_ASSIGN_OR_RETURN(auto verifier, PayloadVerifier::Make(std::move(header), cipher, verify_payload));
  const std::span<const std::byte> payload = image.subspan(kChunkHeaderSize, want);
  return verifier->All(GatherList(&payload, 1), dst, /*in_place=*/false, pool);
}

Status VerifyObjectImage(std::span<const std::byte> image, const ChunkId& expected, ScatterList dst,
                         const ChunkCipher* cipher) {
  if (image.size() < kChunkHeaderSize) {
    return Status::Corruption("chunk object truncated: " + std::to_string(image.size()) + " bytes, less than a header");
  }
  const uint64_t want = TotalBytes(dst);
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header,
                          CheckReadHeader(image, image.size(), image.size(), expected, want, /*padded=*/false));
  KVTIER_ASSIGN_OR_RETURN(auto verifier, PayloadVerifier::Make(std::move(header), cipher));
  const std::span<const std::byte> payload = image.subspan(kChunkHeaderSize, want);
  return verifier->All(GatherList(&payload, 1), dst, /*in_place=*/false);
}

Status VerifyObjectInPlace(std::span<const std::byte> header, uint64_t object_bytes, const ChunkId& expected,
                           ScatterList dst, const ChunkCipher* cipher) {
  if (header.size() < kChunkHeaderSize || object_bytes < kChunkHeaderSize) {
    return Status::Corruption("chunk object truncated: " + std::to_string(object_bytes) + " bytes, less than a header");
  }
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader h, CheckReadHeader(header, object_bytes, object_bytes, expected,
                                                         TotalBytes(dst), /*padded=*/false));
  KVTIER_ASSIGN_OR_RETURN(auto verifier, PayloadVerifier::Make(std::move(h), cipher));
  std::vector<std::span<const std::byte>> src(dst.begin(), dst.end());
  return verifier->All(src, dst, /*in_place=*/true);
}

void ZeroFailedReads(std::span<ChunkRead> reads) {
  for (ChunkRead& r : reads) {
    // NotFound comes only from open: nothing was read, the destination holds the caller's own bytes.
    if (r.status.ok() || r.status.IsNotFound()) continue;
    for (const auto& piece : r.dst) {
      if (!piece.empty()) std::memset(piece.data(), 0, piece.size());
    }
  }
}

namespace {

Status ReadSyncVerified(ChunkRead& read, const ReaderOptions& o, ByteBudget& budget, BufferPool& buffers,
                        ThreadPool* pool) {
  KVTIER_ASSIGN_OR_RETURN(OpenedChunk chunk, OpenChunk(*read.fs, read.path, TotalBytes(read.dst), o.direct_io));
  read.stored_bytes = chunk.file_size;
  const uint64_t charge = BudgetCharge(chunk);
  budget.Acquire(charge);
  AlignedBuffer buf = buffers.Get(chunk.read_len);
  Status s;
  if (buf.data() == nullptr) {
    s = Status::IOError("out of memory for a " + std::to_string(chunk.read_len) + " byte read", true);
  } else {
    auto got = PreadAll(*read.fs, chunk.fd.get(), buf.data(), chunk.read_len, read.path);
    if (!got.ok() && chunk.direct && got.status().code() == Code::kInvalidArgument) {
      s = ReopenBuffered(*read.fs, read.path, &chunk);  // O_DIRECT accepted at open, refused at read
      if (s.ok()) got = PreadAll(*read.fs, chunk.fd.get(), buf.data(), chunk.read_len, read.path);
    }
    if (s.ok()) s = got.status();
    if (s.ok()) {
      const uint64_t valid = std::min(*got, chunk.file_size);
      s = VerifyAndScatter({buf.data(), valid}, chunk.file_size, read.expected, read.dst, o.cipher.get(), pool,
                           o.verify_payload);
    }
  }
  buffers.Put(std::move(buf));
  budget.Release(charge);
  return s;
}

}  // namespace

void ReadChunkSync(ChunkRead& read, const ReaderOptions& options, ByteBudget& budget, BufferPool& buffers,
                   ThreadPool* pool) {
  read.stored_bytes = 0;
  read.status = ReadSyncVerified(read, options, budget, buffers, pool);
}

Status VerifyInPlace(std::span<const std::byte> header_bytes, uint64_t file_size, uint64_t valid_bytes,
                     const ChunkId& expected, ScatterList dst, const ChunkCipher* cipher,
                     ThreadPool* pool) {
  KVTIER_ASSIGN_OR_RETURN(ChunkHeader header, CheckReadHeader(header_bytes, file_size, valid_bytes,
                                                              expected, TotalBytes(dst)));
  KVTIER_ASSIGN_OR_RETURN(auto verifier, PayloadVerifier::Make(std::move(header), cipher));
  std::vector<std::span<const std::byte>> src(dst.begin(), dst.end());
  return verifier->All(src, dst, /*in_place=*/true, pool);
}

AlignedBuffer BufferPool::Get(uint64_t size) {
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < free_.size(); ++i) {
      // Reuse only a close fit, so one huge buffer does not serve (and pin) every small read.
      if (free_[i].size() >= size && free_[i].size() <= 2 * size) {
        AlignedBuffer b = std::move(free_[i]);
        free_[i] = std::move(free_.back());
        free_.pop_back();
        cached_ -= b.size();
        return b;
      }
    }
  }
  allocations_.fetch_add(1, std::memory_order_relaxed);
  return AlignedBuffer::Allocate(size);
}

void BufferPool::Put(AlignedBuffer buffer) {
  if (buffer.data() == nullptr) return;
  MutexLock lock(mu_);
  if (cached_ + buffer.size() > max_cached_) return;  // freed on return
  cached_ += buffer.size();
  free_.push_back(std::move(buffer));
}

}  // namespace kvtier::internal
