// Request traces: the JSONL format of public production traces, one request per line:
//   {"timestamp": <ms from start>, "input_length": <tokens>, "output_length": <tokens>,
//    "hash_ids": [<int>, ...]}
// Each hash id names one block of `block_tokens` prompt tokens, hashed together with everything
// before it, so two requests that share their first k ids share a k-block prefix. The last block
// may be partial.
//
// Loading is a pure function of the file; the returned Trace is a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal {

struct TraceRequest {
  uint64_t timestamp_ms = 0;
  uint64_t input_length = 0;  // prompt tokens
  uint64_t output_length = 0;
  std::vector<uint32_t> hash_ids;  // one per block, ceil(input_length / block_tokens) of them
};

struct Trace {
  std::vector<TraceRequest> requests;
  uint32_t block_tokens = 512;
  uint64_t input_tokens = 0;  // sum of input_length
  uint64_t block_refs = 0;    // sum of hash_ids.size()
  // Span of the arrival times (last - first), at least 1 ms so rates stay finite.
  uint64_t DurationMs() const;
};

// Bounds on what a trace may hold, so a hostile or broken file cannot exhaust memory or overflow a
// sum: the file and each line are bounded, and every number is range-checked.
inline constexpr uint64_t kMaxTraceFileBytes = 1ull << 30;
inline constexpr size_t kMaxTraceLineBytes = 4u << 20;
inline constexpr uint32_t kMaxBlockTokens = 1u << 20;
inline constexpr uint64_t kMaxTraceTokens = 1ull << 32;         // input_length, output_length
inline constexpr uint64_t kMaxTraceTimestampMs = 1ull << 53;
// The memory bound of a replay's trace: at most this many block references (hash ids) in all, counted
// while the trace streams in, so a trace above it is refused at the line that crosses it before it is
// held. What a replay holds per reference: 4 bytes of trace and a 32-byte chunk key (about 150 MB at
// the bound, with the lines read one at a time); 34 times the public trace's 121,877 references.
inline constexpr uint64_t kMaxTraceBlockRefs = 1ull << 22;

// Parses one line. InvalidArgument for malformed JSON, missing fields, a number out of its range
// (above), a hash id count that does not match ceil(input_length / block_tokens), or block_tokens
// outside [1, kMaxBlockTokens].
Result<TraceRequest> ParseTraceLine(std::string_view line, uint32_t block_tokens);

// Reads a whole trace (blank lines are skipped); `max_requests` > 0 keeps only the first ones.
// NotFound/IOError when the file cannot be read; InvalidArgument when it is not a regular file (a
// FIFO or device is refused without blocking), is larger than kMaxTraceFileBytes, holds a line
// longer than kMaxTraceLineBytes or no request at all, naming the line number of a bad record, when
// timestamps go backwards, or when the requests kept hold more than `max_block_refs` block
// references (named at the line that crosses it).
Result<Trace> LoadTrace(const std::string& path, uint32_t block_tokens, size_t max_requests = 0,
                        uint64_t max_block_refs = kMaxTraceBlockRefs);

}  // namespace kvtier::internal
