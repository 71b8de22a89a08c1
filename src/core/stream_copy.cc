#include "core/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>  // SSE2: part of every x86-64 CPU
#include <xmmintrin.h>  // _mm_prefetch (SSE)
#endif

namespace kvtier::internal {
namespace {

constexpr size_t kPrefetchStride = 4096;  // one prefetch per page of 4 KiB

}  // namespace

void StreamCopyPiece(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  // Non-temporal stores need a 16-byte aligned destination: copy the first few bytes plainly.
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, n);
#else
  std::memcpy(dst, src, n);
#endif
}

void PrefetchPages(const void* dst, size_t n) {
#if defined(__x86_64__)
  const auto* d = static_cast<const char*>(dst);
  const size_t end = std::min(n, kPrefetchPagesMax * kPrefetchStride);
  for (size_t at = 0; at < end; at += kPrefetchStride) _mm_prefetch(d + at, _MM_HINT_T0);
#else
  (void)dst;
  (void)n;
#endif
}

void StreamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

void StreamCopy(void* dst, const void* src, size_t n) {
  if (n < kStreamCopyMinBytes) {
    std::memcpy(dst, src, n);
    return;
  }
  StreamCopyPiece(dst, src, n);
  StreamFence();
}

}  // namespace kvtier::internal
