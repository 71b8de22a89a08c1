#include "tiers/object/object_client.h"

#include <algorithm>
#include <cstring>

namespace kvtier::object {
namespace {

Status TooLarge(const ObjectRead& op, uint64_t bytes, std::string_view who) {
  return Status::InvalidArgument(std::string(who) + "object " + op.name + " has " + std::to_string(bytes) +
                                 " bytes, more than the " + std::to_string(op.Capacity()) + " expected");
}

}  // namespace

Status LandObject(ObjectRead& op, std::span<const std::byte> bytes) {
  op.bytes = bytes.size();
  if (bytes.size() > op.Capacity()) return TooLarge(op, bytes.size(), "");
  ObjectLander lander(op);
  (void)lander.Append(bytes);  // fits: checked above
  if (op.landed) op.landed(op);
  return Status::OK();
}

std::vector<std::span<std::byte>> LandingPieces(const ObjectRead& op) {
  std::vector<std::span<std::byte>> pieces;
  pieces.reserve(1 + op.rest.size());
  if (!op.dst.empty()) pieces.push_back(op.dst);
  for (const auto& piece : op.rest) {
    if (!piece.empty()) pieces.push_back(piece);
  }
  return pieces;
}

bool ObjectLander::Append(std::span<const std::byte> bytes) {
  if (landed_ + bytes.size() > op_.Capacity()) return false;
  while (!bytes.empty()) {
    const std::span<std::byte> piece = piece_ == 0 ? op_.dst : op_.rest[piece_ - 1];
    const size_t n = std::min(bytes.size(), piece.size() - offset_);
    if (n > 0) std::memcpy(piece.data() + offset_, bytes.data(), n);
    bytes = bytes.subspan(n);
    offset_ += n;
    landed_ += n;
    if (offset_ == piece.size()) {  // on to the next piece (the capacity check bounds this)
      ++piece_;
      offset_ = 0;
    }
    op_.wrote = op_.wrote || n > 0;
  }
  return true;
}

void CompleteLanding(ObjectRead& op, uint64_t object_bytes, uint64_t landed_bytes, std::string_view who) {
  op.bytes = object_bytes;
  const std::string prefix = std::string(who) + ": ";
  if (object_bytes > op.Capacity()) {
    op.status = TooLarge(op, object_bytes, prefix);
  } else if (landed_bytes != object_bytes) {
    op.status = Status::IOError(prefix + "short read of " + op.name + " (" + std::to_string(landed_bytes) + " of " +
                                    std::to_string(object_bytes) + " bytes)",
                                /*retryable=*/true);
  } else {
    op.status = Status::OK();
    if (op.landed) op.landed(op);
  }
}

}  // namespace kvtier::object
