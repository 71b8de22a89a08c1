// StreamCopy must be memcpy for every size and alignment: below and above its streaming threshold,
// destinations and sources off any 16-byte boundary, tails shorter than one 64-byte step.
#include "core/stream_copy.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier::internal {
namespace {

TEST(StreamCopyTest, CopiesExactlyTheBytesAtEveryAlignmentAndSize) {
  const size_t sizes[] = {0, 1, 63, 64, 4095, kStreamCopyMinBytes - 1, kStreamCopyMinBytes,
                          kStreamCopyMinBytes + 1, kStreamCopyMinBytes + 77, (3u << 20) + 5};
  std::vector<unsigned char> src((4u << 20) + 64), dst(src.size() + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + (i >> 9));
  for (size_t n : sizes) {
    for (size_t soff : {0u, 3u, 16u}) {
      for (size_t doff : {0u, 1u, 9u, 32u}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        StreamCopy(dst.data() + doff, src.data() + soff, n);
        for (size_t i = 0; i < doff; ++i) ASSERT_EQ(dst[i], 0xEE) << "wrote before the destination";
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(dst[doff + i], src[soff + i]) << "n=" << n << " soff=" << soff << " doff=" << doff << " i=" << i;
        }
        ASSERT_EQ(dst[doff + n], 0xEE) << "wrote past the destination, n=" << n;
      }
    }
  }
}

// StreamCopyPiece (no fence; StreamFence after the last piece) at sizes below the threshold too: the
// pieces of a chunk scattered into paged blocks, down to a few bytes (head shorter than the alignment).
TEST(StreamCopyTest, PiecesCopyExactlyTheBytesAtEverySize) {
  const size_t sizes[] = {0, 1, 5, 15, 16, 17, 63, 64, 65, 4095, 32768 + 3};
  std::vector<unsigned char> src(40000), dst(src.size() + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 37 + (i >> 7));
  for (size_t n : sizes) {
    for (size_t doff : {0u, 1u, 9u, 15u}) {
      std::fill(dst.begin(), dst.end(), 0xEE);
      StreamCopyPiece(dst.data() + doff, src.data() + 1, n);
      StreamFence();
      for (size_t i = 0; i < doff; ++i) ASSERT_EQ(dst[i], 0xEE) << "wrote before the destination";
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(dst[doff + i], src[1 + i]) << "n=" << n << " doff=" << doff;
      ASSERT_EQ(dst[doff + n], 0xEE) << "wrote past the destination, n=" << n;
    }
  }
}

}  // namespace
}  // namespace kvtier::internal
