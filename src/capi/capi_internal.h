// Internals of the C API (include/kvtier/kvtier.h): the handle structs, the status and error boundary,
// and the conversion of caller arrays into the C++ Store's spans.
//
// Every exported function runs its body through Guard / GuardValue, which turn a non-OK Status or any
// C++ exception into a kvtier_status and the thread's last error; nothing unwinds into C.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/thread_pool.h"
#include "kvtier/keys.h"
#include "kvtier/kvtier.h"
#include "kvtier/status.h"
#include "kvtier/store.h"

struct kvtier_ns {
  kvtier::Namespace ns;
};

struct kvtier_store {
  std::unique_ptr<kvtier::Store> store;
  // Runs the kvtier_*_async operations; destroyed first on close: it finishes queued and running ones.
  std::unique_ptr<kvtier::internal::ThreadPool> async;
};

namespace kvtier::capi {

// Records `s` as this thread's last error (when not OK) and returns its code as a kvtier_status.
kvtier_status Fail(const Status& s) noexcept;
// Records `text` as this thread's last error.
void SetLastError(const std::string& text) noexcept;
inline kvtier_status ToC(const Status& s) noexcept { return s.ok() ? KVTIER_OK : Fail(s); }
// The Status of the C++ exception being handled (call only inside a catch block): NoSpace for
// std::bad_alloc, Internal otherwise, with a message naming `fn` when there is memory for one.
Status ExceptionStatus(const char* fn) noexcept;
// Records ExceptionStatus(fn) as the last error and returns its code (only inside a catch block).
kvtier_status FailFromException(const char* fn) noexcept;

inline Status NullArgument(const char* fn, const char* arg) {
  return Status::InvalidArgument(std::string(fn) + ": " + arg + " is NULL");
}

// Runs `body` (returning Status) and converts its result; exceptions become NoSpace or Internal.
template <typename Body>
kvtier_status Guard(const char* fn, Body&& body) noexcept {
  try {
    return ToC(body());
  } catch (...) {
    return FailFromException(fn);
  }
}

// Runs `body` (returning a value) and returns `on_error` when it throws.
template <typename T, typename Body>
T GuardValue(const char* fn, T on_error, Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    (void)FailFromException(fn);
    return on_error;
  }
}

// The caller's chunk buffers as the Store takes them. The piece spans are owned here; `chunks` points
// into them, so a ChunkBuffers is not copied or moved once built.
template <typename Byte>
struct ChunkBuffers {
  std::vector<std::span<Byte>> pieces;
  std::vector<std::span<const std::span<Byte>>> chunks;
  ChunkBuffers() = default;
  ChunkBuffers(const ChunkBuffers&) = delete;
  ChunkBuffers& operator=(const ChunkBuffers&) = delete;
};

// Checks and converts `n_chunks` chunks of `pieces` (see kvtier.h): NULL arrays, NULL data with a
// non-zero size, overflowing counts or sizes, and chunks whose sizes do not add up to `chunk_bytes`
// are InvalidArgument.
Status BuildBuffers(const char* fn, size_t n_chunks, const kvtier_buf* pieces,
                    const size_t* pieces_per_chunk, uint64_t chunk_bytes,
                    ChunkBuffers<std::byte>& out);
Status BuildBuffers(const char* fn, size_t n_chunks, const kvtier_buf* pieces,
                    const size_t* pieces_per_chunk, uint64_t chunk_bytes,
                    ChunkBuffers<const std::byte>& out);

// Copies `n` keys (InvalidArgument when `keys` is NULL and n > 0).
Result<std::vector<ChunkKey>> CopyKeys(const char* fn, const kvtier_key* keys, size_t n);

}  // namespace kvtier::capi
