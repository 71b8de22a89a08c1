#include "io/chunk_io.h"
#include "io/readers.h"

namespace kvtier::internal {

std::unique_ptr<ChunkReader> ChunkReader::Create(const ReaderOptions& options) {
  if (options.use_io_uring) {
    if (auto reader = MakeUringReader(options)) return reader;
  }
  return MakePreadvReader(options);
}

}  // namespace kvtier::internal
