"""LMCache connector: identity matrix and the regression tests of issue 22.

Call conventions as in test_lmcache.py (LMCache's native_connector_l2_adapter.py: the bridge builds
``cls(**adapter_params)``, polls ``event_fd()``, drains completions on its demux thread, calls
``submit_batch_delete`` when the connector has it -- L2 eviction -- and ``close()`` at the end).
"""

from __future__ import annotations

import itertools

from connector_helpers import file_tier, requires_library  # noqa: F401
from test_lmcache import CHUNK, TAIL, Demux, byte_array, filled, make_connector, object_key, payload

pytestmark = requires_library

MATRIX = list(itertools.product(("org/a", "org/b"), ("", "s1"), (CHUNK, TAIL)))


def set_and_wait(conn, demux, keys, views):
    (ok, err, bools), = demux.wait(conn.submit_batch_set(keys, views))
    assert ok, err
    return bools


def exists(conn, demux, keys):
    (ok, err, bools), = demux.wait(conn.submit_batch_exists(keys))
    assert ok, err
    return bools


def test_cross_configuration_matrix_misses_unless_equal(tmp_path):
    url = f"file://{tmp_path}/pool?capacity=64MiB"
    conns = []
    for model, salt, _ in MATRIX:
        conn = make_connector(tiers=[url], model_id=model, salt=salt)
        conns.append((conn, Demux(conn)))
    try:
        for x, (conn, demux) in enumerate(conns):
            size = MATRIX[x][2]
            assert set_and_wait(conn, demux, [object_key(x)], [filled(payload(x, size))]) == [True]
        for conn, _ in conns:
            conn.store.flush()
        wrong = []
        for x, (y, (conn, demux)) in itertools.product(range(len(MATRIX)), enumerate(conns)):
            size = MATRIX[x][2]
            dst = byte_array(size)
            (ok, _, bools), = demux.wait(conn.submit_batch_get([object_key(x)], [dst]))
            if x == y:
                assert ok and bytes(dst) == payload(x, size)
                assert exists(conn, demux, [object_key(x)]) == [True]
            elif ok or bools != [False]:
                wrong.append((MATRIX[x], MATRIX[y]))
        assert not wrong, f"{len(wrong)} pairs shared an object, e.g. {wrong[:3]}"
    finally:
        for conn, _ in conns:
            conn.close()


def test_exists_after_restart_without_chunk_bytes(tmp_path):
    """Issue 22: exists only knew the object sizes this process had seen (or chunk_bytes)."""
    url = f"file://{tmp_path}/pool?capacity=64MiB"
    first = make_connector(tiers=[url])
    demux = Demux(first)
    set_and_wait(first, demux, [object_key(1), object_key(2)], [filled(payload(1, CHUNK)),
                                                                 filled(payload(2, TAIL))])
    set_and_wait(first, demux, [object_key(3)], [filled(payload(3, 2048))])
    first.close()
    again = make_connector(tiers=[url])  # a new process: no chunk_bytes, no sizes seen
    try:
        assert exists(again, Demux(again), [object_key(i) for i in (1, 2, 3, 4)]) == \
            [True, True, True, False]
    finally:
        again.close()


def test_exists_right_after_set_finds_it(tmp_path):
    url = f"file://{tmp_path}/pool?capacity=64MiB"
    conn = make_connector(tiers=[url])
    demux = Demux(conn)
    try:
        for i in range(10):
            set_and_wait(conn, demux, [object_key(100 + i)], [filled(payload(100 + i, CHUNK))])
            assert exists(conn, demux, [object_key(100 + i)]) == [True]
    finally:
        conn.close()


def test_delete_removes_objects_and_usage_reports_them(tmp_path):
    """Issue 22: without submit_batch_delete LMCache's L2 eviction did nothing."""
    url = f"file://{tmp_path}/pool?capacity=64MiB"
    conn = make_connector(tiers=[url])
    demux = Demux(conn)
    try:
        set_and_wait(conn, demux, [object_key(i) for i in range(4)],
                     [filled(payload(i, CHUNK)) for i in range(4)])
        conn.store.flush()
        before = conn.get_usage()
        assert before["usage_bytes"] >= 4 * CHUNK and before["capacity_bytes"] == 64 << 20
        (ok, err, bools), = demux.wait(conn.submit_batch_delete([object_key(0), object_key(1)]))
        assert ok and bools == [True, True], err
        assert exists(conn, demux, [object_key(i) for i in range(4)]) == [False, False, True, True]
        assert conn.get_usage()["usage_bytes"] < before["usage_bytes"]
    finally:
        conn.close()
