#include "testing/fault_tier.h"

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

namespace kvtier::internal {
namespace {

void Delay(uint32_t micros) {
  if (micros > 0) std::this_thread::sleep_for(std::chrono::microseconds(micros));
}

// Fills the second half of the destination with a pattern that is never a valid chunk payload
// pattern of the tests, as a short read leaves stale bytes behind.
void SmearTail(ScatterList dst, size_t keep) {
  size_t offset = 0;
  for (const auto& piece : dst) {
    for (size_t i = 0; i < piece.size(); ++i) {
      if (offset + i >= keep) piece[i] = std::byte{0xA5};
    }
    offset += piece.size();
  }
}

}  // namespace

void FaultControls::ClearFaults() {
  read_error = false;
  write_error = false;
  no_space = false;
  short_read = false;
  read_delay_us = 0;
  write_delay_us = 0;
}

uint64_t FaultControls::InjectedTotal() const {
  return injected_read_errors + injected_write_errors + injected_no_space + injected_short_reads;
}

FaultTier::FaultTier(std::unique_ptr<Tier> base, std::shared_ptr<FaultControls> controls)
    : ForwardingTier(std::move(base)), controls_(std::move(controls)) {}

bool FaultTier::Contains(const ChunkId& id) {
  // A failing device cannot even answer presence; the store must then treat the chunk as a miss.
  if (controls_->read_error) return false;
  return inner_->Contains(id);
}

Status FaultTier::Put(const ChunkId& id, GatherList payload) {
  Delay(controls_->write_delay_us);
  if (controls_->no_space) {
    ++controls_->injected_no_space;
    return Status::FromErrno(ENOSPC, "injected write " + url());
  }
  if (controls_->write_error) {
    ++controls_->injected_write_errors;
    return Status::FromErrno(EIO, "injected write " + url());
  }
  return inner_->Put(id, payload);
}

Status FaultTier::ReadFault(const ChunkId& id, ScatterList dst) {
  if (controls_->read_error) {
    ++controls_->injected_read_errors;
    return Status::FromErrno(EIO, "injected read " + url());
  }
  if (controls_->short_read) {
    ++controls_->injected_short_reads;
    Status s = inner_->Get(id, dst);  // the device delivered something...
    SmearTail(dst, TotalBytes(dst) / 2);  // ...but only the first half of it
    if (!s.ok()) return s;
    return Status::IOError("injected short read " + url() + ": got half of the chunk");
  }
  return Status::OK();
}

Status FaultTier::GetNoDelay(const ChunkId& id, ScatterList dst) {
  Status fault = ReadFault(id, dst);
  if (!fault.ok()) return fault;
  return inner_->Get(id, dst);
}

Status FaultTier::Get(const ChunkId& id, ScatterList dst) {
  Delay(controls_->read_delay_us);
  return GetNoDelay(id, dst);
}

void FaultTier::GetMany(std::span<ReadOp> ops) {
  Delay(controls_->read_delay_us);
  if (!controls_->read_error && !controls_->short_read) return inner_->GetMany(ops);
  for (ReadOp& op : ops) op.status = GetNoDelay(op.id, op.dst);
}

std::unique_ptr<FaultTier> WrapWithFaults(std::unique_ptr<Tier> base,
                                          std::shared_ptr<FaultControls>* controls) {
  *controls = std::make_shared<FaultControls>();
  return std::make_unique<FaultTier>(std::move(base), *controls);
}

}  // namespace kvtier::internal
