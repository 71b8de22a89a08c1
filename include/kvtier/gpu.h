// GPU path: verified KV chunks straight into an engine's paged KV cache in GPU memory, and back.
//
// Any other cache layout (MLA latents, FlashInfer's interleaved blocks, head-major blocks, a grouped
// namespace) goes by caller-described places instead: OpenPieces, LoadPieces, SavePieces (DevicePieces).
//
// The engine keeps its KV in vLLM's layout: per layer one K and one V tensor, each
// [num_blocks][block_tokens][kv_heads][head_dim] of the layout's dtype, contiguous in GPU memory. A
// request owns a block table: token t of the request lives in block block_table[t / block_tokens] at
// row t % block_tokens. A chunk (include/kvtier/layout.h) holds tokens_per_chunk tokens of every layer
// in the order layer 0 K, layer 0 V, layer 1 K, ...
//
// Load: Store::Load reads and verifies a batch of chunks into pinned host staging (the bytes are
// checked on the host before any reaches the GPU) -- or, for a chunk a tier lends (Store::Borrow,
// verified) from page-locked memory (PinStoreHostMemory), nothing is staged and the copy reads it in
// place -- then one bulk host->GPU copy per chunk (per chunk and
// layer group when the load is layer-wise) lands them in device staging on the transfer's stream and
// one scatter kernel per batch (and layer group) moves the rows into the blocks. While the GPU copies a
// batch, host threads read and verify the next ones (several batches at once, queued in order). A
// layer-wise load queues its GPU work layer group by layer group over every batch its staging slots
// hold at once (a "wave"), so group 0 lands first. Completion is a CUDA event per layer group, waited
// for with blocking synchronisation (no host thread spins) or made a dependency of the engine's stream.
//
// Streams and devices: the transfer's GPU work runs on its own non-blocking stream. `after_stream` (Load
// and Save) makes it wait for the work the engine queued on its stream so far (attention still reading
// blocks a load overwrites, the prefill writing blocks a save reads); nullptr is the legacy default
// stream (handle 0), which the non-blocking transfer stream would otherwise not wait for. Every call
// sets the cache's device and gives the calling thread back the CUDA context it had (none on a thread
// that had none); the transfer's reader threads set the cache's device before any CUDA call, so no
// context is ever made on a device the caller did not name. Streams being captured into a CUDA graph are refused
// (InvalidArgument): kvtier's copies and host reads cannot be captured; call outside the capture.
// Errors: a call that fails has waited for every copy and kernel it queued, so nothing is still writing
// the caller's blocks or the transfer's staging when it returns.
//
// Save: one gather kernel per batch copies the blocks' rows into device staging, one GPU->pinned copy
// per chunk brings them to the host, then Store::Save copies them into the top tier (the lower tiers
// are written in the background). The gather of batch b+1 runs while the host saves batch b.
//
// Builds without CUDA (KVTIER_CUDA=OFF) and machines without a driver or device get NotSupported with
// the reason from every call that needs a GPU; nothing crashes.
//
// Thread-safety: GpuAvailable, PinnedHostAllocator and the allocators it gives are thread-safe. A
// GpuTransfer serves one thread at a time (an engine's scheduler thread); use one per thread for
// parallel transfers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/host_allocator.h"
#include "kvtier/keys.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier {

class Store;

// OK when this build has CUDA and `device` is usable; NotSupported naming the reason otherwise
// (built without CUDA, no driver, no such device).
Status GpuAvailable(int device = 0);

// A HostAllocator (include/kvtier/host_allocator.h) of page-locked host memory: anonymous pages
// registered with cudaHostRegister, portable (every device's copies run from them at pinned speed),
// which, unlike cudaHostAlloc's mapping of the driver's device file, O_DIRECT and io_uring fixed
// buffers accept. Give it to StoreOptions::host_allocator or TierOpenOptions::host_allocator and the
// mem:// arena and the file:// / fs:// readers' bounce slabs are pinned. Every page is committed and
// locked at Allocate (a mem:// arena of capacity C pins C bytes at open). nullptr when this build has
// no CUDA or `device` is not usable. Its Allocate honours any power-of-two alignment and returns
// nullptr when the memory cannot be mapped or the driver refuses to lock it (e.g. RLIMIT_MEMLOCK);
// Free unregisters and unmaps. Each call gives a fresh allocator.
std::shared_ptr<HostAllocator> PinnedHostAllocator(int device = 0);

