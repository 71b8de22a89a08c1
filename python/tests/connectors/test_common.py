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
