// The same-run reference of `kvtier bench datapath --target s3://...`: raw libcurl GETs, none of
// kvtier's S3 client (no request objects, status mapping, landing or stats). With the URL's endpoint,
// bucket, prefix and credentials it writes `count` objects of `object_bytes` under names of its own
// (PUTs through s3_http.h: setup, not measured), then reads them back in windows of `window` objects:
// one curl easy handle per object of a window (reused window after window, so their connections stay
// open) on one multi handle, each GET's body copied by its write callback into a buffer of its own, the
// window's GETs started together and awaited (as ObjectTier reads a window of at most inflight=
// bytes). It checks each object's HTTP status, length and bytes, then deletes the objects.
#pragma once

#include <cstdint>

#include "kvtier/tier.h"
#include "tiers/object/object_reference.h"

namespace kvtier::s3 {

// InvalidArgument on a bad URL or missing credentials; the first PUT's error. Read errors are counted.
Result<object::RawReadResult> PlainCurlGetReference(const TierUrl& url, uint64_t object_bytes, uint64_t count,
                                                    uint64_t window);

}  // namespace kvtier::s3
