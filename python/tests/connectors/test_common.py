"""The helpers every connector shares: engine keys and the one-dimensional block layout."""

from __future__ import annotations

import pytest

from connector_helpers import requires_library

pytestmark = requires_library


def test_engine_keys_of_each_type_are_distinct_32_byte_keys():
    from kvtier.connectors import engine_key
    keys = [engine_key(k) for k in (b"\x05", "5", 5, -5, 2**200, b"block", "block")]
    assert all(len(k) == 32 for k in keys)
    assert len(set(keys[:5])) == 5  # bytes, str and int forms of "5" never collide
    assert keys[5] == keys[6]       # the same text as bytes or str names the same block
    assert engine_key(bytearray(b"\x05")) == keys[0] == engine_key(memoryview(b"\x05"))
    for bad in (True, 1.5, None):
        with pytest.raises(TypeError):
            engine_key(bad)


@pytest.mark.parametrize("nbytes", [2, 4096, 2 * 1024 * 1024, 12345 * 2])
def test_byte_layout_chunk_is_exactly_the_block(nbytes):
    from kvtier.connectors import byte_layout
    assert byte_layout(nbytes).chunk_bytes == nbytes


@pytest.mark.parametrize("nbytes", [0, -2, 3])
def test_byte_layout_refuses_odd_or_empty_blocks(nbytes):
    from kvtier.connectors import byte_layout
    with pytest.raises(ValueError):
        byte_layout(nbytes)


def test_tier_urls_accept_a_list_or_a_comma_separated_string():
    from kvtier.connectors import tier_urls
    assert tier_urls("mem://?capacity=1GiB, file:///x") == ["mem://?capacity=1GiB", "file:///x"]
    assert tier_urls(["mem://"]) == ["mem://"]
    for bad in (None, "", []):
        with pytest.raises(ValueError):
            tier_urls(bad)


def test_identity_namespaces_keep_the_boundary_rules_of_every_namespace():
    """A namespace made from an identity refuses a tenant holding NUL (it would name another tenant
    once cut by C) and, once closed, refuses use with a clear error instead of a freed handle."""
    import kvtier
    from kvtier import EngineIdentity
    ident = EngineIdentity(engine="test", model="m", layout="x")
    layout = kvtier.Layout(2, 2, 8, "fp16", 16)
    with pytest.raises(kvtier.KvtierError) as e:
        ident.namespace(layout, tenant="a\0b")
    assert e.value.status == kvtier.Status.INVALID_ARGUMENT
    ns = ident.namespace(layout, tenant="a")
    assert ns.id != ident.namespace(layout, tenant="b").id
    keys = ns.chunk_keys(list(range(32)))
    assert len(keys) == 2
    ns.close()
    with pytest.raises(kvtier.KvtierError, match="closed"):
        ns.chunk_keys(list(range(32)))
