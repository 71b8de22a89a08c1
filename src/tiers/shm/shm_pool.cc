#include "tiers/shm/shm_pool.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/threads.h"
#include "core/xxh3.h"
#include "tiers/shm/shm_space.h"

namespace kvtier::internal::shm {
namespace {

uint64_t Align(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

std::string Err(const std::string& what) { return what + ": " + std::strerror(errno); }

uint64_t GeometrySum(const PoolHeader& h) { return XXH3_64bits(&h, offsetof(PoolHeader, geometry_sum)); }

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

// One populate call over [p, p + n): the page tables of this process filled, the pages (reserved at
// creation) mapped; no byte of the pool changes.
Status PopulateRange(std::byte* p, uint64_t n, bool read_only, const std::string& path) {
  if (::madvise(p, n, read_only ? MADV_POPULATE_READ : MADV_POPULATE_WRITE) == 0) return Status::OK();
  if (errno == EINVAL) return Status::IOError(Err("populate " + path + " (populate= needs Linux 5.14)"));
  if (errno == ENOMEM || errno == EFAULT) {
    return Status::NoSpace(Err("populate " + path + " (the filesystem or memory cannot back the whole pool)"));
  }
  return Status::IOError(Err("populate " + path));
}

// The whole mapping populated once, at open, by up to `threads` threads over disjoint 2 MiB-aligned
// slices (the kernel maps each page once per process: this is where that cost goes, instead of one
// fault per 4 KiB page on the data path). A thread the OS refuses leaves its slice to the caller.
Status PopulateMapping(std::byte* base, uint64_t bytes, bool read_only, unsigned threads, const std::string& path) {
  constexpr uint64_t kAlign = 2ull << 20;
  const uint64_t n = std::max<uint64_t>(1, std::min<uint64_t>(threads, bytes / kAlign));
  const uint64_t slice = (bytes / n + kAlign - 1) / kAlign * kAlign;
  std::vector<Status> done(n);
  std::vector<std::thread> workers;
  std::vector<uint64_t> inline_slices;
  auto run = [&](uint64_t i) {
    const uint64_t at = i * slice;
    if (at < bytes) done[i] = PopulateRange(base + at, std::min(slice, bytes - at), read_only, path);
  };
  for (uint64_t i = 1; i < n; ++i) {
    if (!TryStartThread(&workers, [&run, i] { run(i); })) inline_slices.push_back(i);
  }
  run(0);
  for (uint64_t i : inline_slices) run(i);
  for (auto& t : workers) t.join();
  for (const Status& s : done) KVTIER_RETURN_IF_ERROR(s);
  return Status::OK();
}

}  // namespace

Geometry MakeGeometry(uint64_t page_bytes, uint64_t page_count, uint64_t file_align) {
  Geometry g;
  g.page_bytes = page_bytes;
  g.page_count = page_count;
  g.slot_count = std::min<uint64_t>(page_count, 1u << 22);
  g.index_size = 1;
  while (g.index_size < 2 * g.slot_count) g.index_size <<= 1;
  g.pin_count = 8192;
  g.slots_off = kHeaderBytes;
  g.index_off = Align(g.slots_off + g.slot_count * sizeof(Slot), 64);
  g.bitmap_off = Align(g.index_off + g.index_size * 4, 64);
  g.next_off = Align(g.bitmap_off + (page_count + 63) / 64 * 8, 64);
  g.pins_off = Align(g.next_off + page_count * 4, 64);
  g.arena_off = Align(g.pins_off + g.pin_count * sizeof(PinRecord), 4096);
  g.file_bytes = Align(g.arena_off + page_count * page_bytes, std::max<uint64_t>(file_align, 4096));
  return g;
}

Result<std::string> PoolFileName(const std::string& name) {
  if (!ValidName(name)) {
    return Status::InvalidArgument("shm:// pool name '" + name +
                                   "' is not allowed: 1 to 64 of [A-Za-z0-9._-], not starting with '.'");
  }
  return "kvtier-shm-" + name;
}

uint64_t ProcessStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i) {
    if (i == 3 && (f == "Z" || f == "X" || f == "x")) return 0;  // a zombie holds nothing
    if (i == 22) return std::strtoull(f.c_str(), nullptr, 10);
  }
  return 0;
}

// ---------------------------------------------------------------- opening

