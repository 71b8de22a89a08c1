/* kvtier C API: the stable interface of libkvtier.so, for engines written in C, C++, Python (ctypes)
 * or anything else that can call C.
 *
 * Rules of this interface:
 * - Only C types cross it: opaque handles, fixed-width integers, plain structs, NUL-terminated strings.
 * - Every call that can fail returns a kvtier_status; KVTIER_OK is 0. The message of the last failed
 *   call is kept per thread: kvtier_last_error() returns it until the next failing call on that thread.
 *   Calls that return a count or a value instead return 0 on a bad argument and record why there.
 * - Pointer arguments are checked: NULL where one is needed is KVTIER_INVALID_ARGUMENT, never a crash.
 *   No C++ exception leaves the library (out of memory is KVTIER_NO_SPACE).
 * - Handles are thread-safe unless a function says otherwise: many threads may use one store at once.
 * - kvtier never keeps a pointer to a caller's array after a call returns, except the data buffers of an
 *   asynchronous operation, which must stay valid until the operation completes (kvtier_op_wait,
 *   kvtier_op_done or the notify descriptor say so).
 * - Bytes loaded are verified before the call reports them loaded; a chunk that fails verification is
 *   never reported loaded, and its destination is zeroed.
 * - Version: kvtier_abi_version() changes only when a struct or signature here changes incompatibly;
 *   callers check it at load time.
 *
 * Typical use:
 *   kvtier_store_options o; kvtier_store_options_init(&o);
 *   const char* tiers[] = {"mem://?capacity=4GiB", "file:///var/lib/kvtier?capacity=200GiB"};
 *   o.tiers = tiers; o.tier_count = 2;
 *   kvtier_store* s; if (kvtier_store_open(&o, &s) != KVTIER_OK) puts(kvtier_last_error());
 *   kvtier_layout l = {32, 8, 128, KVTIER_DTYPE_BF16, 256};
 *   kvtier_ns* ns; kvtier_ns_create("meta-llama/Llama-3.1-8B", &l, "tenant-a", "", &ns);
 *   size_t n = kvtier_chunk_keys(ns, tokens, n_tokens, keys, max_keys);
 *   size_t hit = kvtier_lookup(s, ns, keys, n);
 *   kvtier_load(s, ns, keys, hit, bufs, NULL, &loaded);
 */
#ifndef KVTIER_KVTIER_H_
#define KVTIER_KVTIER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KVTIER_API __attribute__((visibility("default")))
#else
#define KVTIER_API
#endif

/* ---- Version and errors ------------------------------------------------------------------------- */

#define KVTIER_ABI_VERSION 1u

/* Same values as kvtier::Code. */
typedef enum kvtier_status {
  KVTIER_OK = 0,
  KVTIER_NOT_FOUND = 1,        /* a miss */
  KVTIER_CORRUPTION = 2,       /* stored bytes failed verification (and were removed) */
  KVTIER_INVALID_ARGUMENT = 3, /* the caller's input is malformed */
  KVTIER_IO_ERROR = 4,         /* the storage refused an operation */
  KVTIER_NO_SPACE = 5,         /* the storage or a budget is full */
  KVTIER_BUSY = 6,             /* a bounded resource is saturated, or a wait timed out: try later */
  KVTIER_NOT_SUPPORTED = 7,
  KVTIER_VERSION_MISMATCH = 8,
  KVTIER_INTERNAL = 9
} kvtier_status;

KVTIER_API const char* kvtier_version(void);     /* e.g. "0.3.0" */
KVTIER_API uint32_t kvtier_abi_version(void);    /* KVTIER_ABI_VERSION of the library */
KVTIER_API const char* kvtier_status_name(int status); /* "OK", "NotFound", ...; "Unknown" otherwise */
/* Message of the last failed call on this thread ("" if none). Valid until the next call on it. */
KVTIER_API const char* kvtier_last_error(void);

/* ---- Namespaces and keys ------------------------------------------------------------------------ */

typedef enum kvtier_dtype {
  KVTIER_DTYPE_FP32 = 0,
  KVTIER_DTYPE_FP16 = 1,
  KVTIER_DTYPE_BF16 = 2,
  KVTIER_DTYPE_FP8 = 3
} kvtier_dtype;

