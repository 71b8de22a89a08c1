// The same-run reference of `kvtier bench datapath` for object tiers: what the backend's own client
// delivers without kvtier. It writes `count` objects of the size kvtier's chunk objects have, with
// names of its own (never chunk names), reads them back with the tier's parallelism (windows of at
// most the tier's inflight= bytes, one client GetMany each, one window at a time, as ObjectTier
// reads), without header, verification or copy, then deletes them.
#pragma once

#include <cstdint>

#include "kvtier/status.h"
#include "object/object_tier.h"

namespace kvtier::object {

struct RawReadResult {
  uint64_t objects = 0;  // read back whole and byte-exact
  uint64_t bytes = 0;    // their bytes
  uint64_t errors = 0;   // failed or wrong
  double seconds = 0;    // the reads only
};

// NotSupported on a read-only tier; the first put error otherwise. Read errors are counted.
Result<RawReadResult> RawReadReference(ObjectTier& tier, uint64_t payload_bytes, uint64_t count);

}  // namespace kvtier::object
