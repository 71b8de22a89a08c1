"""Many Python threads loading and saving through one store at once (the GIL is released in C)."""
import threading

import kvtier
from conftest import CHUNK, chunk_bytes, tokens


def test_concurrent_loads_and_saves(mem_store, ns):
    n_threads, rounds = 8, 25
    barrier = threading.Barrier(n_threads)
    errors = []

    def worker(t):
        try:
            keys = ns.chunk_keys(tokens(2, first=10000 * (t + 1)))
            srcs = [chunk_bytes(t), chunk_bytes(t + 100)]
            barrier.wait()
            for _ in range(rounds):
                mem_store.save(ns, keys, srcs)
                dsts = [bytearray(CHUNK), bytearray(CHUNK)]
                assert mem_store.load(ns, keys, dsts) == 2
                assert [bytes(d) for d in dsts] == srcs
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert mem_store.stats()["loads"] >= n_threads * rounds
