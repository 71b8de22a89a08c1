// Property checks for fuzz targets. A failed check prints what broke and aborts, which libFuzzer
// reports as a crash (and saves the input), and which fails the corpus replay test under ctest.
#pragma once

#include <cstdio>
#include <cstdlib>

#define KVTIER_FUZZ_CHECK(cond)                                                              \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "kvtier fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

// Each fuzz source defines its body as a function in kvtier::fuzz and, unless KVTIER_FUZZ_NO_MAIN is
// defined (the ctest corpus replay links several bodies into one binary), the libFuzzer entry point.
#ifdef KVTIER_FUZZ_NO_MAIN
#define KVTIER_FUZZ_ENTRY(fn)
#else
#define KVTIER_FUZZ_ENTRY(fn)                                                   \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {     \
    return ::kvtier::fuzz::fn(data, size);                                      \
  }
#endif