Status ShmPool::Create(const PoolSpec& spec, const std::string& path) {
  if (spec.capacity == 0) {
    return Status::NotFound("shm:// pool " + path + " does not exist (give capacity= to create it)");
  }
  uint64_t file_align = 4096;
  if (spec.hugetlbfs) {
    struct statfs fs {};
    if (::statfs(spec.dir.c_str(), &fs) != 0) return Status::IOError(Err("statfs " + spec.dir));
    if (static_cast<uint64_t>(fs.f_type) != HUGETLBFS_MAGIC) {
      return Status::InvalidArgument("hugepages=" + spec.dir + " is not a hugetlbfs mount");
    }
    file_align = static_cast<uint64_t>(fs.f_bsize);
  }
  const uint64_t pages = spec.capacity / spec.page_bytes;
  if (pages == 0) return Status::InvalidArgument("shm:// capacity is below one page (page=" + std::to_string(spec.page_bytes) + ")");
  const Geometry g = MakeGeometry(spec.page_bytes, pages, file_align);
  std::random_device rd;
  const std::string tmp = path + ".init." + std::to_string(::getpid()) + "." + std::to_string(rd());
  const mode_t mode = spec.group >= 0 ? 0660 : 0600;
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return Status::IOError(Err("create " + tmp));
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  if (::fchmod(fd, mode) != 0) return fail(Status::IOError(Err("chmod " + tmp)));
  if (spec.group >= 0 && ::fchown(fd, static_cast<uid_t>(-1), static_cast<gid_t>(spec.group)) != 0) {
    return fail(Status::IOError(Err("chown to group " + std::to_string(spec.group))));
  }
  // Room first: a file the filesystem cannot back kills its writer with SIGBUS at the first page it
  // cannot get; with every page allocated now, a full tmpfs is NoSpace here and the temporary is gone.
  if (Status room = CheckRoom(fd, spec.dir, g.file_bytes, spec.capacity); !room.ok()) return fail(room);
  if (::ftruncate(fd, static_cast<off_t>(g.file_bytes)) != 0) return fail(Status::IOError(Err("size " + tmp)));
  if (Status taken = ReservePages(fd, spec.dir, g.file_bytes); !taken.ok()) return fail(taken);
  void* p = ::mmap(nullptr, g.file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail(Status::IOError(Err("map " + tmp)));
  ShmPool init;
  init.base_ = static_cast<std::byte*>(p);
  init.map_bytes_ = g.file_bytes;
  init.InitFresh(g, spec.capacity, spec.key_check);
  ::munmap(p, g.file_bytes);
  init.base_ = nullptr;
  // Only a fully initialised pool ever has the name: link() gives it atomically and never replaces.
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  ::close(fd);
  ::unlink(tmp.c_str());
  if (linked != 0 && link_errno != EEXIST) {
    errno = link_errno;
    return Status::IOError(Err("link " + path));
  }
  return Status::OK();  // created, or another process created it first: open whichever has the name
}

void ShmPool::InitFresh(const Geometry& g, uint64_t capacity, uint64_t key_check) {
  auto* h = new (base_) PoolHeader{};
  h->magic = kPoolMagic;
  h->version = kPoolVersion;
  h->header_bytes = kHeaderBytes;
  h->file_bytes = g.file_bytes;
  h->page_bytes = g.page_bytes;
  h->page_count = g.page_count;
  h->slot_count = g.slot_count;
  h->index_size = g.index_size;
  h->pin_count = g.pin_count;
  h->slots_off = g.slots_off;
  h->index_off = g.index_off;
  h->bitmap_off = g.bitmap_off;
  h->next_off = g.next_off;
  h->pins_off = g.pins_off;
  h->arena_off = g.arena_off;
  h->owner_uid = ::geteuid();
  h->key_check = key_check;
  h->geometry_sum = GeometrySum(*h);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&h->mu, &attr);
  pthread_mutexattr_destroy(&attr);
  h->capacity_bytes.store(std::min(capacity, g.page_count * g.page_bytes));
  // The file is fresh (zeros): free slots, no pins, no bits; only the index needs its empty marker.
  auto* index = reinterpret_cast<std::atomic<uint32_t>*>(base_ + g.index_off);
  for (uint64_t i = 0; i < g.index_size; ++i) index[i].store(kNone, std::memory_order_relaxed);
}