// Page-locks memory the caller already owns (cudaHostRegister) for as long as the object lives, so that
// copies from it run at pinned speed. The memory must outlive the object.
class PinnedRegistration {
 public:
  // NotSupported without CUDA or a device; InvalidArgument for an empty span; IOError when the driver
  // refuses (e.g. the range is already registered).
  // The registration is made while `device` is current (portable: every device copies from it).
  static Result<std::unique_ptr<PinnedRegistration>> Register(std::span<std::byte> memory, int device = 0);
  ~PinnedRegistration();
  PinnedRegistration(const PinnedRegistration&) = delete;
  PinnedRegistration& operator=(const PinnedRegistration&) = delete;

 private:
  PinnedRegistration(void* ptr, int device) : ptr_(ptr), device_(device) {}
  void* ptr_;
  int device_;
};

// This process's page-locking of the host memory a Store's tiers lend chunks from (Tier::HostRegions: a
// shm:// pool's whole mapping). Each region is registered once per process, however many holders (the
// driver refuses a second registration of the same pages); the last holder unregisters it.
class HostMemoryPins {
 public:
  virtual ~HostMemoryPins() = default;
  virtual size_t regions() const = 0;  // regions this holder keeps registered
};

// Page-locks the regions `store`'s tiers offer, with `device` current, so that GpuTransfer loads copy
// chunks lent from them straight to the GPU (no staging copy). Hold the result while loading and destroy
// it before the Store. A Store whose tiers offer nothing gets a holder of no regions. NotSupported
// without CUDA or a device; the driver's refusal of a region as IOError (then nothing new stays
// registered).
Result<std::unique_ptr<HostMemoryPins>> PinStoreHostMemory(Store& store, int device = 0);

// The engine's paged KV cache: where its per-layer K and V tensors are. kvtier never frees them.
struct PagedKvCache {
  int device = 0;
  uint32_t num_blocks = 0;
  uint32_t block_tokens = 16;  // 16 to 256
  std::vector<void*> k;        // device pointers, one per layer
  std::vector<void*> v;
};

// Caller-described places of a request's chunks, for any cache layout the caller can describe (an MLA
// latent cache, FlashInfer's interleaved K/V blocks, head-major blocks, ...): chunk i's bytes, in chunk
// byte order, are the pieces [s_i, s_i + pieces_per_chunk[i]) of `pieces` (s_i: the sum of the counts
// before it), so a piece's offset in its chunk is the sum of the sizes before it in that chunk. A load
// copies the chunk's bytes into them, a save gathers them into the chunk. `groups`, when not empty, holds
// per piece the layer group it belongs to (< the transfer's layer_groups, non-decreasing within a chunk):
// a load's group g has landed once every piece of groups <= g has (a piece spanning two groups goes in the
// first: its event then fires later, never earlier). Empty: every piece is group 0, so any layer group's
// wait waits for the whole load. The addresses are device addresses (host addresses in tests of the plan).
struct DevicePiece {
  void* address = nullptr;
  uint64_t bytes = 0;
};
struct DevicePieces {
  std::span<const DevicePiece> pieces;       // every chunk's pieces, chunk 0's first
  std::span<const size_t> pieces_per_chunk;  // one entry per key
  std::span<const uint32_t> groups;          // empty, or one entry per piece
};

struct GpuTransferOptions {
  // Bytes of one staging buffer, rounded down to whole chunks and at least one chunk: the batch size of
  // loads and saves. There are host_threads + 1 pinned host buffers and one device buffer of this size.
  uint64_t staging_bytes = 256ull << 20;
  // Threads that read and verify batches on the host at once (1 to 64): a memory tier copies and checks
  // a chunk on one thread, so several batches in flight keep the GPU's copies fed.
  uint32_t host_threads = 4;
  // Layer groups of a load: group g covers layers [g*L/G, (g+1)*L/G) and has its own completion event.
  // 1: one event for the whole load. At most the layer count. With G > 1 a load reads a wave of up to
  // host_threads + 1 batches (one per staging slot) and queues it group by group, so group 0 lands
  // first; when the whole prefix fits in one wave, after 1/G of the GPU's copies.
  uint32_t layer_groups = 1;
};