/* KV geometry of one model in the classic form (one K/V group over every layer): a chunk holds
 * 2 x layers x kv_heads x head_dim x dtype size x tokens_per_chunk bytes. Every other model family
 * (MLA latents, sliding-window layers, per-sequence states, mixed groups) is described by a layout
 * spec: kvtier_ns_create_spec below and kvtier/layout.h. */
typedef struct kvtier_layout {
  uint32_t layers;
  uint32_t kv_heads;
  uint32_t head_dim;
  uint32_t dtype; /* kvtier_dtype */
  uint32_t tokens_per_chunk;
} kvtier_layout;

#define KVTIER_KEY_BYTES 32
/* A chunk key: names a whole prefix (see kvtier/keys.h), or any 32-byte digest an engine supplies
 * (e.g. SHA-256 of its own block hash), as long as one key always names the same bytes. */
typedef struct kvtier_key {
  uint8_t bytes[KVTIER_KEY_BYTES];
} kvtier_key;

typedef struct kvtier_ns kvtier_ns; /* immutable once created; free with kvtier_ns_free */

/* model_id must be non-empty; tenant and salt may be NULL or "". */
KVTIER_API kvtier_status kvtier_ns_create(const char* model_id, const kvtier_layout* layout,
                                          const char* tenant, const char* salt, kvtier_ns** out);
/* The same with explicit lengths (the strings need no NUL terminator): the namespace's identity depends
 * on every byte, so a string holding a NUL is InvalidArgument here and in kvtier_ns_create. A pointer
 * may be NULL when its length is 0. */
KVTIER_API kvtier_status kvtier_ns_create_n(const char* model_id, size_t model_id_len,
                                            const kvtier_layout* layout, const char* tenant,
                                            size_t tenant_len, const char* salt, size_t salt_len,
                                            kvtier_ns** out);
KVTIER_API void kvtier_ns_free(kvtier_ns* ns); /* NULL is allowed */
/* The three below: 0 (all-zero id) for a NULL namespace. */
KVTIER_API uint64_t kvtier_ns_chunk_bytes(const kvtier_ns* ns);
KVTIER_API uint32_t kvtier_ns_tokens_per_chunk(const kvtier_ns* ns);
KVTIER_API void kvtier_ns_id(const kvtier_ns* ns, uint8_t out[KVTIER_KEY_BYTES]);

/* Keys of every full chunk of `tokens` (n_tokens / tokens_per_chunk of them). Writes at most `cap` keys
 * into `out` and returns how many the tokens have (call with cap 0 to size the array). */
KVTIER_API size_t kvtier_chunk_keys(const kvtier_ns* ns, const uint32_t* tokens, size_t n_tokens,
                                    kvtier_key* out, size_t cap);
/* Key of the chunk after `prev` (NULL for the first) holding `tokens`; InvalidArgument unless
 * n_tokens == tokens_per_chunk. */
KVTIER_API kvtier_status kvtier_next_chunk_key(const kvtier_ns* ns, const kvtier_key* prev,
                                               const uint32_t* tokens, size_t n_tokens,
                                               kvtier_key* out);

/* ---- Store -------------------------------------------------------------------------------------- */

typedef struct kvtier_store_options {
  uint32_t struct_size;      /* sizeof(kvtier_store_options); set by kvtier_store_options_init; any
                                other value is InvalidArgument */
  const char* const* tiers;  /* tier URLs, fastest first (see kvtier/tier.h) */
  size_t tier_count;
  int promote_on_load;       /* default 1 */
  int admit_on_second_use;   /* default 0: every saved chunk goes to the lower tiers */
  uint64_t save_queue_bytes; /* default 1 GiB */
  uint32_t save_queue_chunks;  /* default 4096 */
  uint32_t background_threads; /* default 8: writes to the lower tiers */
  uint32_t async_threads;      /* default 4, at least 1: run kvtier_*_async operations */
  const char* key_file;        /* NULL: no encryption; else an absolute path (docs/encryption.md) */
  /* Chunk events (docs/serve.md): NULL, or a ZeroMQ endpoint the store binds and publishes its stored,
   * removed and evicted chunks on ("tcp://127.0.0.1:5557"; routers connect), msgpack in the shape of
   * vLLM's KV event batches. The two fields were added after the others: a struct_size
   * that ends at key_file is still accepted and means no events. Refused (INVALID_ARGUMENT): a tcp://
   * host other than loopback (the socket has no authentication), a port outside 0..65535, an ipc:// path
   * that exists and is not a dead socket of this user (it would be removed). */
  const char* events;
  const char* events_topic;    /* NULL: "kvtier"; the first frame of every event message */
} kvtier_store_options;

