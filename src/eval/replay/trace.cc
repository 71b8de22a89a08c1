#include "eval/replay/trace.h"

#include <nlohmann/json.hpp>

#include "core/input_file.h"

namespace kvtier::internal {
namespace {

Result<uint64_t> NonNegative(const nlohmann::json& obj, const char* field, uint64_t max) {
  auto it = obj.find(field);
  if (it == obj.end()) return Status::InvalidArgument(std::string("missing field '") + field + "'");
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max) {
    return Status::InvalidArgument(std::string("field '") + field + "' must be an integer in [0, " +
                                   std::to_string(max) + "]");
  }
  return it->get<uint64_t>();
}

}  // namespace

uint64_t Trace::DurationMs() const {
  if (requests.size() < 2) return 1;
  const uint64_t d = requests.back().timestamp_ms - requests.front().timestamp_ms;
  return d == 0 ? 1 : d;
}

Result<TraceRequest> ParseTraceLine(std::string_view line, uint32_t block_tokens) {
  if (block_tokens == 0 || block_tokens > kMaxBlockTokens) {
    return Status::InvalidArgument("block_tokens must be in [1, " + std::to_string(kMaxBlockTokens) + "]");
  }
  const nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded() || !obj.is_object()) return Status::InvalidArgument("not a JSON object");
  TraceRequest r;
  KVTIER_ASSIGN_OR_RETURN(r.timestamp_ms, NonNegative(obj, "timestamp", kMaxTraceTimestampMs));
  KVTIER_ASSIGN_OR_RETURN(r.input_length, NonNegative(obj, "input_length", kMaxTraceTokens));
  KVTIER_ASSIGN_OR_RETURN(r.output_length, NonNegative(obj, "output_length", kMaxTraceTokens));
  auto ids = obj.find("hash_ids");
  if (ids == obj.end() || !ids->is_array()) {
    return Status::InvalidArgument("missing array field 'hash_ids'");
  }
  r.hash_ids.reserve(ids->size());
  for (const auto& id : *ids) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX) {
      return Status::InvalidArgument("hash_ids must hold integers in [0, 2^32)");
    }
    r.hash_ids.push_back(id.get<uint32_t>());
  }
  const uint64_t want = r.input_length / block_tokens + (r.input_length % block_tokens != 0 ? 1 : 0);
  if (r.hash_ids.size() != want) {
    return Status::InvalidArgument(
        "input_length " + std::to_string(r.input_length) + " needs " + std::to_string(want) +
        " blocks of " + std::to_string(block_tokens) + " tokens, hash_ids has " +
        std::to_string(r.hash_ids.size()) + " (is --block-tokens right?)");
  }
  return r;
}

Result<Trace> LoadTrace(const std::string& path, uint32_t block_tokens, size_t max_requests,
                        uint64_t max_block_refs) {
  KVTIER_ASSIGN_OR_RETURN(LineReader in,
                          LineReader::Open(path, kMaxTraceFileBytes, kMaxTraceLineBytes, "trace"));
  Trace trace;
  trace.block_tokens = block_tokens;
  std::string line;
  for (;;) {
    KVTIER_ASSIGN_OR_RETURN(const bool more, in.Next(&line));
    if (!more) break;
    const std::string where = path + ":" + std::to_string(in.line_number()) + ": ";
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto r = ParseTraceLine(line, block_tokens);
    if (!r.ok()) return Status::InvalidArgument(where + r.status().message());
    if (!trace.requests.empty() && r->timestamp_ms < trace.requests.back().timestamp_ms) {
      return Status::InvalidArgument(where + "timestamps must not go backwards");
    }
    if (r->hash_ids.size() > max_block_refs - trace.block_refs) {
      return Status::InvalidArgument(
          where + "the trace holds more than " + std::to_string(max_block_refs) +
          " block references, the replay's memory bound (docs/replay.md); --max-requests " +
          std::to_string(trace.requests.size()) + " replays the requests before this line");
    }
    trace.input_tokens += r->input_length;
    trace.block_refs += r->hash_ids.size();
    trace.requests.push_back(std::move(r).value());
    if (max_requests > 0 && trace.requests.size() >= max_requests) break;
  }
  if (trace.requests.empty()) return Status::InvalidArgument("trace " + path + " holds no requests");
  return trace;
}

}  // namespace kvtier::internal
