/* The C API (include/kvtier/kvtier.h) tested from C11, against libkvtier.so: versions, argument checks,
 * namespaces and keys, byte-exact save/lookup/load on mem:// and file://, scattered pieces, misses,
 * corruption, asynchronous operations with an eventfd, timeouts, closing with operations in flight and
 * the statistics JSON. Every check that fails prints where and why, and the test exits 1. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kvtier/kvtier.h"

static _Atomic unsigned long g_checks = 0; /* CHECK runs on worker threads too */

#define CHECK(cond)                                                                               \
  do {                                                                                            \
    ++g_checks;                                                                                   \
    if (!(cond)) {                                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n  last error: \"%s\"\n", __FILE__, __LINE__, #cond, \
              kvtier_last_error());                                                               \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

/* `expr` must return `want`; a failure must also leave a last error naming `fn`. */
#define CHECK_STATUS(expr, want)                                                                 \
  do {                                                                                           \
    int got_ = (int)(expr);                                                                      \
    ++g_checks;                                                                                  \
    if (got_ != (int)(want)) {                                                                   \
      fprintf(stderr, "%s:%d: %s returned %s, want %s\n  last error: \"%s\"\n", __FILE__, __LINE__, \
              #expr, kvtier_status_name(got_), kvtier_status_name((int)(want)),                  \
              kvtier_last_error());                                                              \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

#define CHECK_ERROR_NAMES(fn) CHECK(strstr(kvtier_last_error(), (fn)) != NULL)

/* 2 (K, V) x 2 layers x 2 heads x 8 dims x 2 bytes (fp16) x 4 tokens = 512 bytes per chunk. */
#define CHUNK 512u
#define TOKENS_PER_CHUNK 4u
static const kvtier_layout kLayout = {2, 2, 8, KVTIER_DTYPE_FP16, TOKENS_PER_CHUNK};

static kvtier_ns* MakeNs(const char* tenant) {
  kvtier_ns* ns = NULL;
  CHECK_STATUS(kvtier_ns_create("test/model", &kLayout, tenant, NULL, &ns), KVTIER_OK);
  CHECK(ns != NULL);
  return ns;
}

static kvtier_store* OpenStore(const char* url, uint32_t async_threads) {
  kvtier_store_options o;
  kvtier_store_options_init(&o);
  const char* tiers[1] = {url};
  o.tiers = tiers;
  o.tier_count = 1;
  o.async_threads = async_threads;
  kvtier_store* s = NULL;
  CHECK_STATUS(kvtier_store_open(&o, &s), KVTIER_OK);
  CHECK(s != NULL);
  return s;
}

/* Keys of n chunks whose tokens start at `first`. */
static void Keys(const kvtier_ns* ns, uint32_t first, size_t n, kvtier_key* out) {
  uint32_t tokens[64 * TOKENS_PER_CHUNK];
  CHECK(n <= 64);
  for (size_t i = 0; i < n * TOKENS_PER_CHUNK; ++i) tokens[i] = first + (uint32_t)i;
  CHECK(kvtier_chunk_keys(ns, tokens, n * TOKENS_PER_CHUNK, out, n) == n);
}

/* The bytes of chunk `i` of a test: a pattern that differs per chunk and per seed. */
static void Fill(uint8_t* p, size_t i, unsigned seed) {
  for (size_t b = 0; b < CHUNK; ++b) p[b] = (uint8_t)(b * 7u + i * 31u + seed * 13u + 1u);
}

static int AllBytes(const uint8_t* p, size_t n, uint8_t v) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != v) return 0;
  }
  return 1;
}

/* ---- Versions and argument checks ---------------------------------------------------------------- */

static void TestVersion(void) {
  CHECK(kvtier_abi_version() == KVTIER_ABI_VERSION);
  const char* v = kvtier_version();
  CHECK(v != NULL && v[0] >= '0' && v[0] <= '9' && strchr(v, '.') != NULL);
  CHECK(strcmp(kvtier_status_name(KVTIER_OK), "OK") == 0);
  CHECK(strcmp(kvtier_status_name(KVTIER_CORRUPTION), "Corruption") == 0);
  CHECK(strcmp(kvtier_status_name(KVTIER_BUSY), "Busy") == 0);
  CHECK(strcmp(kvtier_status_name(KVTIER_INTERNAL), "Internal") == 0);
  CHECK(strcmp(kvtier_status_name(10), "Unknown") == 0);
  CHECK(strcmp(kvtier_status_name(-1), "Unknown") == 0);
}