Status ShmPool::Validate(uint64_t file_size) const {
  const PoolHeader& h = *hdr_;
  if (h.magic != kPoolMagic) return Status::InvalidArgument(path_ + " is not a kvtier shm pool (no pool magic); refused, left untouched");
  if (h.version != kPoolVersion) {
    return Status::VersionMismatch(path_ + " is a kvtier shm pool of format version " + std::to_string(h.version) +
                                             "; this build reads version " + std::to_string(kPoolVersion) + "; refused, left untouched");
  }
  if (h.geometry_sum != GeometrySum(h)) return Status::Corruption(path_ + ": pool header checksum mismatch; refused, left untouched");
  if (h.owner_uid != ::geteuid()) {
    return Status::InvalidArgument(path_ + " was made by uid " + std::to_string(h.owner_uid) + "; refused");
  }
  const Geometry g = MakeGeometry(h.page_bytes, h.page_count, 1);
  if (h.page_bytes == 0 || h.page_count == 0 || g.slot_count != h.slot_count || g.index_size != h.index_size ||
      g.pin_count != h.pin_count || g.slots_off != h.slots_off || g.index_off != h.index_off ||
      g.bitmap_off != h.bitmap_off || g.next_off != h.next_off || g.pins_off != h.pins_off ||
      g.arena_off != h.arena_off || h.file_bytes < g.file_bytes) {
    return Status::Corruption(path_ + ": pool geometry is inconsistent; refused, left untouched");
  }
  if (h.file_bytes != file_size) {
    return Status::Corruption(path_ + " holds " + std::to_string(file_size) + " bytes, its header says " +
                              std::to_string(h.file_bytes) + " (truncated or extended); refused, left untouched");
  }
  return Status::OK();
}

Result<std::unique_ptr<ShmPool>> ShmPool::Map(int fd, const std::string& path, const PoolSpec& spec) {
  std::unique_ptr<ShmPool> pool(new ShmPool());
  pool->fd_ = fd;
  pool->path_ = path;
  pool->read_only_ = spec.read_only;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::IOError(Err("stat " + path));
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file; refused");
  if (st.st_uid != ::geteuid()) {
    return Status::InvalidArgument(path + " belongs to uid " + std::to_string(st.st_uid) + ", not this process's uid " +
                                    std::to_string(::geteuid()) + "; refused, left untouched");
  }
  const mode_t allowed = spec.group >= 0 ? 0660 : 0600;
  if ((st.st_mode & 0777 & ~allowed) != 0) {
    return Status::InvalidArgument(path + " has mode 0" + [&] {
      std::ostringstream o;
      o << std::oct << (st.st_mode & 0777);
      return o.str();
    }() + ", wider than 0" + (spec.group >= 0 ? std::string("660") : std::string("600")) + "; refused, left untouched");
  }
  if (spec.group >= 0 && st.st_gid != static_cast<gid_t>(spec.group)) {
    return Status::InvalidArgument(path + " is shared with group " + std::to_string(st.st_gid) + ", not group=" +
                                    std::to_string(spec.group) + "; refused");
  }
  if (static_cast<uint64_t>(st.st_size) < kHeaderBytes) {
    return Status::InvalidArgument(path + " is too small to be a kvtier shm pool; refused, left untouched");
  }
  pool->dev_ = st.st_dev;
  pool->ino_ = st.st_ino;
  pool->map_bytes_ = static_cast<uint64_t>(st.st_size);
  const int prot = spec.read_only ? PROT_READ : PROT_READ | PROT_WRITE;
  void* p = ::mmap(nullptr, pool->map_bytes_, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::IOError(Err("map " + path));
  pool->base_ = static_cast<std::byte*>(p);
  pool->hdr_ = reinterpret_cast<PoolHeader*>(p);
  KVTIER_RETURN_IF_ERROR(pool->Validate(pool->map_bytes_));
  if (spec.populate != PoolSpec::Populate::kLazy) {
    Status populated = PopulateMapping(pool->base_, pool->map_bytes_, spec.read_only, spec.populate_threads, path);
    if (!populated.ok() && spec.populate == PoolSpec::Populate::kRequired) return populated;
  }
  const PoolHeader& h = *pool->hdr_;
  pool->slots_ = reinterpret_cast<Slot*>(pool->base_ + h.slots_off);
  pool->index_ = reinterpret_cast<std::atomic<uint32_t>*>(pool->base_ + h.index_off);
  pool->bitmap_ = reinterpret_cast<std::atomic<uint64_t>*>(pool->base_ + h.bitmap_off);
  pool->next_ = reinterpret_cast<std::atomic<uint32_t>*>(pool->base_ + h.next_off);
  pool->pins_ = reinterpret_cast<PinRecord*>(pool->base_ + h.pins_off);
  pool->arena_ = pool->base_ + h.arena_off;
  pool->pid_ = ::getpid();
  pool->start_ = ProcessStartTime(pool->pid_);
  if (pool->start_ == 0) return Status::IOError("cannot read this process's start time from /proc/self/stat");
  return pool;
}

Result<std::unique_ptr<ShmPool>> ShmPool::Open(const PoolSpec& spec) {
  KVTIER_ASSIGN_OR_RETURN(const std::string file, PoolFileName(spec.name));
  const std::string path = spec.dir + "/" + file;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), (spec.read_only ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
      auto pool = Map(fd, path, spec);
      if (!pool.ok()) ::close(fd);
      return pool;
    }
    if (errno == ELOOP) return Status::InvalidArgument(path + " is a symbolic link; refused");
    if (errno != ENOENT) return Status::IOError(Err("open " + path));
    if (spec.read_only) return Status::NotFound("shm:// pool " + path + " does not exist");
    if (attempt == 0) KVTIER_RETURN_IF_ERROR(Create(spec, path));
  }
  return Status::IOError("shm:// pool " + path + " vanished while being opened");
}

