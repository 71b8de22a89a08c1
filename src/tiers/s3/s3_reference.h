// The same-run reference of `kvtier bench datapath --target s3://...`: raw libcurl, none of kvtier's S3
// client (no request objects, landing or stats). With the URL's endpoint, bucket, prefix and
// credentials, every handle signed by the client's own setup function (s3_http.h's SetUpSigning:
// SigV4, UNSIGNED-PAYLOAD), it writes `count` objects of `object_bytes` (object/object_reference.h's
// bytes) under names of its own, timed: PUTs on one multi handle, one easy handle per object in flight
// (at most `window`, each reused for a new PUT as soon as its last one ended, as ObjectTier's Puts from
// the bench's threads fill a bound of inflight= bytes), each body sent by the read callback from a
// buffer of its own. Then it reads them back in windows of `window` objects: one easy handle per object
// of a window (reused window after window, so their connections stay open) on one multi handle, each
// GET's body copied by its write callback into a buffer of its own, the window's GETs started together
// and awaited (as ObjectTier reads a window of at most inflight= bytes). It checks each PUT's status and
// each GET's status, length and bytes, then deletes the objects (through s3_http.h, not timed).
#pragma once

#include <cstdint>

#include "kvtier/tier.h"
#include "tiers/object/object_reference.h"

namespace kvtier::s3 {

// InvalidArgument on a bad URL or missing credentials; the first failed PUT's error (S3Status; what was
// written is deleted). Read errors are counted.
Result<object::RawRoundTrip> PlainCurlReference(const TierUrl& url, uint64_t object_bytes, uint64_t count,
                                                uint64_t window);

}  // namespace kvtier::s3