/* Issue 23: layout sizes never overflow; identity strings are taken whole (with lengths), NUL refused. */
static void TestLayoutOverflowAndLengthTakingNamespaces(void) {
  kvtier_ns* ns = NULL;
  kvtier_layout wraps = {1u << 31, 1u << 31, 128, KVTIER_DTYPE_BF16, 256}; /* 2^71 bytes: wraps to 0 */
  CHECK_STATUS(kvtier_ns_create("m", &wraps, NULL, NULL, &ns), KVTIER_INVALID_ARGUMENT);
  CHECK(ns == NULL);
  CHECK_STATUS(kvtier_ns_create_n("m", 1, &wraps, NULL, 0, NULL, 0, &ns), KVTIER_INVALID_ARGUMENT);
  kvtier_ns* a = NULL;
  kvtier_ns* b = NULL;
  CHECK_STATUS(kvtier_ns_create_n("t\0x", 3, &kLayout, NULL, 0, NULL, 0, &a), KVTIER_INVALID_ARGUMENT);
  CHECK_STATUS(kvtier_ns_create_n("m", 1, &kLayout, "t\0x", 3, NULL, 0, &a), KVTIER_INVALID_ARGUMENT);
  CHECK_STATUS(kvtier_ns_create_n("m", 1, &kLayout, NULL, 0, "s\0y", 4, &a), KVTIER_INVALID_ARGUMENT);
  CHECK(a == NULL);
  /* Without a terminator: the same namespace as the NUL-terminated call with the same bytes. */
  const char model[] = {'m', 'o', 'd'};
  CHECK_STATUS(kvtier_ns_create_n(model, sizeof(model), &kLayout, "ten", 3, NULL, 0, &a), KVTIER_OK);
  CHECK_STATUS(kvtier_ns_create("mod", &kLayout, "ten", NULL, &b), KVTIER_OK);
  uint8_t ida[KVTIER_KEY_BYTES], idb[KVTIER_KEY_BYTES];
  kvtier_ns_id(a, ida);
  kvtier_ns_id(b, idb);
  CHECK(memcmp(ida, idb, sizeof(ida)) == 0);
  kvtier_ns_free(a);
  kvtier_ns_free(b);
  CHECK_STATUS(kvtier_ns_create_n(NULL, 1, &kLayout, NULL, 0, NULL, 0, &a), KVTIER_INVALID_ARGUMENT);
}

