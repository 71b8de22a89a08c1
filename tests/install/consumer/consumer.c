/* An out-of-tree program of the C API, built by tests/install against an installed kvtier (pkg-config
 * or find_package): opens a mem:// store, saves one chunk, looks it up, loads it back and compares.
 * Prints the library file it runs against (so the test can check it is the installed copy). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <kvtier/kvtier.h>

static int fail(const char* what) {
  fprintf(stderr, "consumer: %s: %s\n", what, kvtier_last_error());
  return 1;
}

int main(void) {
  Dl_info info;
  if (!dladdr((void*)kvtier_version, &info) || info.dli_fname == NULL) return fail("dladdr");
  if (kvtier_abi_version() != KVTIER_ABI_VERSION) return fail("ABI version");

  const char* tiers[] = {"mem://?capacity=16MiB"};
  kvtier_store_options o;
  kvtier_store_options_init(&o);
  o.tiers = tiers;
  o.tier_count = 1;
  kvtier_store* s = NULL;
  if (kvtier_store_open(&o, &s) != KVTIER_OK) return fail("store_open");

  kvtier_layout l = {2, 2, 8, KVTIER_DTYPE_FP16, 16};
  kvtier_ns* ns = NULL;
  if (kvtier_ns_create("install-test/model", &l, "tenant", "", &ns) != KVTIER_OK) return fail("ns_create");
  uint32_t tokens[16];
  for (uint32_t i = 0; i < 16; ++i) tokens[i] = 1000 + i;
  kvtier_key key;
  if (kvtier_chunk_keys(ns, tokens, 16, &key, 1) != 1) return fail("chunk_keys");

  static unsigned char saved[2048], loaded[2048];
  if (kvtier_ns_chunk_bytes(ns) != sizeof saved) return fail("chunk_bytes");
  for (size_t i = 0; i < sizeof saved; ++i) saved[i] = (unsigned char)(i * 7 + 3);
  kvtier_buf in = {saved, sizeof saved}, out = {loaded, sizeof loaded};
  if (kvtier_save(s, ns, &key, 1, &in, NULL) != KVTIER_OK) return fail("save");
  if (kvtier_lookup(s, ns, &key, 1) != 1) return fail("lookup");
  size_t n = 0;
  if (kvtier_load(s, ns, &key, 1, &out, NULL, &n) != KVTIER_OK || n != 1) return fail("load");
  if (memcmp(saved, loaded, sizeof saved) != 0) return fail("loaded bytes differ");

  kvtier_ns_free(ns);
  kvtier_store_close(s);
  printf("kvtier %s from %s: saved and loaded 1 chunk (C)\n", kvtier_version(), info.dli_fname);
  return 0;
}