ShmPool::~ShmPool() {
  if (base_ != nullptr) ::munmap(base_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

Status ShmPool::CheckFile(bool check_name) const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) != map_bytes_) {
    return Status::IOError(path_ + " was truncated or resized under the pool; not used any further");
  }
  if (check_name) {
    struct stat named {};
    if (::lstat(path_.c_str(), &named) != 0 || named.st_dev != dev_ || named.st_ino != ino_) {
      return Status::IOError(path_ + " was removed or replaced under the pool; not used any further");
    }
  }
  return Status::OK();
}

// ---------------------------------------------------------------- the lock

Status ShmPool::Lock() {
  if (::getpid() != pid_) {  // pins and reservations carry the opener's pid: a forked child would forge them
    return Status::IOError(path_ + " was opened by process " + std::to_string(pid_) +
                           "; a child of fork() must open the pool itself");
  }
  const int r = pthread_mutex_lock(&hdr_->mu);
  if (r == 0) return Status::OK();
  if (r == EOWNERDEAD) {  // the holder died: its half-done change is undone by rebuilding from the slots
    RepairLocked();
    pthread_mutex_consistent(&hdr_->mu);
    return Status::OK();
  }
  return Status::IOError(path_ + ": pool lock unusable (" + std::string(std::strerror(r)) + ")");
}

void ShmPool::Unlock() { pthread_mutex_unlock(&hdr_->mu); }

// ---------------------------------------------------------------- ids and the index

void ShmPool::SetId(Slot& x, const ChunkId& id) {
  uint64_t w[4];
  std::memcpy(w, id.ns.data(), 32);
  for (int i = 0; i < 4; ++i) x.ns[i].store(w[i], std::memory_order_relaxed);
  std::memcpy(w, id.key.bytes.data(), 32);
  for (int i = 0; i < 4; ++i) x.key[i].store(w[i], std::memory_order_relaxed);
  x.layout.store(id.layout_fingerprint, std::memory_order_relaxed);
}

bool ShmPool::SameId(const Slot& x, const ChunkId& id) {  // namespace and key; the layout is checked apart
  uint64_t n[4], k[4];
  std::memcpy(n, id.ns.data(), 32);
  std::memcpy(k, id.key.bytes.data(), 32);
  for (int i = 0; i < 4; ++i) {
    if (x.ns[i].load(std::memory_order_relaxed) != n[i] || x.key[i].load(std::memory_order_relaxed) != k[i]) return false;
  }
  return true;
}

ChunkId ShmPool::IdOf(const Slot& x) {
  ChunkId id;
  uint64_t w[4];
  for (int i = 0; i < 4; ++i) w[i] = x.ns[i].load(std::memory_order_relaxed);
  std::memcpy(id.ns.data(), w, 32);
  for (int i = 0; i < 4; ++i) w[i] = x.key[i].load(std::memory_order_relaxed);
  std::memcpy(id.key.bytes.data(), w, 32);
  id.layout_fingerprint = x.layout.load(std::memory_order_relaxed);
  return id;
}

