// The same-run reference of `kvtier bench datapath` for object tiers: what the backend's own client
// delivers without kvtier. It writes `count` objects of the size kvtier's chunk objects have, with
// names of its own (never chunk names), reads them back with the tier's parallelism (windows of at
// most the tier's inflight= bytes, one client GetMany each, one window at a time, as ObjectTier
// reads), without header, verification or copy, then deletes them.
#pragma once

#include <cstdint>
#include <span>

#include "kvtier/status.h"
#include "tiers/object/object_tier.h"

namespace kvtier::object {

struct RawReadResult {
  uint64_t objects = 0;  // read back whole and byte-exact (for a write reference: written)
  uint64_t bytes = 0;    // their bytes
  uint64_t errors = 0;   // failed or wrong
  double seconds = 0;    // the reads (the writes) only
};

// A backend reference that times its writes as well (rados/rados_reference.h, s3/s3_reference.h):
// its writes, then its reads of what it wrote.
struct RawRoundTrip {
  RawReadResult write, read;
};

// The bytes of reference object `i`: its index as a tag, then a fixed pattern. Shared by the backends'
// own references (e.g. s3/s3_reference.h) so every reference checks what it reads the same way.
void FillReferenceObject(std::span<std::byte> b, uint64_t i);
// Whether `got` is reference object `i`, given `pattern` = FillReferenceObject(.., 0) of its size.
bool ReferenceObjectMatches(std::span<const std::byte> got, std::span<const std::byte> pattern, uint64_t i);

// NotSupported on a read-only tier; the first put error otherwise. Read errors are counted.
Result<RawReadResult> RawReadReference(ObjectTier& tier, uint64_t payload_bytes, uint64_t count);

}  // namespace kvtier::object
