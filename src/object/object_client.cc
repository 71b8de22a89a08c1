#include "object/object_client.h"

#include <algorithm>
#include <cstring>

namespace kvtier::object {

Status LandObject(ObjectRead& op, std::span<const std::byte> bytes) {
  op.bytes = bytes.size();
  if (bytes.size() > op.Capacity()) {
    return Status::InvalidArgument("object " + op.name + " has " + std::to_string(bytes.size()) +
                                   " bytes, more than the " + std::to_string(op.Capacity()) + " expected");
  }
  const size_t head = std::min(bytes.size(), op.dst.size());
  if (head > 0) std::memcpy(op.dst.data(), bytes.data(), head);
  size_t done = head;
  for (const auto& piece : op.rest) {
    if (done == bytes.size()) break;
    const size_t n = std::min(piece.size(), bytes.size() - done);
    if (n > 0) std::memcpy(piece.data(), bytes.data() + done, n);
    done += n;
  }
  op.wrote = op.wrote || !bytes.empty();
  if (op.landed) op.landed(op);
  return Status::OK();
}

}  // namespace kvtier::object