typedef struct kvtier_store kvtier_store;

KVTIER_API void kvtier_store_options_init(kvtier_store_options* options);
KVTIER_API kvtier_status kvtier_store_open(const kvtier_store_options* options, kvtier_store** out);
/* Runs every queued asynchronous operation to its end, waits for running ones and the background write
 * queue, then frees the store. Operations not yet freed stay valid (they report their result); NULL is
 * allowed. No call may use the store while or after it is closed. */
KVTIER_API void kvtier_store_close(kvtier_store* store);
/* Waits for every queued background write, then flushes every tier. */
KVTIER_API kvtier_status kvtier_store_flush(kvtier_store* store);

/* One caller buffer. */
typedef struct kvtier_buf {
  void* data;
  size_t size;
} kvtier_buf;

/* Chunk buffers: chunk i is `pieces_per_chunk[i]` consecutive entries of `pieces`, filled or read in
 * order, whose sizes add up to the chunk size. `pieces_per_chunk` NULL means one piece per chunk. */

/* Number of leading keys present in some tier (a later load may still return fewer). */
KVTIER_API size_t kvtier_lookup(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys,
                                size_t n_keys);
/* Loads chunks 0..n_keys-1, verified, into the buffers; *loaded is set to how many leading chunks were
 * loaded (a miss or a corrupt chunk ends the prefix; later destinations read are zeroed).
 * InvalidArgument on a wrong buffer size, a NULL piece with a non-zero size, or a NULL `loaded`. */
KVTIER_API kvtier_status kvtier_load(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys,
                                     size_t n_keys, const kvtier_buf* pieces,
                                     const size_t* pieces_per_chunk, size_t* loaded);
/* Copies each chunk into the memory tiers and returns; the other tiers (a file:// or fs:// top tier
 * too) are written in the background: kvtier_store_flush waits for them. */
KVTIER_API kvtier_status kvtier_save(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys,
                                     size_t n_keys, const kvtier_buf* pieces,
                                     const size_t* pieces_per_chunk);
/* Promotes the leading available chunks into the top tier in the background. */
KVTIER_API void kvtier_prefetch(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys,
                                size_t n_keys);

/* ---- Asynchronous operations -------------------------------------------------------------------- */

typedef struct kvtier_op kvtier_op;

/* Start a load or save on the store's async threads and return at once. The key and piece arrays are
 * copied; the data buffers must stay valid until the operation is done. When notify_fd >= 0 (e.g. an
 * eventfd) kvtier writes the 8-byte value 1 to it once the operation is done: kvtier_op_done already
 * reports 1 then, and kvtier_op_wait / kvtier_op_free return only after the write, so the descriptor may
 * be closed once they have. EAGAIN is ignored (a full eventfd counter is still readable); a blocking
 * descriptor that cannot take the write holds up that async thread until it can. A bad argument is
 * reported here, synchronously, and *out is NULL. */
KVTIER_API kvtier_status kvtier_load_async(kvtier_store* store, const kvtier_ns* ns,
                                           const kvtier_key* keys, size_t n_keys,
                                           const kvtier_buf* pieces, const size_t* pieces_per_chunk,
                                           int notify_fd, kvtier_op** out);
KVTIER_API kvtier_status kvtier_save_async(kvtier_store* store, const kvtier_ns* ns,
                                           const kvtier_key* keys, size_t n_keys,
                                           const kvtier_buf* pieces, const size_t* pieces_per_chunk,
                                           int notify_fd, kvtier_op** out);
/* 1 when done, 0 otherwise; never blocks. */
KVTIER_API int kvtier_op_done(const kvtier_op* op);
/* Blocks until done or `timeout_ms` passed (negative: no limit; 0: only looks). KVTIER_BUSY on timeout;
 * otherwise the operation's status (its message through kvtier_op_error, and kvtier_last_error). Any
 * number of threads may wait on one operation. */