uint64_t ShmPool::HashId(const ChunkId& id) const {
  uint64_t k, n;
  std::memcpy(&k, id.key.bytes.data(), 8);
  std::memcpy(&n, id.ns.data(), 8);
  return (k ^ (n * 0x9E3779B97F4A7C15ull)) & (hdr_->index_size - 1);
}

uint64_t ShmPool::HashSlot(uint32_t s) const { return HashId(IdOf(slots_[s])); }

uint32_t ShmPool::FindLocked(const ChunkId& id) const {
  const uint64_t mask = hdr_->index_size - 1;
  for (uint64_t i = HashId(id), n = 0; n <= mask; i = (i + 1) & mask, ++n) {
    const uint32_t s = index_[i].load(std::memory_order_relaxed);
    if (s == kNone) return kNone;
    if (s < hdr_->slot_count && SameId(slots_[s], id)) return s;
  }
  return kNone;
}

// The index holds at most slot_count entries in 2 * slot_count places, so a free place is always
// found, unless the mapping was scribbled on: the probe is bounded and a full index is rebuilt.
bool ShmPool::IndexInsertLocked(uint32_t s) {
  const uint64_t mask = hdr_->index_size - 1;
  uint64_t i = HashSlot(s);
  for (uint64_t n = 0; index_[i].load(std::memory_order_relaxed) != kNone; i = (i + 1) & mask) {
    if (++n > mask) return false;
  }
  index_[i].store(s, std::memory_order_relaxed);
  return true;
}

void ShmPool::IndexEraseLocked(uint32_t s) {  // backward-shift deletion: no tombstones
  const uint64_t mask = hdr_->index_size - 1;
  uint64_t i = HashSlot(s);
  for (uint64_t n = 0; index_[i].load(std::memory_order_relaxed) != s; i = (i + 1) & mask) {
    if (index_[i].load(std::memory_order_relaxed) == kNone || ++n > mask) return;
  }
  index_[i].store(kNone, std::memory_order_relaxed);
  for (uint64_t j = (i + 1) & mask, n = 0; n < mask; j = (j + 1) & mask, ++n) {
    const uint32_t t = index_[j].load(std::memory_order_relaxed);
    if (t == kNone) return;
    if (t >= hdr_->slot_count) {  // not a slot: scribbled; dropped, and the hole stays where it is
      index_[j].store(kNone, std::memory_order_relaxed);
      continue;
    }
    const uint64_t home = HashSlot(t);
    // t may move to the hole at i when its home is not cyclically within (i, j].
    const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    index_[i].store(t, std::memory_order_relaxed);
    index_[j].store(kNone, std::memory_order_relaxed);
    i = j;
  }
}

// ---------------------------------------------------------------- pages

void ShmPool::SetBits(uint32_t first, uint64_t pages, bool on) {
  uint32_t p = first;
  const uint64_t n_max = std::min<uint64_t>(pages, hdr_->page_count);  // a scribbled count or a cycle: bounded
  for (uint64_t n = 0; n < n_max && p < hdr_->page_count; ++n) {
    const uint64_t bit = uint64_t{1} << (p % 64);
    if (on) {
      bitmap_[p / 64].fetch_or(bit, std::memory_order_relaxed);
    } else {
      bitmap_[p / 64].fetch_and(~bit, std::memory_order_relaxed);
    }
    p = next_[p].load(std::memory_order_relaxed);
  }
}

bool ShmPool::TakePagesLocked(uint64_t pages, uint32_t* first) {
  const uint64_t total = hdr_->page_count, words = (total + 63) / 64;
  uint64_t w = hdr_->page_hint.load(std::memory_order_relaxed) % words;
  uint32_t prev = kNone;
  uint64_t got = 0;
  for (uint64_t scanned = 0; scanned <= words && got < pages; ++scanned, w = (w + 1) % words) {
    uint64_t free_bits = ~bitmap_[w].load(std::memory_order_relaxed);
    while (free_bits != 0 && got < pages) {
      const uint32_t p = static_cast<uint32_t>(w * 64 + static_cast<uint64_t>(__builtin_ctzll(free_bits)));
      free_bits &= free_bits - 1;
      if (p >= total) break;
      if (prev == kNone) {
        *first = p;
      } else {
        next_[prev].store(p, std::memory_order_relaxed);
      }
      prev = p;
      ++got;
    }
    if (got == pages) {
      hdr_->page_hint.store(w, std::memory_order_relaxed);
      break;
    }
  }
  if (got < pages) return false;
  next_[prev].store(kNone, std::memory_order_relaxed);
  return true;
}

