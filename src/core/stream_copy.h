// StreamCopy: memcpy for large copies whose destination the copying core will not read again soon (a
// chunk handed to its caller, a GPU staging buffer). On x86-64 it writes with non-temporal stores, which
// go to DRAM without first reading each destination line into the cache: a copy moves its bytes over
// the memory bus twice instead of three times. Measured on the development VM (2 vCPUs, AMD EPYC), 32
// MiB copies: 7.7 GB/s with memcpy, 12.6 GB/s streamed, one thread (a scratch program, not in the
// repository; `kvtier bench datapath --target mem://` shows the effect on loads). Elsewhere, and for
// copies below kStreamCopyMinBytes, it is memcpy.
//
// The stores are fenced (sfence) before StreamCopy returns, so the bytes are visible to other threads
// (and to a DMA engine) in the usual order. Thread-safe; the ranges must not overlap.
#pragma once

#include <cstddef>

namespace kvtier::internal {

inline constexpr size_t kStreamCopyMinBytes = size_t{64} << 10;

void StreamCopy(void* dst, const void* src, size_t n);

// For one large copy into many destination pieces (a chunk scattered into 16-token paged KV blocks:
// 32 KiB pieces): StreamCopyPiece streams every piece of at least 64 bytes, whatever its size, and
// does not fence; StreamFence() after the last piece orders them all. Use it when the whole copy is at
// least kStreamCopyMinBytes, so small pieces of a large copy still skip the read of the destination.
void StreamCopyPiece(void* dst, const void* src, size_t n);
void StreamFence();

// Before the next piece of such a copy is written: starts the address translation of its first
// kPrefetchPagesMax pages (one cache-line prefetch per 4 KiB page of the `n` bytes at `dst`), so that
// piece's page walks run while the current piece streams instead of stalling its first stores. A
// destination cut into 32 KiB pieces spread over many tensors starts every piece on pages the copy has
// not touched yet; a contiguous one walks its page tables in order. The gain is measured, the TLB
// misses behind it inferred (no hardware counters on the VM): docs/connectors.md ("Load speed into
// CPU paged blocks"). Writes nothing and never faults; a no-op off x86-64.
inline constexpr size_t kPrefetchPagesMax = 16;
void PrefetchPages(const void* dst, size_t n);

}  // namespace kvtier::internal
