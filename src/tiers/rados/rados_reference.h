// The same-run reference of `kvtier bench datapath --target rados://...`: plain librados, none of
// kvtier's client (no compound operations, names, status mapping or stats). On its own connection
// (the URL's conf=, user=, keyring=, pool and namespace) it writes `count` objects of `object_bytes`
// (object/object_reference.h's bytes: index tag, fixed pattern) under names of its own, timed: one
// rados_aio_write_full per object, at most `window` in flight, a new write issued as the oldest
// completes (as ObjectTier's Puts from the bench's threads fill a bound of inflight= bytes). Then it
// reads them back in windows of `window` objects, each window one rados_aio_read per object issued
// together and then awaited (as ObjectTier reads a window of at most inflight= bytes), checks each
// object's length and bytes, and removes them.
#pragma once

#include <cstdint>

#include "kvtier/tier.h"
#include "tiers/object/object_reference.h"

namespace kvtier::rados {

// InvalidArgument on a bad URL; the connection's or the first failed write's error (what was written
// is removed). Read errors are counted.
Result<object::RawRoundTrip> PlainRadosReference(const TierUrl& url, uint64_t object_bytes, uint64_t count,
                                                 uint64_t window);

}  // namespace kvtier::rados
