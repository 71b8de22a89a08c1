// The C++ twin of consumer.c: the C API from C++ (RAII over the handles), built against an installed
// kvtier by tests/install. Prints the library file it runs against.
#include <dlfcn.h>

#include <cstdio>
#include <memory>
#include <vector>

#include <kvtier/kvtier.h>

namespace {

struct StoreCloser {
  void operator()(kvtier_store* s) const { kvtier_store_close(s); }
};
struct NsFreer {
  void operator()(kvtier_ns* ns) const { kvtier_ns_free(ns); }
};

int Fail(const char* what) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, kvtier_last_error());
  return 1;
}

}  // namespace

int main() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&kvtier_version), &info) == 0 || info.dli_fname == nullptr) {
    return Fail("dladdr");
  }
  const char* tiers[] = {"mem://?capacity=16MiB"};
  kvtier_store_options o;
  kvtier_store_options_init(&o);
  o.tiers = tiers;
  o.tier_count = 1;
  kvtier_store* raw_store = nullptr;
  if (kvtier_store_open(&o, &raw_store) != KVTIER_OK) return Fail("store_open");
  std::unique_ptr<kvtier_store, StoreCloser> store(raw_store);

  const kvtier_layout layout{2, 2, 8, KVTIER_DTYPE_BF16, 16};
  kvtier_ns* raw_ns = nullptr;
  if (kvtier_ns_create("install-test/model", &layout, "tenant", "", &raw_ns) != KVTIER_OK) {
    return Fail("ns_create");
  }
  std::unique_ptr<kvtier_ns, NsFreer> ns(raw_ns);
  std::vector<uint32_t> tokens(32);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(7 * i);
  std::vector<kvtier_key> keys(2);
  if (kvtier_chunk_keys(ns.get(), tokens.data(), tokens.size(), keys.data(), keys.size()) != 2) {
    return Fail("chunk_keys");
  }
  const size_t bytes = kvtier_ns_chunk_bytes(ns.get());
  std::vector<unsigned char> saved(2 * bytes), loaded(2 * bytes, 0);
  for (size_t i = 0; i < saved.size(); ++i) saved[i] = static_cast<unsigned char>(i * 13 + 1);
  const kvtier_buf in[2] = {{saved.data(), bytes}, {saved.data() + bytes, bytes}};
  const kvtier_buf out[2] = {{loaded.data(), bytes}, {loaded.data() + bytes, bytes}};
  if (kvtier_save(store.get(), ns.get(), keys.data(), 2, in, nullptr) != KVTIER_OK) return Fail("save");
  size_t n = 0;
  if (kvtier_load(store.get(), ns.get(), keys.data(), 2, out, nullptr, &n) != KVTIER_OK || n != 2) {
    return Fail("load");
  }
  if (saved != loaded) return Fail("loaded bytes differ");
  std::printf("kvtier %s from %s: saved and loaded 2 chunks (C++)\n", kvtier_version(), info.dli_fname);
  return 0;
}
