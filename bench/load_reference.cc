// kvtier_load_reference: the C++ Store's load throughput, the reference of python/bench/load_throughput.py.
//
//   kvtier_load_reference --tier URL --chunks N --reps R [--pieces P] [--first-token T] [--populate]
//
// Namespace "bench/llama-3.1-8b" (tenant "bench"), llama-3.1-8b layout (32 MiB chunks), keys of tokens
// T, T+1, ...; each chunk is P pieces of one contiguous buffer. --populate saves the chunks first (byte
// value (chunk index * 7 + 1) mod 251) and flushes. One untimed, verified load warms the data, then R timed
// loads of all N chunks in one Store::Load each. Prints one JSON object; exit 1 on any error.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kvtier/store.h"

namespace {

using namespace kvtier;

struct Args {
  std::string tier;
  size_t chunks = 8, reps = 5, pieces = 32;
  uint32_t first_token = 1;
  bool populate = false;
};

bool ParseArgs(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--populate") {
      a.populate = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    const bool numeric = end != v && *end == '\0';
    if (k == "--tier") a.tier = v;
    else if (k == "--chunks" && numeric) a.chunks = n;
    else if (k == "--reps" && numeric) a.reps = n;
    else if (k == "--pieces" && numeric) a.pieces = n;
    else if (k == "--first-token" && numeric) a.first_token = static_cast<uint32_t>(n);
    else return false;
  }
  return !a.tier.empty() && a.chunks > 0 && a.reps > 0 && a.pieces > 0;
}

// One contiguous buffer, each chunk cut into `pieces` equal pieces.
struct Buffers {
  Buffers(size_t chunks, size_t chunk_bytes, size_t pieces) : bytes(chunks * chunk_bytes) {
    const size_t piece = chunk_bytes / pieces;
    for (size_t c = 0; c < chunks; ++c) {
      for (size_t p = 0; p < pieces; ++p) {
        std::byte* at = bytes.data() + c * chunk_bytes + p * piece;
        const size_t n = p + 1 == pieces ? chunk_bytes - p * piece : piece;
        out.emplace_back(at, n);
        in.emplace_back(at, n);
      }
    }
    for (size_t c = 0; c < chunks; ++c) {
      dsts.emplace_back(out.data() + c * pieces, pieces);
      srcs.emplace_back(in.data() + c * pieces, pieces);
    }
  }
  std::vector<std::byte> bytes;
  std::vector<std::span<std::byte>> out;
  std::vector<std::span<const std::byte>> in;
  std::vector<ScatterList> dsts;
  std::vector<GatherList> srcs;
};

std::byte Pattern(size_t chunk) { return static_cast<std::byte>((chunk * 7 + 1) % 251); }

int Fail(const std::string& what) {
  std::fprintf(stderr, "kvtier_load_reference: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, a)) {
    return Fail("usage: --tier URL --chunks N --reps R [--pieces P] [--first-token T] [--populate]");
  }
  const Layout layout{32, 8, 128, DType::kBF16, 256};
  auto ns = Namespace::Make("bench/llama-3.1-8b", layout, "bench");
  if (!ns.ok()) return Fail(ns.status().ToString());
  std::vector<uint32_t> tokens(a.chunks * layout.tokens_per_chunk);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = a.first_token + static_cast<uint32_t>(i);
  const auto keys = ComputeChunkKeys(*ns, tokens);
  StoreOptions opt;
  opt.tiers = {a.tier};
  auto store = Store::Open(opt);
  if (!store.ok()) return Fail(store.status().ToString());
  const size_t chunk_bytes = layout.BytesPerChunk();
  Buffers buf(a.chunks, chunk_bytes, a.pieces);
  if (a.populate) {
    for (size_t c = 0; c < a.chunks; ++c) std::memset(&buf.bytes[c * chunk_bytes], int(Pattern(c)), chunk_bytes);
    if (auto s = (*store)->Save(*ns, keys, buf.srcs); !s.ok()) return Fail(s.ToString());
    if (auto s = (*store)->Flush(); !s.ok()) return Fail(s.ToString());
  }
  std::memset(buf.bytes.data(), 0, buf.bytes.size());
  auto warm = (*store)->Load(*ns, keys, buf.dsts);
  if (!warm.ok() || *warm != a.chunks) return Fail("warm-up load: not every chunk loaded");
  for (size_t c = 0; c < a.chunks; ++c) {
    if (buf.bytes[c * chunk_bytes] != Pattern(c) || buf.bytes[(c + 1) * chunk_bytes - 1] != Pattern(c)) {
      return Fail("chunk " + std::to_string(c) + " has other bytes than saved");
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (size_t r = 0; r < a.reps; ++r) {
    auto loaded = (*store)->Load(*ns, keys, buf.dsts);
    if (!loaded.ok() || *loaded != a.chunks) return Fail("timed load: not every chunk loaded");
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = double(chunk_bytes) * double(a.chunks) * double(a.reps);
  std::printf("{\"tier\": \"%s\", \"chunks\": %zu, \"reps\": %zu, \"pieces\": %zu, \"chunk_bytes\": %zu, "
              "\"seconds\": %.6f, \"gbps\": %.4f}\n",
              a.tier.c_str(), a.chunks, a.reps, a.pieces, chunk_bytes, seconds, bytes / seconds / 1e9);
  return 0;
}
