// BorrowedChunk: a verified, read-only view of a chunk where a tier stores it (the mem:// arena), so
// a consumer such as a device copy or a socket send reads it with no copy into a buffer of its own.
//
// While a BorrowedChunk holds a view, the tier neither reuses nor evicts its pages: eviction skips
// it, and a Remove (or a corrupt-copy removal) takes the chunk out of the index at once but frees its
// pages only at release. A Put of the same key after such a Remove stores a new copy elsewhere; the
// borrowed bytes never change. Keep borrows short: pinned chunks count against the tier's capacity,
// and a tier full of pinned chunks refuses Puts with NoSpace.
//
// Ownership: move-only; the destructor releases. REQUIRES: released before the tier (or the Store)
// that lent it is destroyed.
// Thread-safety: one BorrowedChunk is used by one thread at a time; different ones are independent,
// and any number may view the same chunk at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace kvtier {

class BorrowedChunk {
 public:
  BorrowedChunk() = default;
  // For tiers: `pieces` are the chunk's bytes in order; `release` runs once, at Release().
  BorrowedChunk(std::vector<std::span<const std::byte>> pieces, std::function<void()> release)
      : pieces_(std::move(pieces)), release_(std::move(release)) {}
  BorrowedChunk(BorrowedChunk&& o) noexcept
      : pieces_(std::move(o.pieces_)), release_(std::exchange(o.release_, nullptr)) {
    o.pieces_.clear();
  }
  BorrowedChunk& operator=(BorrowedChunk&& o) noexcept {
    if (this != &o) {
      Release();
      pieces_ = std::move(o.pieces_);
      o.pieces_.clear();
      release_ = std::exchange(o.release_, nullptr);
    }
    return *this;
  }
  BorrowedChunk(const BorrowedChunk&) = delete;
  BorrowedChunk& operator=(const BorrowedChunk&) = delete;
  ~BorrowedChunk() { Release(); }

  // The payload as runs of contiguous bytes, in order (usable as a GatherList). Valid until Release.
  std::span<const std::span<const std::byte>> pieces() const { return pieces_; }
  uint64_t size() const {
    uint64_t n = 0;
    for (const auto& p : pieces_) n += p.size();
    return n;
  }
  bool held() const { return release_ != nullptr; }

  // Gives the pages back to the tier; the view is empty afterwards. Idempotent.
  void Release() {
    pieces_.clear();
    if (auto fn = std::exchange(release_, nullptr)) fn();
  }

 private:
  std::vector<std::span<const std::byte>> pieces_;
  std::function<void()> release_;
};

}  // namespace kvtier
