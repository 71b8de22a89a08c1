#include "tiers/redis/bounded_reader.h"

#include <hiredis/hiredis.h>

namespace kvtier::redis {
namespace {

// hiredis's own reply functions are static in the library: a fresh reader points at them.
redisReplyObjectFunctions DefaultFunctions() {
  redisReader* probe = redisReaderCreate();
  redisReplyObjectFunctions f{};
  if (probe != nullptr && probe->fn != nullptr) f = *probe->fn;
  if (probe != nullptr) redisReaderFree(probe);
  return f;
}

const redisReplyObjectFunctions& Defaults() {
  static const redisReplyObjectFunctions defaults = DefaultFunctions();
  return defaults;
}

void* CreateBoundedArray(const redisReadTask* task, int elements) {
  if (elements < 0 || elements > kMaxReplyElements || Defaults().createArray == nullptr) return nullptr;
  return Defaults().createArray(task, elements);
}

redisReplyObjectFunctions* Bounded() {
  static redisReplyObjectFunctions bounded = [] {
    redisReplyObjectFunctions f = Defaults();
    f.createArray = CreateBoundedArray;
    return f;
  }();
  return &bounded;
}

}  // namespace

void BoundReader(redisReader* reader) {
  // Only a reader that builds hiredis's own reply objects is bounded (one with other functions, or
  // none, builds something else and keeps them).
  if (reader != nullptr && reader->fn != nullptr && reader->fn->createArray == Defaults().createArray) {
    reader->fn = Bounded();
  }
}

}  // namespace kvtier::redis
