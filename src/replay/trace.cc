#include "replay/trace.h"

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>

namespace kvtier::internal {
namespace {

Result<uint64_t> NonNegative(const nlohmann::json& obj, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end()) return Status::InvalidArgument(std::string("missing field '") + field + "'");
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return Status::InvalidArgument(std::string("field '") + field +
                                   "' must be a non-negative integer");
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
  if (block_tokens == 0) return Status::InvalidArgument("block_tokens must be positive");
  const nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded() || !obj.is_object()) return Status::InvalidArgument("not a JSON object");
  TraceRequest r;
  KVTIER_ASSIGN_OR_RETURN(r.timestamp_ms, NonNegative(obj, "timestamp"));
  KVTIER_ASSIGN_OR_RETURN(r.input_length, NonNegative(obj, "input_length"));
  KVTIER_ASSIGN_OR_RETURN(r.output_length, NonNegative(obj, "output_length"));
  auto ids = obj.find("hash_ids");
  if (ids == obj.end() || !ids->is_array()) {
    return Status::InvalidArgument("missing array field 'hash_ids'");
  }
  r.hash_ids.reserve(ids->size());
  for (const auto& id : *ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<uint64_t>() > UINT32_MAX) {
      return Status::InvalidArgument("hash_ids must hold integers in [0, 2^32)");
    }
    r.hash_ids.push_back(id.get<uint32_t>());
  }
  const uint64_t want = (r.input_length + block_tokens - 1) / block_tokens;
  if (r.hash_ids.size() != want) {
    return Status::InvalidArgument(
        "input_length " + std::to_string(r.input_length) + " needs " + std::to_string(want) +
        " blocks of " + std::to_string(block_tokens) + " tokens, hash_ids has " +
        std::to_string(r.hash_ids.size()) + " (is --block-tokens right?)");
  }
  return r;
}

Result<Trace> LoadTrace(const std::string& path, uint32_t block_tokens, size_t max_requests) {
  std::ifstream in(path);
  if (!in) return Status::FromErrno(errno, "open trace " + path);
  Trace trace;
  trace.block_tokens = block_tokens;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto r = ParseTraceLine(line, block_tokens);
    if (!r.ok()) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": " +
                                     r.status().message());
    }
    if (!trace.requests.empty() && r->timestamp_ms < trace.requests.back().timestamp_ms) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) +
                                     ": timestamps must not go backwards");
    }
    trace.input_tokens += r->input_length;
    trace.block_refs += r->hash_ids.size();
    trace.requests.push_back(std::move(r).value());
    if (max_requests > 0 && trace.requests.size() >= max_requests) break;
  }
  if (in.bad()) return Status::IOError("read trace " + path);
  return trace;
}

}  // namespace kvtier::internal
