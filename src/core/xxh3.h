// kvtier's one way to reach xxh3: Debian's libxxhash, through its x86 runtime dispatch where the
// library has it. XXH3_64bits and XXH3_64bits_update then run on the widest vector unit the CPU offers
// (AVX2 or AVX-512; the plain entry points are built for SSE2 only), which makes a checksum pass over
// 256 KiB of cache-resident bytes about 2.5x faster on the development VM (17.8 -> 46.8 GB/s, timed by
// a scratch program that is not in the repository; `kvtier bench datapath` shows the effect on loads).
// The values are the same on every path: xxh3 is defined by its scalar reference and every vector variant
// computes it exactly, so chunks written by one build verify under any other.
//
// Include this instead of <xxhash.h>. XXH3_state_t is complete (XXH_STATIC_LINKING_ONLY) so callers may
// keep streaming state on the stack. Thread-safe: the dispatch picks its variant once, atomically.
#pragma once

#ifndef XXH_STATIC_LINKING_ONLY
#define XXH_STATIC_LINKING_ONLY
#endif
#include <xxhash.h>

#if defined(__x86_64__) && !defined(KVTIER_XXH_NO_DISPATCH)
#include <xxh_x86dispatch.h>  // redefines XXH3_64bits{,_update,...} as their *_dispatch versions
#endif
