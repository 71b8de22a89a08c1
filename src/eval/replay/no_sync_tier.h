// A tier that forwards every call to another, except Flush, which it skips.
//
// The replay calls Store::Flush after each request to wait for the Store's background writes, so
// that every request sees the same lower-tier state whatever the machine's speed. Durability means
// nothing to a replay, and a filesystem sync per request would make a file:// replay take minutes;
// this wrapper keeps the wait and drops the sync. It changes no other behaviour of the wrapped
// tier.
//
// Thread-safety: as the wrapped tier.
#pragma once

#include <memory>

#include "kvtier/tier.h"

namespace kvtier::internal {

std::unique_ptr<Tier> WrapWithoutSync(std::unique_ptr<Tier> tier);

}  // namespace kvtier::internal