// The GPU side of one Load: per layer group, whether its bytes have landed in the blocks. It holds the
// chunks the load copies in place from a tier until Wait() returns or it is destroyed (which waits):
// destroy it before the Store.
class GpuLoad {
 public:
  virtual ~GpuLoad() = default;
  // Leading chunks that were read, verified and queued for the GPU (fewer than asked on a miss or a
  // corrupt chunk; the rows of chunks past them are not touched).
  virtual size_t chunks() const = 0;
  virtual uint32_t layer_groups() const = 0;
  // Blocks the calling thread, without spinning, until the rows of layer group `group` are in the
  // blocks. InvalidArgument for a group out of range; Internal when the GPU reported an error.
  virtual Status WaitLayerGroup(uint32_t group) = 0;
  // Makes the engine's `stream` (a cudaStream_t) wait for layer group `group` without blocking the
  // host: kernels queued on it after this call see the rows (nullptr: the legacy default stream).
  // InvalidArgument when `stream` is being
  // captured into a CUDA graph.
  virtual Status StreamWaitLayerGroup(uint32_t group, void* stream) = 0;
  // true when every group has landed, false while some are in flight; never blocks. The GPU's error
  // (Internal) when a transfer failed, so a poller stops instead of waiting forever.
  virtual Result<bool> Done() = 0;
  // WaitLayerGroup of every group.
  virtual Status Wait() = 0;
};

class GpuTransfer {
 public:
  // Checks `cache` against `layout` (one K and one V pointer per layer, block_tokens 16..256,
  // num_blocks > 0) and allocates the staging buffers on cache.device. NotSupported without a GPU;
  // InvalidArgument for a bad cache, layout or options; NoSpace when memory cannot be had.
  static Result<std::unique_ptr<GpuTransfer>> Open(const Layout& layout, const PagedKvCache& cache,
                                                   const GpuTransferOptions& options = {});
  // A transfer without a cache of its own, for LoadPieces and SavePieces only (Load and Save with a
  // block table answer InvalidArgument): any layout, the classic one included. Staging on `device`.
  // NotSupported without a GPU; InvalidArgument for a bad layout or options; NoSpace as Open.
  static Result<std::unique_ptr<GpuTransfer>> OpenPieces(const Layout& layout, int device,
                                                         const GpuTransferOptions& options = {});
  // Waits for every transfer in flight, then frees the staging buffers.
  virtual ~GpuTransfer() = default;

  // Loads the leading cached chunks of `keys` (chunk i = tokens [i*T, (i+1)*T) of the request, T =
  // tokens_per_chunk) into the blocks of `block_table`. Returns once every batch has been read and
  // verified on the host and queued on the GPU; the GpuLoad says when its layers land. When
  // `after_stream` (a cudaStream_t) is given, no byte reaches the blocks before the work queued on it so
  // far has finished (kernels still reading or writing those blocks); nullptr is the legacy default
  // stream (handle 0: PyTorch's default stream), waited for like any other. ns.layout() must be the transfer's
  // layout. InvalidArgument when the block table is too short for the keys or names a block past
  // num_blocks, or `after_stream` is capturing; the Store's or the GPU's error otherwise (then nothing
  // this call queued is still in flight).
  virtual Result<std::unique_ptr<GpuLoad>> Load(Store& store, const Namespace& ns,
                                                std::span<const ChunkKey> keys,
                                                std::span<const uint32_t> block_table,
                                                void* after_stream = nullptr) = 0;

  // Gathers chunks 0..keys.size()-1 of the request from the blocks of `block_table` and saves them
  // (Store::Save: top tier now, lower tiers in the background). When `after_stream` (a cudaStream_t)
  // is given, the gather waits for the work queued on it so far (the prefill that wrote the blocks);
  // nullptr is the legacy default stream, as for Load. Returns once every chunk is in the top tier. InvalidArgument as for Load; the Store's or the GPU's
  // error (then nothing this call queued is still in flight).
  virtual Status Save(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                      std::span<const uint32_t> block_table, void* after_stream = nullptr) = 0;

  // Load and Save with caller-described places (DevicePieces) instead of the cache's block table: the
  // same staging, bulk copies and run kernel, the same guarantees and errors, on a transfer from Open or
  // OpenPieces. InvalidArgument, before anything is queued, unless `places` has one count per key, as
  // many pieces as the counts add up to, no piece of zero bytes or a null address, each chunk's sizes
  // adding up to the layout's chunk bytes, and groups empty or one per piece, each below layer_groups
  // and non-decreasing within its chunk. The first call with more pieces per chunk than any before
  // waits for the transfer's earlier GPU work (its run buffers grow).
  virtual Result<std::unique_ptr<GpuLoad>> LoadPieces(Store& store, const Namespace& ns,
                                                      std::span<const ChunkKey> keys, const DevicePieces& places,
                                                      void* after_stream = nullptr) = 0;
  virtual Status SavePieces(Store& store, const Namespace& ns, std::span<const ChunkKey> keys,
                            const DevicePieces& places, void* after_stream = nullptr) = 0;

  virtual const Layout& layout() const = 0;
  virtual uint32_t batch_chunks() const = 0;  // chunks per staging buffer
};

}  // namespace kvtier
