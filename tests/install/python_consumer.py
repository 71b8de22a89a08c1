"""The Python package against an installed libkvtier.so (tests/install/check-install.sh): saves and loads a
chunk through a mem:// store and checks that the library mapped is the installed file (argv[1])."""
import sys

import kvtier

layout = kvtier.Layout(layers=2, kv_heads=2, head_dim=8, dtype="fp16", tokens_per_chunk=16)
with kvtier.Store(["mem://?capacity=16MiB"]) as store, store.namespace("install-test/model", layout) as ns:
    keys = ns.chunk_keys(list(range(16)))
    size = ns.chunk_bytes
    saved = bytearray((i * 5 + 1) % 256 for i in range(size))
    out = bytearray(size)
    store.save(ns, keys, [saved])
    loaded = store.load(ns, keys, [out])
with open("/proc/self/maps") as maps:
    mapped = {line.split()[-1] for line in maps if "libkvtier" in line}
if loaded != 1 or out != saved:
    sys.exit(f"python: loaded {loaded} chunk(s), identical: {out == saved}")
if mapped != {sys.argv[1]}:
    sys.exit(f"python: libkvtier mapped from {sorted(mapped)}, not {sys.argv[1]}")
print(f"python: kvtier {kvtier.__version__} from {sys.argv[1]}: saved and loaded 1 chunk")