KVTIER_API kvtier_status kvtier_op_wait(kvtier_op* op, int64_t timeout_ms);
/* Of a load, while it runs: blocks until the first `bytes` bytes of every chunk of the operation are
 * verified and in the caller's buffers (a chunk's first layers: a chunk holds layer 0 K, layer 0 V,
 * layer 1 K, ...), until the operation is done, or until `timeout_ms` passed (negative: no limit; 0: only
 * looks; KVTIER_BUSY on timeout). Sets *ready to the number of leading chunks whose first `bytes` bytes
 * are verified and in place (`bytes` above the chunk size counts as the whole chunk); once the operation
 * is done, only chunks it loaded count. Bytes are reported as the tier verifies them (file://, fs://:
 * per piece of the chunk format; mem://: per copied slice; other tiers: whole chunks). A chunk that
 * fails after some of its bytes were reported is zeroed and not loaded (kvtier_op_count, the operation's
 * status): an engine that used those bytes recomputes the chunk. KVTIER_INVALID_ARGUMENT for a save or a
 * NULL argument. Any number of threads may wait. */
KVTIER_API kvtier_status kvtier_op_wait_bytes(kvtier_op* op, uint64_t bytes, int64_t timeout_ms,
                                              size_t* ready);
/* Of a finished operation: chunks loaded (loads) or saved (saves); 0 while running. */
KVTIER_API size_t kvtier_op_count(const kvtier_op* op);
/* Message of a failed operation; "" while running or on success. Valid until kvtier_op_free. */
KVTIER_API const char* kvtier_op_error(const kvtier_op* op);
/* Waits for the operation if it is still running, then frees it; NULL is allowed. */
KVTIER_API void kvtier_op_free(kvtier_op* op);

/* ---- Observability ------------------------------------------------------------------------------ */

/* Copies a NUL-terminated text into buf (at most cap bytes, always terminated when cap > 0) and returns
 * the length of the whole text, without the NUL: call again with a larger buffer when it is >= cap. */
/* The store's counters and latency histograms in the Prometheus text exposition format (kvtier_*, the
 * list in docs/metrics.md): what kvtier::PrometheusText (kvtier/metrics.h) renders. */
KVTIER_API size_t kvtier_store_metrics_text(kvtier_store* store, char* buf, size_t cap);
/* The store's statistics as one JSON object (the fields of kvtier::StoreStats). */
KVTIER_API size_t kvtier_store_stats_json(kvtier_store* store, char* buf, size_t cap);

/* ---- GPU path (kvtier/gpu.h) --------------------------------------------------------------------- */

/* KVTIER_OK when this library was built with CUDA and `device` is usable; KVTIER_NOT_SUPPORTED with the
 * reason in kvtier_last_error() otherwise (built without CUDA, no driver, no such device). */
KVTIER_API kvtier_status kvtier_gpu_available(int device);

/* An engine's paged KV cache in GPU memory, vLLM's layout: per layer one K and one V tensor, each
 * [num_blocks][block_tokens][kv_heads][head_dim] of the namespace's dtype, contiguous. The pointer
 * arrays are copied; the tensors must outlive the kvtier_gpu. */
typedef struct kvtier_gpu_cache {
  int32_t device;
  uint32_t num_blocks;
  uint32_t block_tokens; /* 16 to 256 */
  uint32_t layers;       /* entries of k and v: the namespace's layer count */
  void* const* k;        /* device pointers */
  void* const* v;
} kvtier_gpu_cache;

/* A transfer engine for one cache and one layout: pinned and device staging, a stream, events. One
 * thread at a time per handle. */
typedef struct kvtier_gpu kvtier_gpu;

/* staging_bytes: one staging buffer, the batch size (0: 256 MiB); layer_groups: completion events per
 * load (0 or 1: one; at most the layer count); host_threads: batches read and verified at once (0: 4;
 * at most 64). NOT_SUPPORTED without a GPU; INVALID_ARGUMENT for a bad cache. */
KVTIER_API kvtier_status kvtier_gpu_open(const kvtier_ns* ns, const kvtier_gpu_cache* cache,
                                         uint64_t staging_bytes, uint32_t layer_groups,
                                         uint32_t host_threads, kvtier_gpu** out);
/* Waits for every transfer in flight, then frees the handle; NULL is allowed. */
KVTIER_API void kvtier_gpu_close(kvtier_gpu* gpu);
/* Loads the leading cached chunks of `keys` (chunk i = tokens [i*T, (i+1)*T) of the request) into the
 * blocks of `block_table` (token t in block block_table[t / block_tokens], row t % block_tokens).
 * Returns once every chunk has been read and verified on the host and queued on the GPU; *loaded is the
 * verified prefix. `after_stream` (a cudaStream_t): no byte reaches the blocks before the work queued on
 * it so far has finished (attention still reading them); NULL is the legacy default stream (handle 0,
 * PyTorch's default stream), waited for like any other. Wait with kvtier_gpu_wait / _wait_layers /
 * _stream_wait_layers (a load that succeeds replaces the previous one there; one that fails leaves the
 * previous one, so the waits of a step survive one failed load).
 * INVALID_ARGUMENT when the table is too short or names a block past num_blocks, or the stream is being
 * captured into a CUDA graph. On any error nothing the call queued is still in flight. */
