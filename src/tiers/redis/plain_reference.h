// The same-run reference of `kvtier bench datapath --target redis://...`: plain hiredis GETs, none of
// kvtier's Redis client (no router, pool, pipelining or reply conversion). It finds the masters with
// CLUSTER SLOTS on a seed (a single instance: the seed itself), writes `count` values of `value_bytes`
// under keys of its own whose hash tag puts value i on master (i % streams) % masters, then reads them
// back with `streams` threads, each with its own hiredis connection to its master and one
// redisCommand("GET %b") at a time: `streams` values in flight. Each reply's length and index tag are
// checked. The keys are deleted at the end. The URL's password_file=, user= and timeouts apply.
#pragma once

#include <cstdint>

#include "kvtier/status.h"
#include "kvtier/tier.h"

namespace kvtier::redis {

struct PlainGetResult {
  uint64_t values = 0;  // read back whole with the right tag
  uint64_t bytes = 0;   // their bytes
  uint64_t errors = 0;  // failed or wrong
  double seconds = 0;   // the reads only (connections are made before the clock starts)
};

// InvalidArgument on a bad URL; IOError when no node answers or a SET fails. Read errors are counted.
Result<PlainGetResult> PlainHiredisGetReference(const TierUrl& url, uint64_t value_bytes, uint64_t count,
                                                uint64_t streams);

}  // namespace kvtier::redis
