"""Layouts of every model family (kvtier/layout.h): specs, presets, namespaces, a round trip."""
import pytest

import kvtier

# Every kind of group (docs/models.md): window layers 0 and 2, full layers 1 and 3 with K and V head
# dims that differ, an MLA latent on layer 4, a per-sequence state on layer 5.
MIXED = ("layers=6 tokens=16 window:layers=0+2,heads=4,dim=8,window=4,dtype=bf16 "
         "kv:layers=1+3,heads=4,dim=16,v_dim=8,dtype=bf16 latent:layers=4,dim=24,dtype=fp8 "
         "state:layers=5,bytes=100,dtype=fp32")


def test_spec_round_trip_and_sizes():
    layout = kvtier.Layout.from_spec(MIXED)
    assert layout.spec == MIXED
    assert (layout.layers, layout.tokens_per_chunk, layout.kv_heads, layout.head_dim) == (6, 16, 0, 0)
    per_token = 2 * 4 * 16 * 2 + 2 * 4 * 24 * 2 + 24
    assert layout.chunk_bytes == per_token * 16 + 100
    assert kvtier.Layout.from_spec(" ".join(MIXED.split(" "))) == layout


def test_classic_spec_is_the_classic_layout():
    classic = kvtier.Layout(32, 8, 128)
    assert kvtier.Layout.from_spec("layers=32 tokens=256 classic:heads=8,dim=128,dtype=bf16") == classic
    assert kvtier.Layout.preset("llama-3.1-8b") == classic
    with kvtier.Namespace("m", classic) as a, kvtier.Namespace("m", kvtier.Layout.preset("llama-3.1-8b")) as b:
        assert a.id == b.id


def test_bad_specs_and_presets():
    for spec in ["", "layers=2 tokens=16", "layers=2 tokens=16 latent:layers=0,dim=8,dtype=bf16",
                 "layers=2 tokens=16 kv:layers=0-1,heads=2,dim=8,dtype=int4"]:
        with pytest.raises(kvtier.KvtierError) as e:
            kvtier.Layout.from_spec(spec)
        assert e.value.status == kvtier.Status.INVALID_ARGUMENT
    with pytest.raises(kvtier.KvtierError):
        kvtier.Layout.preset("gpt-17")
    with pytest.raises(kvtier.KvtierError):
        kvtier.Layout.from_spec(MIXED)._c()  # no kvtier_layout form


def test_grouped_namespace_round_trip():
    layout = kvtier.Layout.from_spec(MIXED)
    with kvtier.Store(["mem://?capacity=16MiB"]) as store, store.namespace("test/mixed", layout) as ns:
        assert ns.chunk_bytes == layout.chunk_bytes and ns.tokens_per_chunk == 16
        with kvtier.Namespace("test/mixed", kvtier.Layout(6, 4, 8, "bf16", 16)) as classic:
            assert classic.id != ns.id  # a layout of another shape never shares chunks
        keys = ns.chunk_keys(list(range(32)))
        src = [bytes((i * 7 + j) % 256 for j in range(ns.chunk_bytes)) for i in range(2)]
        store.save(ns, keys, src)
        dst = [bytearray(ns.chunk_bytes) for _ in keys]
        assert store.load(ns, keys, dst) == 2
        assert [bytes(d) for d in dst] == src


def test_identity_namespace_with_a_spec():
    ident = kvtier.EngineIdentity(engine="test", model="test/mixed")
    layout = kvtier.Layout.from_spec(MIXED)
    with ident.namespace(layout) as a, ident.namespace(layout) as b:
        assert a.id == b.id and a.chunk_bytes == layout.chunk_bytes
