"""I/O submission of the LMCache connector: gets and sets started on kvtier (one async call per object
size, waking the eventfd), exists checks and deletes on its thread pool, and the completions
``drain_completions`` reports (the package docstring has the result conventions)."""

from __future__ import annotations

import os
from typing import Any, List, Sequence

import kvtier

from .. import engine_key, group_by_size, remove_keys
from .._pending import PRESENT
from .ops import Completion, Op


class Submission:
    """The operations of ``KvtierNativeConnector`` (over its store, lock, eventfd, thread pool,
    in-flight set and the namespaces of ``identity.SizeRegistry``)."""

    def _add(self, op: Op) -> int:
        future_id = self._next_id
        self._next_id += 1
        self._ops[future_id] = op
        return future_id

    def _signal(self) -> None:
        if not self._closed:
            try:
                os.eventfd_write(self._efd, 1)
            except OSError:  # closed meanwhile
                pass

    def _failed(self, kind: str, n_keys: int, error: str) -> int:
        """A future id whose completion is a failure (an operation that could not start)."""
        op = Op(kind, n_keys, error=error)
        with self._lock:
            future_id = self._add(op)
        self._signal()
        return future_id

    def _submit_task(self, kind: str, keys: Sequence[str], fn: Any) -> int:
        if self._closed:
            return self._failed(kind, len(keys), "the kvtier connector is closed")
        try:
            kv_keys = [engine_key(k) for k in keys]
        except (TypeError, ValueError) as e:
            return self._failed(kind, len(keys), str(e))
        op = Op(kind, len(kv_keys))
        with self._lock:
            future_id = self._add(op)
            try:
                op.future = self._exists_pool.submit(fn, kv_keys)
            except RuntimeError as e:  # the pool shut down meanwhile
                op.error = str(e)
        if op.future is not None:
            op.future.add_done_callback(lambda _f: self._signal())
        else:
            self._signal()
        return future_id

    def _submit_io(self, kind: str, keys: Sequence[str], views: Sequence[Any]) -> int:
        if self._closed:
            return self._failed(kind, len(keys), "the kvtier connector is closed")
        try:
            if len(keys) != len(views):
                raise ValueError(f"{len(keys)} keys but {len(views)} buffers")
            kv_keys = [engine_key(k) for k in keys]
            sizes = [memoryview(v).nbytes for v in views]
        except (TypeError, ValueError) as e:  # never raise into LMCache's thread: a failed completion
            return self._failed(kind, len(keys), str(e))
        op = Op(kind, len(kv_keys), kv_keys=kv_keys if kind == "set" else [])
        try:
            if kind == "set":
                for size in set(sizes):
                    self._register_size(size)
        except (kvtier.KvtierError, ValueError) as e:
            op.error = str(e)
        with self._lock:
            future_id = self._add(op)
            try:
                for size, positions in ([] if op.error else group_by_size(sizes).items()):
                    ns = self._ns(size)
                    ks = [kv_keys[i] for i in positions]
                    bufs = [views[i] for i in positions]
                    start = self._store.load_async if kind == "get" else self._store.save_async
                    handle = start(ns, ks, bufs, notify_fd=self._efd)
                    op.handles.append((positions, handle))
                    if kind == "set":
                        self._pending.started(ks, handle.done)
            except (kvtier.KvtierError, ValueError) as e:
                op.error = str(e)
        if op.error:
            self._signal()  # report the failure through the usual path
        return future_id

    def _exists(self, kv_keys: List[bytes]) -> List[bool]:
        self._read_registry()  # sizes other processes registered since
        with self._lock:
            namespaces = list(self._namespaces.values())
        found = [False] * len(kv_keys)
        for i, k in enumerate(kv_keys):
            for ns in namespaces:
                if self._store.lookup(ns, [k]) == 1:
                    found[i] = True
                    break
            if not found[i] and k in self._pending:  # this process stored it: wait until visible
                found[i] = any(self._pending.wait(ns, k) == PRESENT for ns in namespaces)
        return found

    def _get_after_writes(self, kv_keys: List[bytes], views: Sequence[Any]) -> List[bool]:
        """A get whose keys include some this process stored: each such key is waited for until its
        write settled (``PendingWrites.wait``), then the objects are loaded as a get loads them."""
        results = [False] * len(kv_keys)
        for size, positions in group_by_size([memoryview(v).nbytes for v in views]).items():
            ns = self._ns(size)
            ks = [kv_keys[i] for i in positions]
            for k in ks:
                if k in self._pending:
                    self._pending.wait(ns, k)
            handle = self._store.load_async(ns, ks, [views[i] for i in positions])
            try:
                count = int(handle.wait())
            finally:
                handle.close()
            for j, pos in enumerate(positions):
                results[pos] = j < count
        return results

    def _delete(self, kv_keys: List[bytes]) -> List[bool]:
        with self._lock:
            namespaces = list(self._namespaces.values())
        self._pending.forget(kv_keys)
        for ns in namespaces:
            remove_keys(self._store, ns, kv_keys)
        return [True] * len(kv_keys)

    @staticmethod
    def _op_done(op: Op) -> bool:
        if op.future is not None:
            return op.future.done()
        return all(handle.done() for _, handle in op.handles)

    def _complete(self, future_id: int, op: Op) -> Completion:
        if op.future is not None or (op.kind in ("exists", "delete")):
            if op.future is None:
                return (future_id, False, op.error, None)
            try:
                results = op.future.result()
            except Exception as e:  # a failed check is an unanswered one: report it, keep running
                return (future_id, False, str(e), [False] * op.n_keys if op.kind == "get" else None)
            if op.kind == "get" and not all(results):
                return (future_id, False, f"{results.count(False)} of {op.n_keys} objects not loaded", results)
            return (future_id, True, "", results)
        results = [False] * op.n_keys
        errors = [op.error] if op.error else []
        for positions, handle in op.handles:
            try:
                count = int(handle.wait())
            except kvtier.KvtierError as e:
                count = 0
                errors.append(str(e))
            finally:
                handle.close()
            for j, pos in enumerate(positions):
                results[pos] = j < count
        if op.kind == "set":  # keys not stored are not waited for by exists
            self._pending.forget([k for k, ok in zip(op.kv_keys, results) if not ok])
        ok = not errors and all(results)
        if not ok and not errors:
            errors.append(f"{results.count(False)} of {op.n_keys} objects not "
                          f"{'loaded' if op.kind == 'get' else 'stored'}")
        return (future_id, ok, "; ".join(errors), results)