KVTIER_API kvtier_status kvtier_gpu_load_after(kvtier_gpu* gpu, kvtier_store* store, const kvtier_ns* ns,
                                               const kvtier_key* keys, size_t n_keys,
                                               const uint32_t* block_table, size_t n_blocks,
                                               void* after_stream, size_t* loaded);
/* kvtier_gpu_load_after with after_stream NULL (the signature of earlier releases, kept unchanged). */
KVTIER_API kvtier_status kvtier_gpu_load(kvtier_gpu* gpu, kvtier_store* store, const kvtier_ns* ns,
                                         const kvtier_key* keys, size_t n_keys, const uint32_t* block_table,
                                         size_t n_blocks, size_t* loaded);
/* Of the last load: blocks (without spinning) until layer group `group` has landed; until all have. */
KVTIER_API kvtier_status kvtier_gpu_wait_layers(kvtier_gpu* gpu, uint32_t group);
KVTIER_API kvtier_status kvtier_gpu_wait(kvtier_gpu* gpu);
/* Of the last load: makes `stream` (a cudaStream_t, e.g. torch.cuda.current_stream().cuda_stream; NULL
 * is the legacy default stream) wait for layer group `group` without blocking the host
 * (INVALID_ARGUMENT while it is capturing). */
KVTIER_API kvtier_status kvtier_gpu_stream_wait_layers(kvtier_gpu* gpu, uint32_t group, void* stream);
/* Gathers chunks 0..n_keys-1 of the request from the blocks of `block_table` and saves them (top tier
 * before it returns, lower tiers in the background). `after_stream` (a cudaStream_t): the gather waits
 * for the work queued on it so far; NULL is the legacy default stream, waited for like any other. INVALID_ARGUMENT while the stream is being captured into a CUDA graph;
 * on any error nothing the call queued is still in flight. */
KVTIER_API kvtier_status kvtier_gpu_save(kvtier_gpu* gpu, kvtier_store* store, const kvtier_ns* ns,
                                         const kvtier_key* keys, size_t n_keys, const uint32_t* block_table,
                                         size_t n_blocks, void* after_stream);

/* Caller-described places (kvtier::DevicePieces in kvtier/gpu.h), for any cache layout the caller can
 * describe (MLA latents, FlashInfer's interleaved K/V blocks, head-major blocks, ...). A handle for them
 * alone, with no block-table cache (kvtier_gpu_load/_save on it are INVALID_ARGUMENT): the options are
 * kvtier_gpu_open's. */
KVTIER_API kvtier_status kvtier_gpu_open_pieces(const kvtier_ns* ns, int32_t device, uint64_t staging_bytes,
                                                uint32_t layer_groups, uint32_t host_threads, kvtier_gpu** out);
/* Chunk i's bytes, in chunk byte order, are the `pieces_per_chunk[i]` consecutive entries of `pieces`
 * (device addresses) after those of the chunks before it; `n_pieces` entries in all. `piece_groups`: NULL
 * (every piece in layer group 0: any group's wait waits for the whole load) or one layer group per piece,
 * below the handle's layer_groups and non-decreasing within a chunk (a piece spanning two groups goes in
 * the first). INVALID_ARGUMENT, before anything is queued, when the counts do not add up to n_pieces, a
 * piece has 0 bytes or a NULL address, a chunk's sizes do not add up to the chunk size, or a group is out
 * of range or decreases. Otherwise as kvtier_gpu_load_after (wait with kvtier_gpu_wait / _wait_layers /
 * _stream_wait_layers) and kvtier_gpu_save. */
KVTIER_API kvtier_status kvtier_gpu_load_pieces(kvtier_gpu* gpu, kvtier_store* store, const kvtier_ns* ns,
                                                const kvtier_key* keys, size_t n_keys, const kvtier_buf* pieces,
                                                size_t n_pieces, const size_t* pieces_per_chunk,
                                                const uint32_t* piece_groups, void* after_stream, size_t* loaded);