std::vector<std::span<std::byte>> ShmPool::Runs(uint32_t first_page, uint64_t pages, uint64_t offset, uint64_t len) const {
  std::vector<std::span<std::byte>> runs;
  const uint64_t pb = hdr_->page_bytes;
  uint32_t p = first_page;
  uint64_t at = 0;  // offset of page p in the chunk
  for (uint64_t n = 0; n < pages && len > 0; ++n) {
    if (p >= hdr_->page_count) return {};
    if (at + pb > offset) {
      const uint64_t from = offset > at ? offset - at : 0;
      const uint64_t take = std::min(pb - from, len);
      std::byte* ptr = arena_ + uint64_t{p} * pb + from;
      if (!runs.empty() && runs.back().data() + runs.back().size() == ptr) {
        runs.back() = std::span<std::byte>(runs.back().data(), runs.back().size() + take);
      } else {
        runs.emplace_back(ptr, take);
      }
      len -= take;
      offset += take;
    }
    at += pb;
    p = next_[p].load(std::memory_order_relaxed);
  }
  if (len > 0) return {};
  return runs;
}

// ---------------------------------------------------------------- slots

bool ShmPool::CountersPlausibleLocked() const {
  return hdr_->used_pages.load(std::memory_order_relaxed) <= hdr_->page_count &&
         hdr_->live_chunks.load(std::memory_order_relaxed) <= hdr_->slot_count &&
         hdr_->capacity_bytes.load(std::memory_order_relaxed) <= hdr_->page_count * hdr_->page_bytes;
}

Result<uint32_t> ShmPool::ReserveLocked(uint64_t pages) {
  // Scribbled counters are rebuilt from the slots: at once when outside the geometry, and before a
  // reservation evicts when the usage count disagrees with the page bitmap (a count within the arena
  // but too high would otherwise evict chunks before anything noticed).
  if (!CountersPlausibleLocked() || (NeedsRoomLocked(pages) && !UsedPagesMatchBitmapLocked())) RepairLocked();
  auto r = ReserveOnceLocked(pages);
  if (!r.ok() && r.status().code() == Code::kInternal) {  // the derived state disagrees with the slots:
    RepairLocked();                                       // rebuilt once, and tried once more
    r = ReserveOnceLocked(pages);
  }
  return r;
}

Result<uint32_t> ShmPool::ReserveOnceLocked(uint64_t pages) {
  const uint64_t limit = hdr_->capacity_bytes.load(std::memory_order_relaxed) / hdr_->page_bytes;
  if (pages > limit) return Status::NoSpace(path_ + ": the chunk can never fit in the pool's capacity");
  auto make_room = [&]() -> bool { return EvictOneLocked() || ReclaimDeadLocked() > 0; };
  while (hdr_->used_pages.load(std::memory_order_relaxed) + pages > limit) {
    if (make_room()) continue;
    if (UsedPagesAgreeLocked()) return Status::NoSpace(path_ + ": every chunk is pinned by a reader or being written");
    return Status::Internal(path_ + ": the usage count disagrees with the slots");
  }
  const uint64_t slots = hdr_->slot_count;
  uint32_t s = kNone;
  for (;;) {
    const uint64_t hint = hdr_->slot_hint.load(std::memory_order_relaxed);
    for (uint64_t n = 0; n < slots; ++n) {
      const uint64_t i = (hint + n) % slots;
      if (StateOf(slots_[i].word.load(std::memory_order_relaxed)) == kFree) {
        s = static_cast<uint32_t>(i);
        break;
      }
    }
    if (s != kNone) break;
    if (!make_room()) return Status::NoSpace(path_ + ": every slot is pinned by a reader or being written");
  }
  hdr_->slot_hint.store(s + 1, std::memory_order_relaxed);
  uint32_t first = kNone;
  if (pages > 0 && !TakePagesLocked(pages, &first)) {
    return Status::Internal(path_ + ": page bitmap disagrees with the usage count");
  }
  Slot& x = slots_[s];
  x.owner_pid.store(static_cast<uint64_t>(pid_), std::memory_order_relaxed);
  x.owner_start.store(start_, std::memory_order_relaxed);
  x.pages.store((pages << 32) | first, std::memory_order_relaxed);
  x.pins.store(0, std::memory_order_relaxed);
  const uint64_t gen = GenOf(x.word.load(std::memory_order_relaxed));
  x.word.store(MakeWord(gen, kReserved), std::memory_order_release);  // the slot owns its pages from here on
  SetBits(first, pages, true);
  hdr_->used_pages.fetch_add(pages, std::memory_order_relaxed);
  return s;
}