static void TestBadNamespaceArguments(void) {
  kvtier_ns* ns = (kvtier_ns*)&ns; /* must be reset to NULL on failure */
  CHECK_STATUS(kvtier_ns_create(NULL, &kLayout, NULL, NULL, &ns), KVTIER_INVALID_ARGUMENT);
  CHECK(ns == NULL);
  CHECK_ERROR_NAMES("model_id");
  CHECK_STATUS(kvtier_ns_create("m", NULL, NULL, NULL, &ns), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("layout");
  CHECK_STATUS(kvtier_ns_create("m", &kLayout, NULL, NULL, NULL), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("out");
  CHECK_STATUS(kvtier_ns_create("", &kLayout, NULL, NULL, &ns), KVTIER_INVALID_ARGUMENT);
  kvtier_layout bad = kLayout;
  bad.dtype = 9;
  CHECK_STATUS(kvtier_ns_create("m", &bad, NULL, NULL, &ns), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("dtype");
  bad = kLayout;
  bad.layers = 0;
  CHECK_STATUS(kvtier_ns_create("m", &bad, NULL, NULL, &ns), KVTIER_INVALID_ARGUMENT);
  CHECK(ns == NULL);

  uint32_t tokens[8] = {0};
  kvtier_key key;
  CHECK(kvtier_chunk_keys(NULL, tokens, 8, &key, 1) == 0);
  CHECK_ERROR_NAMES("kvtier_chunk_keys");
  CHECK(kvtier_ns_chunk_bytes(NULL) == 0);
  CHECK_ERROR_NAMES("kvtier_ns_chunk_bytes");
  CHECK(kvtier_ns_tokens_per_chunk(NULL) == 0);
  CHECK_ERROR_NAMES("kvtier_ns_tokens_per_chunk");
  uint8_t id[KVTIER_KEY_BYTES];
  memset(id, 0xAB, sizeof(id));
  kvtier_ns_id(NULL, id);
  CHECK(AllBytes(id, sizeof(id), 0));
  CHECK_ERROR_NAMES("kvtier_ns_id");

  ns = MakeNs("t");
  CHECK(kvtier_chunk_keys(ns, NULL, 8, &key, 1) == 0);
  CHECK_ERROR_NAMES("tokens");
  CHECK(kvtier_chunk_keys(ns, tokens, 8, NULL, 1) == 0);
  CHECK_ERROR_NAMES("out");
  CHECK_STATUS(kvtier_next_chunk_key(ns, NULL, tokens, 3, &key), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("kvtier_next_chunk_key");
  CHECK_STATUS(kvtier_next_chunk_key(ns, NULL, NULL, 4, &key), KVTIER_INVALID_ARGUMENT);
  CHECK_STATUS(kvtier_next_chunk_key(NULL, NULL, tokens, 4, &key), KVTIER_INVALID_ARGUMENT);
  CHECK_STATUS(kvtier_next_chunk_key(ns, NULL, tokens, 4, NULL), KVTIER_INVALID_ARGUMENT);
  kvtier_ns_free(ns);
  kvtier_ns_free(NULL);
}

static void TestBadStoreOptions(void) {
  kvtier_store* s = NULL;
  kvtier_store_options o;
  kvtier_store_options_init(&o);
  CHECK(o.struct_size == sizeof(o) && o.promote_on_load == 1 && o.async_threads == 4);
  CHECK(o.background_threads >= 1 && o.save_queue_bytes > 0 && o.tiers == NULL && o.key_file == NULL);
  CHECK_STATUS(kvtier_store_open(NULL, &s), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("options");
  CHECK_STATUS(kvtier_store_open(&o, NULL), KVTIER_INVALID_ARGUMENT);
  CHECK_STATUS(kvtier_store_open(&o, &s), KVTIER_INVALID_ARGUMENT); /* no tier */
  o.tier_count = 1;
  CHECK_STATUS(kvtier_store_open(&o, &s), KVTIER_INVALID_ARGUMENT); /* tiers NULL */
  CHECK_ERROR_NAMES("options.tiers");
  const char* null_tier[1] = {NULL};
  o.tiers = null_tier;
  CHECK_STATUS(kvtier_store_open(&o, &s), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("tiers[0]");
  const char* bad_url[1] = {"no-such-scheme://x"};
  o.tiers = bad_url;
  CHECK_STATUS(kvtier_store_open(&o, &s), KVTIER_INVALID_ARGUMENT);
  const char* mem[1] = {"mem://?capacity=1MiB"};
  o.tiers = mem;
  o.async_threads = 0;
  CHECK_STATUS(kvtier_store_open(&o, &s), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("async_threads");
  o.async_threads = 1;
  o.struct_size = 8;
  CHECK_STATUS(kvtier_store_open(&o, &s), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("struct_size");
  CHECK(s == NULL);
  kvtier_store_close(NULL);
  CHECK_STATUS(kvtier_store_flush(NULL), KVTIER_INVALID_ARGUMENT);
}

static void TestBadBufferArguments(void) {
  kvtier_store* s = OpenStore("mem://?capacity=1MiB", 1);
  kvtier_ns* ns = MakeNs("t");
  kvtier_key keys[2];
  Keys(ns, 0, 2, keys);
  static uint8_t a[CHUNK], b[CHUNK];
  kvtier_buf bufs[2] = {{a, CHUNK}, {b, CHUNK}};
  size_t loaded = 99;

  CHECK_STATUS(kvtier_load(NULL, ns, keys, 1, bufs, NULL, &loaded), KVTIER_INVALID_ARGUMENT);
  CHECK(loaded == 0);
  CHECK_ERROR_NAMES("store");
  CHECK_STATUS(kvtier_load(s, NULL, keys, 1, bufs, NULL, &loaded), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("ns");
  CHECK_STATUS(kvtier_load(s, ns, NULL, 1, bufs, NULL, &loaded), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("keys");
  CHECK_STATUS(kvtier_load(s, ns, keys, 1, NULL, NULL, &loaded), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("pieces");
  CHECK_STATUS(kvtier_load(s, ns, keys, 1, bufs, NULL, NULL), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("loaded");
  kvtier_buf short_buf = {a, CHUNK - 1};
  CHECK_STATUS(kvtier_load(s, ns, keys, 1, &short_buf, NULL, &loaded), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("bytes");
  kvtier_buf null_data = {NULL, CHUNK};
  CHECK_STATUS(kvtier_save(s, ns, keys, 1, &null_data, NULL), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("NULL data");
  /* Piece counts that overflow, and piece sizes that wrap around to the chunk size. */
  size_t huge_counts[2] = {SIZE_MAX, 2};
  CHECK_STATUS(kvtier_save(s, ns, keys, 2, bufs, huge_counts), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("pieces_per_chunk");
  kvtier_buf wrapping[2] = {{a, SIZE_MAX}, {b, CHUNK + 1}};
  size_t two = 2;
  CHECK_STATUS(kvtier_save(s, ns, keys, 1, wrapping, &two), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("kvtier_save");
  CHECK_STATUS(kvtier_save(s, ns, keys, SIZE_MAX, bufs, NULL), KVTIER_INVALID_ARGUMENT);
  CHECK(kvtier_lookup(NULL, ns, keys, 1) == 0);
  CHECK_ERROR_NAMES("kvtier_lookup");
  CHECK(kvtier_lookup(s, ns, NULL, 1) == 0);
  CHECK_ERROR_NAMES("keys");
  kvtier_prefetch(s, NULL, keys, 1);
  CHECK_ERROR_NAMES("kvtier_prefetch");
  /* Nothing above stored anything. */
  CHECK(kvtier_lookup(s, ns, keys, 2) == 0);

  kvtier_op* op = (kvtier_op*)&op;
  CHECK_STATUS(kvtier_load_async(s, ns, keys, 1, &short_buf, NULL, -1, &op), KVTIER_INVALID_ARGUMENT);
  CHECK(op == NULL);
  CHECK_ERROR_NAMES("kvtier_load_async");
  CHECK_STATUS(kvtier_save_async(s, ns, keys, 1, bufs, NULL, -1, NULL), KVTIER_INVALID_ARGUMENT);
  CHECK_STATUS(kvtier_save_async(NULL, ns, keys, 1, bufs, NULL, -1, &op), KVTIER_INVALID_ARGUMENT);
  CHECK_STATUS(kvtier_op_wait(NULL, -1), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("kvtier_op_wait");
  CHECK(kvtier_op_done(NULL) == 0 && kvtier_op_count(NULL) == 0);
  size_t ready = 7;
  CHECK_STATUS(kvtier_op_wait_bytes(NULL, 1, -1, &ready), KVTIER_INVALID_ARGUMENT);
  CHECK(ready == 0);
  CHECK_ERROR_NAMES("kvtier_op_wait_bytes");
  CHECK(strcmp(kvtier_op_error(NULL), "") == 0);
  kvtier_op_free(NULL);
  char text[8];
  CHECK(kvtier_store_stats_json(NULL, text, sizeof(text)) == 0);
  CHECK_ERROR_NAMES("kvtier_store_stats_json");
  CHECK(kvtier_store_stats_json(s, NULL, 4) == 0);
  CHECK_ERROR_NAMES("buf");
  kvtier_ns_free(ns);
  kvtier_store_close(s);
}

/* ---- Namespaces and keys -------------------------------------------------------------------------- */

static void TestKeys(void) {
  kvtier_ns* a = MakeNs("tenant-a");
  kvtier_ns* a2 = MakeNs("tenant-a");
  kvtier_ns* b = MakeNs("tenant-b");
  CHECK(kvtier_ns_chunk_bytes(a) == CHUNK);
  CHECK(kvtier_ns_tokens_per_chunk(a) == TOKENS_PER_CHUNK);
  uint8_t ida[KVTIER_KEY_BYTES], ida2[KVTIER_KEY_BYTES], idb[KVTIER_KEY_BYTES];
  kvtier_ns_id(a, ida);
  kvtier_ns_id(a2, ida2);
  kvtier_ns_id(b, idb);
  CHECK(memcmp(ida, ida2, KVTIER_KEY_BYTES) == 0);
  CHECK(memcmp(ida, idb, KVTIER_KEY_BYTES) != 0);

  uint32_t tokens[11];
  for (uint32_t i = 0; i < 11; ++i) tokens[i] = 1000 + i;
  CHECK(kvtier_chunk_keys(a, tokens, 11, NULL, 0) == 2); /* sizing: the partial chunk has no key */
  CHECK(kvtier_chunk_keys(a, tokens, 3, NULL, 0) == 0);
  kvtier_key k1[3], k2[3], kb[2], one[1];
  memset(k1, 0, sizeof(k1));
  memset(k2, 0, sizeof(k2));
  CHECK(kvtier_chunk_keys(a, tokens, 11, k1, 3) == 2);
  CHECK(AllBytes(k1[2].bytes, KVTIER_KEY_BYTES, 0)); /* only 2 written */
  CHECK(kvtier_chunk_keys(a2, tokens, 11, k2, 2) == 2);
  CHECK(memcmp(k1, k2, 2 * sizeof(kvtier_key)) == 0);
  CHECK(memcmp(&k1[0], &k1[1], sizeof(kvtier_key)) != 0);
  CHECK(kvtier_chunk_keys(a, tokens, 11, one, 1) == 2); /* cap 1: one written, two counted */
  CHECK(memcmp(&one[0], &k1[0], sizeof(kvtier_key)) == 0);
  CHECK(kvtier_chunk_keys(b, tokens, 11, kb, 2) == 2);
  CHECK(memcmp(&kb[0], &k1[0], sizeof(kvtier_key)) != 0);

  kvtier_key n0, n1;
  CHECK_STATUS(kvtier_next_chunk_key(a, NULL, tokens, 4, &n0), KVTIER_OK);
  CHECK_STATUS(kvtier_next_chunk_key(a, &n0, tokens + 4, 4, &n1), KVTIER_OK);
  CHECK(memcmp(&n0, &k1[0], sizeof(kvtier_key)) == 0);
  CHECK(memcmp(&n1, &k1[1], sizeof(kvtier_key)) == 0);
  /* A key names the whole prefix: changing a token of chunk 0 changes the key of chunk 1. */
  tokens[0] ^= 1;
  CHECK(kvtier_chunk_keys(a, tokens, 8, k2, 2) == 2);
  CHECK(memcmp(&k2[1], &k1[1], sizeof(kvtier_key)) != 0);
  kvtier_ns_free(a);
  kvtier_ns_free(a2);
  kvtier_ns_free(b);
}

/* ---- Save, lookup, load ---------------------------------------------------------------------------- */

static void TestRoundTrip(const char* url) {
  kvtier_store* s = OpenStore(url, 2);
  kvtier_ns* ns = MakeNs("round-trip");
  enum { N = 3 };
  kvtier_key keys[N + 1];
  Keys(ns, 50, N + 1, keys);
  static uint8_t src[N][CHUNK], dst[N][CHUNK];
  kvtier_buf in[N], out[N];
  for (size_t i = 0; i < N; ++i) {
    Fill(src[i], i, 1);
    in[i] = (kvtier_buf){src[i], CHUNK};
    out[i] = (kvtier_buf){dst[i], CHUNK};
  }
  CHECK(kvtier_lookup(s, ns, keys, N) == 0);
  CHECK_STATUS(kvtier_save(s, ns, keys, N, in, NULL), KVTIER_OK);
  CHECK_STATUS(kvtier_store_flush(s), KVTIER_OK); /* a file:// top tier is written in the background */
  CHECK(kvtier_lookup(s, ns, keys, N) == N);
  CHECK(kvtier_lookup(s, ns, keys, N + 1) == N); /* key N was never saved */
  memset(dst, 0xEE, sizeof(dst));
  size_t loaded = 0;
  CHECK_STATUS(kvtier_load(s, ns, keys, N, out, NULL, &loaded), KVTIER_OK);
  CHECK(loaded == N);
  CHECK(memcmp(src, dst, sizeof(src)) == 0);

  /* A miss ends the prefix: [k0, never saved, k2] loads one chunk. */
  kvtier_key holed[3] = {keys[0], keys[N], keys[2]};
  CHECK(kvtier_lookup(s, ns, holed, 3) == 1);
  memset(dst, 0xEE, sizeof(dst));
  CHECK_STATUS(kvtier_load(s, ns, holed, 3, out, NULL, &loaded), KVTIER_OK);
  CHECK(loaded == 1);
  CHECK(memcmp(src[0], dst[0], CHUNK) == 0);
  /* Not chunk 2's bytes: the store may read chunk 2 past the gap, but then zeroes its destination. */
  CHECK(memcmp(dst[2], src[2], CHUNK) != 0 && dst[1][0] == 0xEE && (dst[2][0] == 0 || dst[2][0] == 0xEE));

  /* Scatter: saved as 2 + 3 pieces, loaded as 1 + 4 pieces of other sizes. */
  kvtier_key sk[2];
  Keys(ns, 9000, 2, sk);
  static uint8_t whole[2][CHUNK], back[2][CHUNK];
  Fill(whole[0], 0, 7);
  Fill(whole[1], 1, 7);
  kvtier_buf save_pieces[5] = {{whole[0], 100}, {whole[0] + 100, CHUNK - 100},
                               {whole[1], 1},   {whole[1] + 1, 300},
                               {whole[1] + 301, CHUNK - 301}};
  size_t save_counts[2] = {2, 3};
  CHECK_STATUS(kvtier_save(s, ns, sk, 2, save_pieces, save_counts), KVTIER_OK);
  CHECK_STATUS(kvtier_store_flush(s), KVTIER_OK);
  memset(back, 0xEE, sizeof(back));
  kvtier_buf load_pieces[6] = {{back[0], CHUNK},       {back[1], 64},  {back[1] + 64, 0},
                               {back[1] + 64, 64},     {back[1] + 128, 128},
                               {back[1] + 256, CHUNK - 256}};
  size_t load_counts[2] = {1, 5};
  CHECK_STATUS(kvtier_load(s, ns, sk, 2, load_pieces, load_counts, &loaded), KVTIER_OK);
  CHECK(loaded == 2);
  CHECK(memcmp(whole, back, sizeof(whole)) == 0);

  /* A chunk saved under one namespace is not found under another. */
  kvtier_ns* other = MakeNs("someone-else");
  CHECK(kvtier_lookup(s, other, keys, N) == 0);
  kvtier_ns_free(other);

  kvtier_prefetch(s, ns, keys, N);
  CHECK_STATUS(kvtier_store_flush(s), KVTIER_OK);
  kvtier_ns_free(ns);
  kvtier_store_close(s);
}

/* ---- Temporary directories and chunk files -------------------------------------------------------- */

static int RemoveEntry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void RemoveTree(const char* dir) { CHECK(nftw(dir, RemoveEntry, 16, FTW_DEPTH | FTW_PHYS) == 0); }

static char g_wanted[2 * KVTIER_KEY_BYTES + 8];
static char g_found[4096];

static int FindChunk(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  if (flag == FTW_F && strcmp(path + ftw->base, g_wanted) == 0) {
    snprintf(g_found, sizeof(g_found), "%s", path);
    return 1;
  }
  return 0;
}

/* The chunk file of `key` below `dir`: "<key hex>.kvc" (docs/architecture.md). */
static const char* ChunkFile(const char* dir, const kvtier_key* key) {
  for (size_t i = 0; i < KVTIER_KEY_BYTES; ++i) snprintf(g_wanted + 2 * i, 3, "%02x", key->bytes[i]);
  strcat(g_wanted, ".kvc");
  g_found[0] = '\0';
  CHECK(nftw(dir, FindChunk, 16, FTW_PHYS) == 1);
  return g_found;
}

/* Flips one payload byte (the payload starts after the 4096-byte header). */
static void FlipPayloadByte(const char* path) {
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  uint8_t b = 0;
  CHECK(pread(fd, &b, 1, 4096 + 100) == 1);
  b ^= 0x5A;
  CHECK(pwrite(fd, &b, 1, 4096 + 100) == 1);
  CHECK(close(fd) == 0);
}

static void TestFileTier(void) {
  char dir[] = "/tmp/kvtier-capi-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char url[256];
  snprintf(url, sizeof(url), "file://%s/tier?capacity=16MiB", dir);
  TestRoundTrip(url);

  /* Corruption: one flipped byte in chunk 0's file; nothing loads and the destinations are zeroed. */
  kvtier_store* s = OpenStore(url, 1);
  kvtier_ns* ns = MakeNs("corrupt");
  kvtier_key keys[2];
  Keys(ns, 7, 2, keys);
  static uint8_t src[2][CHUNK], dst[2][CHUNK];
  Fill(src[0], 0, 3);
  Fill(src[1], 1, 3);
  kvtier_buf in[2] = {{src[0], CHUNK}, {src[1], CHUNK}}, out[2] = {{dst[0], CHUNK}, {dst[1], CHUNK}};
  CHECK_STATUS(kvtier_save(s, ns, keys, 2, in, NULL), KVTIER_OK);
  CHECK_STATUS(kvtier_store_flush(s), KVTIER_OK);
  char tier_dir[300];
  snprintf(tier_dir, sizeof(tier_dir), "%s/tier", dir);
  FlipPayloadByte(ChunkFile(tier_dir, &keys[0]));
  CHECK(kvtier_lookup(s, ns, keys, 2) == 2); /* present; not verified until read */
  memset(dst, 0xEE, sizeof(dst));
  size_t loaded = 99;
  CHECK_STATUS(kvtier_load(s, ns, keys, 2, out, NULL, &loaded), KVTIER_OK);
  CHECK(loaded == 0);
  CHECK(AllBytes(dst[0], CHUNK, 0));
  CHECK(AllBytes(dst[1], CHUNK, 0) || AllBytes(dst[1], CHUNK, 0xEE)); /* never chunk 1's bytes */
  CHECK(kvtier_lookup(s, ns, keys, 2) == 0); /* the corrupt chunk was removed */
  char json[4096];
  const size_t len = kvtier_store_stats_json(s, json, sizeof(json));
  CHECK(len > 0 && len < sizeof(json));
  CHECK(strstr(json, "\"corrupt\":1") != NULL);
  /* Saved again, it loads again. */
  CHECK_STATUS(kvtier_save(s, ns, keys, 1, in, NULL), KVTIER_OK);
  CHECK_STATUS(kvtier_store_flush(s), KVTIER_OK);
  CHECK_STATUS(kvtier_load(s, ns, keys, 2, out, NULL, &loaded), KVTIER_OK);
  CHECK(loaded == 2 && memcmp(src, dst, sizeof(src)) == 0);
  kvtier_ns_free(ns);
  kvtier_store_close(s);
  RemoveTree(dir);
}

/* ---- Asynchronous operations ----------------------------------------------------------------------- */

static uint64_t ReadEventFd(int fd) {
  uint64_t v = 0;
  CHECK(read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v));
  return v;
}

static void TestAsync(void) {
  kvtier_store* s = OpenStore("mem://?capacity=1MiB", 2);
  kvtier_ns* ns = MakeNs("async");
  kvtier_key keys[3];
  Keys(ns, 300, 3, keys);
  static uint8_t src[2][CHUNK], dst[3][CHUNK];
  Fill(src[0], 0, 5);
  Fill(src[1], 1, 5);
  kvtier_buf in[2] = {{src[0], CHUNK}, {src[1], CHUNK}};
  kvtier_buf out[3] = {{dst[0], CHUNK}, {dst[1], CHUNK}, {dst[2], CHUNK}};
  const int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  CHECK(efd >= 0);

  kvtier_op* op = NULL;
  CHECK_STATUS(kvtier_save_async(s, ns, keys, 2, in, NULL, efd, &op), KVTIER_OK);
  CHECK_STATUS(kvtier_op_wait(op, -1), KVTIER_OK);
  CHECK(kvtier_op_done(op) == 1 && kvtier_op_count(op) == 2);
  CHECK(strcmp(kvtier_op_error(op), "") == 0);
  CHECK(ReadEventFd(efd) == 1); /* written before kvtier_op_wait returned */
  CHECK_STATUS(kvtier_op_wait(op, 0), KVTIER_OK); /* done: a zero timeout returns its status */
  size_t ready = 0;
  CHECK_STATUS(kvtier_op_wait_bytes(op, 1, -1, &ready), KVTIER_INVALID_ARGUMENT); /* a save */
  kvtier_op_free(op);

  memset(dst, 0xEE, sizeof(dst));
  CHECK_STATUS(kvtier_load_async(s, ns, keys, 3, out, NULL, efd, &op), KVTIER_OK);
  /* The leading chunks whose first half (then all) has landed: the load ends at the miss. */
  CHECK_STATUS(kvtier_op_wait_bytes(op, CHUNK / 2, -1, &ready), KVTIER_OK);
  CHECK(ready == 2);
  CHECK_STATUS(kvtier_op_wait_bytes(op, 10 * CHUNK, 60000, &ready), KVTIER_OK);
  CHECK(ready == 2);
  CHECK_STATUS(kvtier_op_wait_bytes(op, 1, -1, NULL), KVTIER_INVALID_ARGUMENT);
  CHECK_STATUS(kvtier_op_wait(op, 60000), KVTIER_OK);
  CHECK(kvtier_op_count(op) == 2); /* chunk 2 is a miss */
  CHECK(memcmp(dst[0], src[0], CHUNK) == 0 && memcmp(dst[1], src[1], CHUNK) == 0);
  CHECK(ReadEventFd(efd) == 1);
  kvtier_op_free(op);

  /* Without waiting: kvtier_op_free waits. */
  memset(dst, 0xEE, sizeof(dst));
  CHECK_STATUS(kvtier_load_async(s, ns, keys, 2, out, NULL, -1, &op), KVTIER_OK);
  kvtier_op_free(op);
  CHECK(memcmp(dst[0], src[0], CHUNK) == 0 && memcmp(dst[1], src[1], CHUNK) == 0);
  CHECK(read(efd, &(uint64_t){0}, 8) < 0 && errno == EAGAIN); /* no notify asked for, none written */
  CHECK(close(efd) == 0);
  kvtier_ns_free(ns);
  kvtier_store_close(s);

  /* A failed operation: a chunk (128 KiB) larger than the whole tier (one 64 KiB page). */
  s = OpenStore("mem://?capacity=64KiB", 1);
  const kvtier_layout big_layout = {2, 2, 128, KVTIER_DTYPE_FP16, 64};
  CHECK_STATUS(kvtier_ns_create("test/big", &big_layout, NULL, "", &ns), KVTIER_OK);
  CHECK(kvtier_ns_chunk_bytes(ns) == 131072);
  uint8_t* big = calloc(1, 131072);
  CHECK(big != NULL);
  kvtier_buf big_buf = {big, 131072};
  CHECK_STATUS(kvtier_save_async(s, ns, keys, 1, &big_buf, NULL, -1, &op), KVTIER_OK);
  const kvtier_status st = kvtier_op_wait(op, -1);
  CHECK(st == KVTIER_NO_SPACE);
  CHECK(kvtier_op_done(op) == 1 && kvtier_op_count(op) == 0);
  CHECK(strlen(kvtier_op_error(op)) > 0);
  CHECK(strcmp(kvtier_last_error(), kvtier_op_error(op)) == 0);
  free(big);
  kvtier_op_free(op);
  kvtier_ns_free(ns);
  kvtier_store_close(s);
}

/* A pipe made full: the async thread that writes an operation's notify to it blocks until it is read,
 * which holds up every operation queued behind it on a store with one async thread. */
typedef struct FullPipe {
  int r, w;
  size_t filled;
} FullPipe;

static FullPipe MakeFullPipe(void) {
  int fds[2];
  CHECK(pipe2(fds, O_CLOEXEC) == 0);
  FullPipe p = {fds[0], fds[1], 0};
  CHECK(fcntl(p.w, F_SETFL, O_NONBLOCK) == 0);
  static const uint8_t zeros[4096];
  for (;;) {
    const ssize_t n = write(p.w, zeros, sizeof(zeros));
    if (n < 0) break;
    p.filled += (size_t)n;
  }
  CHECK(errno == EAGAIN && p.filled > 0);
  CHECK(fcntl(p.w, F_SETFL, 0) == 0); /* blocking again */
  return p;
}

/* Reads the fill, then the one 8-byte notify value: the async thread is then free. */
static void DrainFullPipe(FullPipe* p) {
  static uint8_t sink[4096];
  size_t left = p->filled;
  while (left > 0) {
    const ssize_t n = read(p->r, sink, left < sizeof(sink) ? left : sizeof(sink));
    CHECK(n > 0);
    left -= (size_t)n;
  }
  uint64_t one = 0;
  CHECK(read(p->r, &one, sizeof(one)) == (ssize_t)sizeof(one) && one == 1);
  CHECK(close(p->r) == 0 && close(p->w) == 0);
}

static void TestWaitTimeout(void) {
  kvtier_store* s = OpenStore("mem://?capacity=1MiB", 1);
  kvtier_ns* ns = MakeNs("timeout");
  kvtier_key keys[1];
  Keys(ns, 1, 1, keys);
  static uint8_t src[CHUNK], dst[CHUNK];
  Fill(src, 0, 9);
  kvtier_buf in = {src, CHUNK}, out = {dst, CHUNK};
  FullPipe pipe = MakeFullPipe();
  kvtier_op* blocker = NULL;
  kvtier_op* queued = NULL;
  CHECK_STATUS(kvtier_save_async(s, ns, keys, 1, &in, NULL, pipe.w, &blocker), KVTIER_OK);
  CHECK_STATUS(kvtier_load_async(s, ns, keys, 1, &out, NULL, -1, &queued), KVTIER_OK);
  /* The only async thread is (or will be) stuck writing the blocker's notify: `queued` cannot run. */
  CHECK_STATUS(kvtier_op_wait(queued, 0), KVTIER_BUSY);
  CHECK_STATUS(kvtier_op_wait(queued, 20), KVTIER_BUSY);
  CHECK_ERROR_NAMES("kvtier_op_wait");
  CHECK(kvtier_op_done(queued) == 0 && kvtier_op_count(queued) == 0);
  CHECK(strcmp(kvtier_op_error(queued), "") == 0);
  DrainFullPipe(&pipe);
  CHECK_STATUS(kvtier_op_wait(queued, -1), KVTIER_OK);
  CHECK(kvtier_op_count(queued) == 1 && memcmp(src, dst, CHUNK) == 0);
  CHECK_STATUS(kvtier_op_wait(blocker, 0), KVTIER_OK);
  CHECK(kvtier_op_count(blocker) == 1);
  kvtier_op_free(blocker);
  kvtier_op_free(queued);
  kvtier_ns_free(ns);
  kvtier_store_close(s);
}

static void* CloseStore(void* store) {
  kvtier_store_close((kvtier_store*)store);
  return NULL;
}

/* Closing waits for queued and running operations; the operations outlive the store. */
static void TestCloseWithOpsInFlight(void) {
  kvtier_store* s = OpenStore("mem://?capacity=1MiB", 1);
  kvtier_ns* ns = MakeNs("close");
  enum { OPS = 6 };
  kvtier_key keys[OPS];
  Keys(ns, 77, OPS, keys);
  static uint8_t src[OPS][CHUNK];
  kvtier_buf in[OPS];
  for (size_t i = 0; i < OPS; ++i) {
    Fill(src[i], i, 11);
    in[i] = (kvtier_buf){src[i], CHUNK};
  }
  FullPipe pipe = MakeFullPipe();
  kvtier_op* ops[OPS];
  CHECK_STATUS(kvtier_save_async(s, ns, keys, 1, in, NULL, pipe.w, &ops[0]), KVTIER_OK);
  for (size_t i = 1; i < OPS; ++i) {
    CHECK_STATUS(kvtier_save_async(s, ns, keys + i, 1, in + i, NULL, -1, &ops[i]), KVTIER_OK);
  }
  pthread_t closer;
  CHECK(pthread_create(&closer, NULL, CloseStore, s) == 0);
  CHECK(kvtier_op_done(ops[OPS - 1]) == 0); /* queued behind the blocked thread */
  DrainFullPipe(&pipe);
  CHECK(pthread_join(closer, NULL) == 0);
  for (size_t i = 0; i < OPS; ++i) {
    CHECK(kvtier_op_done(ops[i]) == 1); /* the close waited for every one */
    CHECK_STATUS(kvtier_op_wait(ops[i], 0), KVTIER_OK);
    CHECK(kvtier_op_count(ops[i]) == 1);
    kvtier_op_free(ops[i]);
  }
  kvtier_ns_free(ns);
}

/* ---- Many threads on one store --------------------------------------------------------------------- */

typedef struct Worker {
  kvtier_store* store;
  const kvtier_ns* ns;
  unsigned id;
} Worker;

static void* Work(void* arg) {
  const Worker* w = (const Worker*)arg;
  uint8_t src[CHUNK], dst[CHUNK];
  for (unsigned round = 0; round < 20; ++round) {
    kvtier_key key;
    Keys(w->ns, 100000u * (w->id + 1) + round * TOKENS_PER_CHUNK, 1, &key);
    Fill(src, round, w->id);
    kvtier_buf in = {src, CHUNK}, out = {dst, CHUNK};
    kvtier_op* op = NULL;
    CHECK_STATUS(kvtier_save_async(w->store, w->ns, &key, 1, &in, NULL, -1, &op), KVTIER_OK);
    CHECK_STATUS(kvtier_op_wait(op, -1), KVTIER_OK);
    kvtier_op_free(op);
    size_t loaded = 0;
    CHECK_STATUS(kvtier_load(w->store, w->ns, &key, 1, &out, NULL, &loaded), KVTIER_OK);
    CHECK(loaded == 1 && memcmp(src, dst, CHUNK) == 0);
  }
  return NULL;
}

static void TestThreads(void) {
  kvtier_store* s = OpenStore("mem://?capacity=8MiB", 3);
  kvtier_ns* ns = MakeNs("threads");
  enum { THREADS = 6 };
  pthread_t t[THREADS];
  Worker w[THREADS];
  for (unsigned i = 0; i < THREADS; ++i) {
    w[i] = (Worker){s, ns, i};
    CHECK(pthread_create(&t[i], NULL, Work, &w[i]) == 0);
  }
  for (unsigned i = 0; i < THREADS; ++i) CHECK(pthread_join(t[i], NULL) == 0);
  kvtier_ns_free(ns);
  kvtier_store_close(s);
}

/* ---- Statistics ------------------------------------------------------------------------------------ */

static void TestStatsJson(void) {
  kvtier_store* s = OpenStore("mem://?capacity=1MiB", 1);
  kvtier_ns* ns = MakeNs("stats");
  kvtier_key keys[2];
  Keys(ns, 0, 2, keys);
  CHECK(kvtier_lookup(s, ns, keys, 2) == 0);
  const size_t len = kvtier_store_stats_json(s, NULL, 0); /* sizing */
  CHECK(len > 10);
  char* buf = malloc(len + 1);
  CHECK(buf != NULL);
  CHECK(kvtier_store_stats_json(s, buf, len + 1) == len);
  CHECK(strlen(buf) == len && buf[0] == '{' && buf[len - 1] == '}');
  CHECK(strstr(buf, "\"lookups\":1") != NULL);
  CHECK(strstr(buf, "\"lookup_chunks_missed\":2") != NULL);
  CHECK(strstr(buf, "\"tiers\":[{\"url\":\"mem://") != NULL);
  CHECK(strstr(buf, "\"lookup_tokens\":") != NULL); /* the namespace entry */
  char small[10];
  CHECK(kvtier_store_stats_json(s, small, sizeof(small)) == len); /* truncated, still terminated */
  CHECK(strlen(small) == sizeof(small) - 1 && memcmp(small, buf, sizeof(small) - 1) == 0);
  free(buf);
  kvtier_ns_free(ns);
  kvtier_store_close(s);
}

/* The event fields came after key_file: options of an older build (struct_size ending at key_file) still
 * open a store, without events; an events endpoint gives a store with a publisher (its stats say so),
 * and a malformed one is refused. */
static void TestEventOptions(void) {
  const char* mem[1] = {"mem://?capacity=1MiB"};
  kvtier_store_options o;
  kvtier_store_options_init(&o);
  CHECK(o.events == NULL && o.events_topic == NULL);
  o.tiers = mem;
  o.tier_count = 1;
  o.events = "no-endpoint";
  kvtier_store* s = NULL;
  o.struct_size = (uint32_t)offsetof(kvtier_store_options, events);
  CHECK_STATUS(kvtier_store_open(&o, &s), KVTIER_OK); /* an older caller: the fields are not read */
  char buf[4096];
  CHECK(kvtier_store_stats_json(s, buf, sizeof(buf)) < sizeof(buf));
  CHECK(strstr(buf, "\"observed\":false") != NULL);
  kvtier_store_close(s);
  o.struct_size = sizeof(o);
  CHECK_STATUS(kvtier_store_open(&o, &s), KVTIER_INVALID_ARGUMENT);
  CHECK_ERROR_NAMES("no-endpoint");
  o.events = "tcp://127.0.0.1:*";
  o.events_topic = "kv@pod@model";
  CHECK_STATUS(kvtier_store_open(&o, &s), KVTIER_OK);
  CHECK(kvtier_store_stats_json(s, buf, sizeof(buf)) < sizeof(buf));
  CHECK(strstr(buf, "\"observed\":true") != NULL);
  kvtier_store_close(s);
}

static void TestMetricsText(void) {
  kvtier_store* s = OpenStore("mem://?capacity=1MiB", 1);
  kvtier_ns* ns = MakeNs("metrics");
  kvtier_key keys[2];
  Keys(ns, 0, 2, keys);
  CHECK(kvtier_lookup(s, ns, keys, 2) == 0);
  const size_t len = kvtier_store_metrics_text(s, NULL, 0);
  CHECK(len > 100);
  char* text = malloc(len + 1);
  CHECK(text != NULL);
  CHECK(kvtier_store_metrics_text(s, text, len + 1) == len);
  CHECK(strlen(text) == len && text[len - 1] == '\n');
  CHECK(strstr(text, "# TYPE kvtier_lookups_total counter\n") != NULL);
  CHECK(strstr(text, "kvtier_lookup_chunks_total{namespace=\"") != NULL);
  CHECK(strstr(text, "kvtier_tier_hits_total{tier=\"mem://") != NULL);
  CHECK(kvtier_store_metrics_text(NULL, text, len + 1) == 0);
  CHECK_ERROR_NAMES("kvtier_store_metrics_text");
  free(text);
  kvtier_ns_free(ns);
  kvtier_store_close(s);
}

int main(void) {
  TestVersion();
  TestBadNamespaceArguments();
  TestLayoutOverflowAndLengthTakingNamespaces();
  TestBadStoreOptions();
  TestBadBufferArguments();
  TestKeys();
  TestRoundTrip("mem://?capacity=1MiB");
  TestFileTier();
  TestAsync();
  TestWaitTimeout();
  TestCloseWithOpsInFlight();
  TestThreads();
  TestStatsJson();
  TestMetricsText();
  TestEventOptions();
  printf("capi_c_test: %lu checks passed\n", (unsigned long)g_checks);
  return 0;
}
