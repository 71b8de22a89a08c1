// The same-run reference of `kvtier bench datapath --target rados://...`: plain librados, none of
// kvtier's client (no compound operations, names, status mapping or stats). On its own connection
// (the URL's conf=, user=, keyring=, pool and namespace) it writes `count` objects of `object_bytes`
// under names of its own with rados_write_full, reads them back in windows of `window` objects, each
// window one rados_aio_read per object issued together and then awaited (as ObjectTier reads a window
// of at most inflight= bytes), checks each object's length and index tag, and removes them.
#pragma once

#include <cstdint>

#include "kvtier/tier.h"
#include "tiers/object/object_reference.h"

namespace kvtier::rados {

// InvalidArgument on a bad URL; the connection's or the first write's error. Read errors are counted.
Result<object::RawReadResult> PlainRadosReadReference(const TierUrl& url, uint64_t object_bytes, uint64_t count,
                                                      uint64_t window);

}  // namespace kvtier::rados