bool ShmPool::PublishLocked(uint32_t s) {
  Slot& x = slots_[s];
  if (FindLocked(IdOf(x)) != kNone) {
    FreeLocked(s);
    return false;
  }
  x.ref.store(1, std::memory_order_relaxed);
  x.word.store(MakeWord(GenOf(x.word.load(std::memory_order_relaxed)), kPublished), std::memory_order_release);
  if (!IndexInsertLocked(s)) {
    RepairLocked();  // a full index was scribbled on: rebuilt from the slots, this one included
    return true;
  }
  hdr_->live_chunks.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool ShmPool::UsedPagesAgreeLocked() const {
  uint64_t used = 0;
  for (uint64_t i = 0; i < hdr_->slot_count; ++i) {
    const Slot& x = slots_[i];
    if (StateOf(x.word.load(std::memory_order_relaxed)) != kFree) used += x.pages.load(std::memory_order_relaxed) >> 32;
  }
  return used == hdr_->used_pages.load(std::memory_order_relaxed);
}

void ShmPool::FreeLocked(uint32_t s) {
  Slot& x = slots_[s];
  const uint64_t w = x.word.load(std::memory_order_relaxed);
  if (StateOf(w) == kFree) return;
  const uint64_t pg = x.pages.load(std::memory_order_relaxed);
  x.word.store(MakeWord(GenOf(w) + 1, kFree), std::memory_order_release);  // the pages are free from here on
  SetBits(static_cast<uint32_t>(pg), pg >> 32, false);
  const uint64_t used = hdr_->used_pages.load(std::memory_order_relaxed);
  hdr_->used_pages.store(used >= (pg >> 32) ? used - (pg >> 32) : 0, std::memory_order_relaxed);
}

void ShmPool::RemoveLocked(uint32_t s) {
  Slot& x = slots_[s];
  const uint64_t w = x.word.load(std::memory_order_relaxed);
  if (StateOf(w) != kPublished) return;
  IndexEraseLocked(s);
  const uint64_t live = hdr_->live_chunks.load(std::memory_order_relaxed);
  hdr_->live_chunks.store(live > 0 ? live - 1 : 0, std::memory_order_relaxed);
  if (x.pins.load(std::memory_order_relaxed) > 0) {
    x.word.store(MakeWord(GenOf(w), kDead), std::memory_order_release);
  } else {
    FreeLocked(s);
  }
}

bool ShmPool::PinLocked(uint32_t s) {
  const uint64_t n = hdr_->pin_count;
  const uint64_t h = ((static_cast<uint64_t>(pid_) * 0x9E3779B97F4A7C15ull) ^ (s * 0xC2B2AE3D27D4EB4Full)) % n;
  PinRecord* free_rec = nullptr;
  for (uint64_t i = 0; i < kPinProbe; ++i) {
    PinRecord& r = pins_[(h + i) % n];
    const uint32_t c = r.count.load(std::memory_order_relaxed);
    if (c == 0) {
      if (free_rec == nullptr) free_rec = &r;
    } else if (r.pid.load(std::memory_order_relaxed) == static_cast<uint64_t>(pid_) &&
               r.start.load(std::memory_order_relaxed) == start_ && r.slot.load(std::memory_order_relaxed) == s) {
      r.count.store(c + 1, std::memory_order_relaxed);
      slots_[s].pins.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  if (free_rec == nullptr) return false;
  free_rec->pid.store(static_cast<uint64_t>(pid_), std::memory_order_relaxed);
  free_rec->start.store(start_, std::memory_order_relaxed);
  free_rec->slot.store(s, std::memory_order_relaxed);
  free_rec->count.store(1, std::memory_order_relaxed);
  slots_[s].pins.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ShmPool::UnpinLocked(uint32_t s) {
  const uint64_t n = hdr_->pin_count;
  const uint64_t h = ((static_cast<uint64_t>(pid_) * 0x9E3779B97F4A7C15ull) ^ (s * 0xC2B2AE3D27D4EB4Full)) % n;
  for (uint64_t i = 0; i < kPinProbe; ++i) {
    PinRecord& r = pins_[(h + i) % n];
    const uint32_t c = r.count.load(std::memory_order_relaxed);
    if (c != 0 && r.pid.load(std::memory_order_relaxed) == static_cast<uint64_t>(pid_) &&
        r.start.load(std::memory_order_relaxed) == start_ && r.slot.load(std::memory_order_relaxed) == s) {
      r.count.store(c - 1, std::memory_order_relaxed);
      break;
    }
  }
  Slot& x = slots_[s];
  const uint32_t left = x.pins.load(std::memory_order_relaxed);
  if (left > 0) x.pins.store(left - 1, std::memory_order_relaxed);
  if (left <= 1 && StateOf(x.word.load(std::memory_order_relaxed)) == kDead) FreeLocked(s);
}

bool ShmPool::EvictOneLocked() {
  const uint64_t slots = hdr_->slot_count;
  for (uint64_t n = 0; n < 2 * slots; ++n) {
    const uint64_t i = hdr_->clock_hand.fetch_add(1, std::memory_order_relaxed) % slots;
    Slot& x = slots_[i];
    if (StateOf(x.word.load(std::memory_order_relaxed)) != kPublished || x.pins.load(std::memory_order_relaxed) > 0) continue;
    if (x.ref.load(std::memory_order_relaxed) != 0) {
      x.ref.store(0, std::memory_order_relaxed);  // CLOCK: a second chance for a recently used chunk
      continue;
    }
    if (on_evict_) on_evict_(IdOf(x));
    RemoveLocked(static_cast<uint32_t>(i));
    hdr_->evictions.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

bool ShmPool::Alive(uint64_t pid, uint64_t start) const {
  if (pid == static_cast<uint64_t>(pid_)) return start == start_;
  if (pid == 0 || pid > 0x7FFFFFFF) return false;
  const uint64_t now = ProcessStartTime(static_cast<pid_t>(pid));
  return now != 0 && now == start;
}

uint64_t ShmPool::ReclaimDeadLocked() {
  std::unordered_map<uint64_t, bool> alive;  // one /proc look-up per (pid, start) per pass
  auto is_alive = [&](uint64_t pid, uint64_t start) {
    const uint64_t k = pid * 0x9E3779B97F4A7C15ull ^ start;
    auto it = alive.find(k);
    if (it == alive.end()) it = alive.emplace(k, Alive(pid, start)).first;
    return it->second;
  };
  uint64_t reclaimed = 0;
  for (uint64_t i = 0; i < hdr_->pin_count; ++i) {
    PinRecord& r = pins_[i];
    const uint32_t c = r.count.load(std::memory_order_relaxed);
    if (c == 0 || is_alive(r.pid.load(std::memory_order_relaxed), r.start.load(std::memory_order_relaxed))) continue;
    r.count.store(0, std::memory_order_relaxed);
    const uint32_t s = r.slot.load(std::memory_order_relaxed);
    ++reclaimed;
    if (s >= hdr_->slot_count) continue;
    Slot& x = slots_[s];
    const uint32_t p = x.pins.load(std::memory_order_relaxed);
    x.pins.store(p > c ? p - c : 0, std::memory_order_relaxed);
    if (p <= c && StateOf(x.word.load(std::memory_order_relaxed)) == kDead) FreeLocked(s);
  }
  for (uint64_t i = 0; i < hdr_->slot_count; ++i) {
    Slot& x = slots_[i];
    if (StateOf(x.word.load(std::memory_order_relaxed)) != kReserved) continue;
    if (is_alive(x.owner_pid.load(std::memory_order_relaxed), x.owner_start.load(std::memory_order_relaxed))) continue;
    FreeLocked(static_cast<uint32_t>(i));
    ++reclaimed;
  }
  hdr_->reclaimed.fetch_add(reclaimed, std::memory_order_relaxed);
  return reclaimed;
}

void ShmPool::SetCapacityLocked(uint64_t bytes) {
  hdr_->capacity_bytes.store(std::min(bytes, hdr_->page_count * hdr_->page_bytes), std::memory_order_relaxed);
  const uint64_t limit = hdr_->capacity_bytes.load(std::memory_order_relaxed) / hdr_->page_bytes;
  while (hdr_->used_pages.load(std::memory_order_relaxed) > limit && EvictOneLocked()) {
  }
}

}  // namespace kvtier::internal::shm
