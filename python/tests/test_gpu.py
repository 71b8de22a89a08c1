"""kvtier.gpu over the C API's kvtier_gpu_*: without a GPU every call says why (NotSupported), and
argument checks answer the same with or without one."""
from __future__ import annotations

import pytest

import kvtier
import kvtier.gpu as gpu
from conftest import LAYOUT


def test_available_or_a_reason():
    if gpu.available(0):
        assert gpu.why_not(0) == ""
    else:
        reason = gpu.why_not(0)
        assert reason.startswith("NotSupported")
        assert "GPU path" in reason
    assert not gpu.available(1 << 20)


def test_bad_cache_is_invalid_argument_everywhere():
    ns = kvtier.Namespace("m", LAYOUT)
    with pytest.raises(kvtier.KvtierError) as e:
        gpu.Transfer(ns, gpu.PagedCache(0, 4, 8, [1, 2], [3, 4]))  # block_tokens 8 < 16
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT
    with pytest.raises(kvtier.KvtierError) as e:
        gpu.Transfer(ns, gpu.PagedCache(0, 4, 16, [1], [3]))  # one layer of two
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT
    with pytest.raises(kvtier.KvtierError) as e:
        gpu.Transfer(ns, gpu.PagedCache(0, 4, 16, [1, 2], [3]))
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT


def test_open_without_gpu_is_not_supported():
    if gpu.available(0):
        pytest.skip("a GPU is present: scripts/gpu-e2e.sh covers the GPU path")
    ns = kvtier.Namespace("m", LAYOUT)
    with pytest.raises(kvtier.KvtierError) as e:
        gpu.Transfer(ns, gpu.PagedCache(0, 4, 16, [1, 2], [3, 4]))
    assert e.value.status == kvtier.Status.NOT_SUPPORTED


def test_load_binding_takes_after_stream_before_loaded():
    """kvtier_gpu_load_after(gpu, store, ns, keys, n, table, n_blocks, after_stream, loaded): a null gpu is
    INVALID_ARGUMENT and *loaded (the last argument, not after_stream) is reset to 0 first."""
    import ctypes
    lib = gpu._gpu_lib()
    loaded = ctypes.c_size_t(5)
    status = lib.kvtier_gpu_load_after(None, None, None, None, 0, None, 0, 0x1234, ctypes.byref(loaded))
    assert status == kvtier.Status.INVALID_ARGUMENT
    assert loaded.value == 0


def test_load_keeps_the_signature_of_earlier_releases():
    """kvtier_gpu_load(gpu, store, ns, keys, n, table, n_blocks, loaded): unchanged for callers built
    against earlier headers (it is kvtier_gpu_load_after with no stream to wait for)."""
    import ctypes
    lib = gpu._gpu_lib()
    fn = lib.kvtier_gpu_load
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 7 + [ctypes.POINTER(ctypes.c_size_t)]
    loaded = ctypes.c_size_t(5)
    assert fn(None, None, None, None, 0, None, 0, ctypes.byref(loaded)) == kvtier.Status.INVALID_ARGUMENT
    assert loaded.value == 0


def test_pinning_a_store_without_gpu_is_not_supported_and_holds_nothing(tmp_path):
    """kvtier_store_pin_host_memory: a null store or out is INVALID_ARGUMENT with *out and *regions reset;
    without a GPU, NOT_SUPPORTED (the GPU path is absent), whatever the store's tiers offer."""
    import ctypes
    lib = gpu._gpu_lib()
    out, regions = ctypes.c_void_p(0x1234), ctypes.c_size_t(7)
    assert lib.kvtier_store_pin_host_memory(None, 0, ctypes.byref(out), ctypes.byref(regions)) == \
        kvtier.Status.INVALID_ARGUMENT
    assert out.value is None and regions.value == 0
    with kvtier.Store([f"shm://pins?dir={tmp_path}&capacity=8MiB", "mem://"]) as store:
        assert lib.kvtier_store_pin_host_memory(store.handle, 0, None, None) == kvtier.Status.INVALID_ARGUMENT
        if gpu.available(0):
            with gpu.HostPins(store) as pins:
                assert pins.regions == 1  # the shm:// pool's mapping; mem:// lends from unpinned memory
            return
        with pytest.raises(kvtier.KvtierError) as e:
            gpu.HostPins(store)
        assert e.value.status == kvtier.Status.NOT_SUPPORTED


def test_pieces_transfer_checks_its_options_then_needs_a_gpu():
    """kvtier_gpu_open_pieces: any layout (a grouped MLA one here); layer_groups beyond the layers is
    INVALID_ARGUMENT with or without a GPU; without one, a good open is NOT_SUPPORTED."""
    mla = kvtier.Layout.from_spec("layers=3 tokens=16 latent:layers=0-2,dim=40,dtype=bf16")
    ns = kvtier.Namespace("m", mla)
    with pytest.raises(kvtier.KvtierError) as e:
        gpu.Transfer(ns, None, layer_groups=4)
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT
    if gpu.available(0):
        gpu.Transfer(ns, None, layer_groups=3).close()
        return
    with pytest.raises(kvtier.KvtierError) as e:
        gpu.Transfer(ns, None, layer_groups=3)
    assert e.value.status == kvtier.Status.NOT_SUPPORTED


def test_piece_bindings_check_their_arguments():
    """kvtier_gpu_load_pieces(gpu, store, ns, keys, n, pieces, n_pieces, per_chunk, groups, after_stream,
    loaded) and kvtier_gpu_save_pieces: a null gpu is INVALID_ARGUMENT and *loaded is reset first."""
    import ctypes
    lib = gpu._gpu_lib()
    loaded = ctypes.c_size_t(5)
    assert lib.kvtier_gpu_load_pieces(None, None, None, None, 0, None, 0, None, None, 0x1234,
                                      ctypes.byref(loaded)) == kvtier.Status.INVALID_ARGUMENT
    assert loaded.value == 0
    assert lib.kvtier_gpu_save_pieces(None, None, None, None, 0, None, 0, None, None, None) == \
        kvtier.Status.INVALID_ARGUMENT


def test_a_failed_load_leaves_the_last_good_one_for_the_waits():
    """kvtier_gpu_load_after that fails (here a block table too short for its chunk) after one that
    succeeded leaves the waits on the good one: the engine may still have to wait for an earlier request's
    load of the same step. Before, the failed call dropped it and every wait answered INVALID_ARGUMENT
    ("no load to wait for"). Needs a GPU (skipped with the reason here); nothing is copied (no keys in
    the good load, the failing one refused before anything is queued), so the cache's addresses are never
    touched."""
    if not gpu.available(0):
        pytest.skip(gpu.why_not(0))
    ns = kvtier.Namespace("m", LAYOUT)
    cache = gpu.PagedCache(0, 4, 16, [0x10000, 0x20000], [0x30000, 0x40000])
    with kvtier.Store(["mem://?capacity=8MiB"]) as store, gpu.Transfer(ns, cache, layer_groups=2) as t:
        assert t.load(store, ns, [], []) == 0
        with pytest.raises(kvtier.KvtierError) as e:
            t.load(store, ns, ns.chunk_keys(list(range(16))), [])
        assert e.value.status == kvtier.Status.INVALID_ARGUMENT
        t.stream_wait_layers(1, 0)   # the legacy default stream (handle 0)
        t.wait_layers(0)
        t.wait()
