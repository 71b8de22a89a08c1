// Bounds what a Redis reply may make hiredis allocate before its bytes arrive. hiredis (0.14, Debian 12)
// allocates an array reply's element table at the size the server announces (`*N\r\n`), so a broken or
// hostile server that announces *666666663 makes the client allocate 5 GB at once (found by
// fuzz/redis_router_fuzz). BoundReader makes an array of more than kMaxReplyElements elements a protocol
// error of that connection instead (its reader reports "Out of memory"; the connection is failed).
// Thread-safety: BoundReader may be called from any thread; a reader is used by one thread at a time.
#pragma once

#include <hiredis/read.h>

namespace kvtier::redis {

// Far above any reply kvtier asks for (CLUSTER SLOTS has at most 16384 ranges); at most 8 MiB of
// element table per array.
inline constexpr int kMaxReplyElements = 1 << 20;

void BoundReader(redisReader* reader);

}  // namespace kvtier::redis