KVTIER_API kvtier_status kvtier_gpu_save_pieces(kvtier_gpu* gpu, kvtier_store* store, const kvtier_ns* ns,
                                                const kvtier_key* keys, size_t n_keys, const kvtier_buf* pieces,
                                                size_t n_pieces, const size_t* pieces_per_chunk,
                                                const uint32_t* piece_groups, void* after_stream);

/* This process's page-locking of the host memory the store's tiers lend chunks from (a shm:// pool's
 * whole mapping; kvtier::PinStoreHostMemory): with it held, kvtier_gpu loads copy chunks of that pool
 * straight to the GPU, without a staging copy. Each region is registered once per process however many
 * holders there are. *out gets a holder (free it before the store); *regions (may be NULL) the regions it
 * keeps registered, 0 when no tier offers any. NOT_SUPPORTED without CUDA or a device; IO_ERROR when the
 * driver refuses a region (then nothing new stays registered). */
typedef struct kvtier_host_pins kvtier_host_pins;
KVTIER_API kvtier_status kvtier_store_pin_host_memory(kvtier_store* store, int device, kvtier_host_pins** out,
                                                      size_t* regions);
/* Gives the holder's registrations back (the last holder of a region unregisters it); NULL is allowed. */
KVTIER_API void kvtier_host_pins_free(kvtier_host_pins* pins);

/* ---- engine identities (kvtier/engine_identity.h) ----
 * `identity` is the canonical encoding of an engine identity: the line "kvtier-engine-identity-v1", then
 * one "name=value" line per field sorted by name (names 1..64 of [a-z0-9_], values without control
 * characters, each line ending in '\n'; "engine" and "model" required). Anything else is INVALID_ARGUMENT.
 * The namespace's id is hashed in a domain of its own (MakeNamespace, kvtier/engine_identity.h): two
 * identities that differ in any field never share a chunk, and no kvtier_ns_create salt gives the same id. A store keeps the identity beside the namespace's chunks on
 * its first save (file://, fs://), for `kvtier inspect`. tenant may be NULL or "". */
KVTIER_API kvtier_status kvtier_ns_create_identity(const char* identity, const kvtier_layout* layout,
                                                   const char* tenant, kvtier_ns** out);
/* Copies the namespace's identity encoding (NUL-terminated) into out[0..cap) and returns its length
 * without the NUL; 0 for a namespace made without one (or NULL). Call with cap 0 to learn the size. */
KVTIER_API size_t kvtier_ns_identity(const kvtier_ns* ns, char* out, size_t cap);

/* ---- layouts of every model family (kvtier/layout.h, docs/models.md) ----
 * A layout spec is the one-line text of a layout, e.g.
 *   "layers=61 tokens=256 latent:layers=0-60,dim=576,dtype=bf16"
 *   "layers=32 tokens=256 classic:heads=8,dim=128,dtype=bf16"   (the same as a kvtier_layout)
 * The namespaces below are those of kvtier_ns_create and kvtier_ns_create_identity with that layout;
 * InvalidArgument for a spec that does not parse or validate. */
KVTIER_API kvtier_status kvtier_ns_create_spec(const char* model_id, const char* layout_spec,
                                               const char* tenant, const char* salt, kvtier_ns** out);
KVTIER_API kvtier_status kvtier_ns_create_identity_spec(const char* identity, const char* layout_spec,
                                                        const char* tenant, kvtier_ns** out);
/* Copies the namespace's layout spec (NUL-terminated) into out[0..cap) and returns its length; 0 and
 * "" for a NULL namespace. Call with cap 0 to size the buffer. */
KVTIER_API size_t kvtier_ns_layout_spec(const kvtier_ns* ns, char* out, size_t cap);
/* The same for the model preset `name` (`kvtier models`); 0 and "" for an unknown name. */
KVTIER_API size_t kvtier_preset_layout_spec(const char* name, char* out, size_t cap);

/* Removes the chunks of `keys` from every tier of the store (an engine's eviction of objects it wrote);
 * a key no tier holds is not an error. A background write of one of them that is still queued is dropped
 * and a running one is waited for, so a lookup after the call misses them (Store::Remove). Returns the
 * first tier failure (a read-only tier refuses). */
KVTIER_API kvtier_status kvtier_remove(kvtier_store* store, const kvtier_ns* ns, const kvtier_key* keys,
                                       size_t n_keys);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVTIER_KVTIER_H_ */
