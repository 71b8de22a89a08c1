// The two ChunkReader engines; ChunkReader::Create picks one. Private to src/io.
#pragma once

#include <memory>

#include "io/chunk_io.h"

namespace kvtier::internal {

// A pool of threads reading with preadv; works wherever files can be read.
std::unique_ptr<ChunkReader> MakePreadvReader(const ReaderOptions& options);

// io_uring reader; nullptr when the kernel (or a seccomp policy) refuses io_uring.
std::unique_ptr<ChunkReader> MakeUringReader(const ReaderOptions& options);

}  // namespace kvtier::internal
