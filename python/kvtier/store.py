"""Layout, Namespace, Store and Handle: the Python face of kvtier's C API.

Every call into libkvtier.so goes through ctypes.CDLL, which releases the GIL while C runs, so loads and
saves of several Python threads proceed in parallel. Failures raise KvtierError carrying the Status.
"""
from __future__ import annotations

import array
import contextlib
import ctypes
import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, TypeVar

from . import _lib
from ._buffers import ChunkBuf, Pieces
from ._lib import (KEY_BYTES, KvKey, KvLayout, KvStoreOptions, KvtierError, Status, c_text, check,
                   checked_int)

_DTYPES = {"fp32": (0, 4), "fp16": (1, 2), "bf16": (2, 2), "fp8": (3, 1)}


_H = TypeVar("_H", bound="_Handle")


class _Handle:
    """A C handle freed once by a `_free` function: close() (idempotent), context manager, finaliser.

    Calls into C hold the handle through _use(), which counts its users; close() from any thread takes
    the handle away (later calls raise KvtierError "... is closed"), waits until the calls already inside
    C have returned, and only then frees it. So a close() racing loads of other threads never frees
    memory a call is still using."""

    _handle: Any = None
    _what = "handle"

    def _set_handle(self, handle: Any) -> None:
        self._cv = threading.Condition()
        self._users = 0
        self._handle = handle

    @contextlib.contextmanager
    def _use(self) -> Iterator[Any]:
        cv = self.__dict__.get("_cv")
        if cv is None:
            raise KvtierError(Status.INVALID_ARGUMENT, f"{self._what} is closed")
        with cv:
            handle = self._handle
            if handle is None:
                raise KvtierError(Status.INVALID_ARGUMENT, f"{self._what} is closed")
            self._users += 1
        try:
            yield handle
        finally:
            with cv:
                self._users -= 1
                if self._users == 0:
                    cv.notify_all()

    def _free(self, handle: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        cv = self.__dict__.get("_cv")
        if cv is None:  # a subclass that sets _handle itself and does not count users
            handle, self._handle = self._handle, None
            if handle is not None:
                self._free(handle)
            return
        with cv:
            handle, self._handle = self._handle, None
            while self._users:
                cv.wait()
        if handle is not None:
            self._free(handle)

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


@dataclass(frozen=True)
class Layout:
    """KV geometry of one model (kvtier/layout.h, docs/models.md).

    The classic form, one K/V group over every layer: a chunk holds 2 x layers x kv_heads x head_dim x
    dtype size x tokens_per_chunk bytes; dtype is "fp32", "fp16", "bf16" or "fp8". Every other model
    family (MLA latents, sliding-window layers, per-sequence states, mixed groups) is a layout spec:
    Layout.from_spec(text) or Layout.preset(name), which set ``spec`` (its canonical text), ``layers``
    and ``tokens_per_chunk``, and leave kv_heads and head_dim at 0.
    """

    layers: int
    kv_heads: int
    head_dim: int
    dtype: str = "bf16"
    tokens_per_chunk: int = 256
    spec: str = ""

    @staticmethod
    def from_spec(text: str) -> "Layout":
        """The layout a spec describes, e.g. "layers=61 tokens=256 latent:layers=0-60,dim=576,dtype=bf16";
        a classic spec gives the classic Layout. KvtierError (INVALID_ARGUMENT) for a bad spec."""
        canonical = _canonical_spec(text)
        head, _, groups = canonical.partition(" classic:")
        fields = dict(item.split("=", 1) for item in head.split(" ")[:2])
        if groups:
            g = dict(item.split("=", 1) for item in groups.split(","))
            return Layout(int(fields["layers"]), int(g["heads"]), int(g["dim"]), g["dtype"], int(fields["tokens"]))
        return Layout(int(fields["layers"]), 0, 0, "bf16", int(fields["tokens"]), canonical)

    @staticmethod
    def preset(name: str) -> "Layout":
        """The layout of a model preset (`kvtier models`). KvtierError for an unknown name."""
        lib = _lib.lib()
        raw = c_text("name", name)
        n = lib.kvtier_preset_layout_spec(raw, None, 0)
        if n == 0:
            raise KvtierError(Status.INVALID_ARGUMENT, f"unknown model preset {name!r} (see `kvtier models`)")
        buf = ctypes.create_string_buffer(n + 1)
        lib.kvtier_preset_layout_spec(raw, buf, n + 1)
        return Layout.from_spec(buf.value.decode())

    @property
    def chunk_bytes(self) -> int:
        """Bytes of one chunk."""
        if self.spec:
            with Namespace("kvtier/layout-size", self) as ns:
                return ns.chunk_bytes
        return (2 * self.layers * self.kv_heads * self.head_dim * _dtype(self.dtype)[1]
                * self.tokens_per_chunk)

    def _c(self) -> KvLayout:
        if self.spec:
            raise KvtierError(Status.INVALID_ARGUMENT, "a layout spec has no kvtier_layout form")
        # Each field is a uint32 on the C side: a larger or negative value is refused, never wrapped
        # (2**32 + 1 layers would otherwise become 1 and share a namespace with a 1-layer layout).
        fields = [checked_int(f"Layout.{name}", getattr(self, name), "uint32")
                  for name in ("layers", "kv_heads", "head_dim", "tokens_per_chunk")]
        return KvLayout(fields[0], fields[1], fields[2], _dtype(self.dtype)[0], fields[3])


def _canonical_spec(text: str) -> str:
    """The spec as kvtier prints it (parsed and validated by the C library)."""
    lib = _lib.lib()
    handle = ctypes.c_void_p()
    check(lib.kvtier_ns_create_spec(b"kvtier/layout-spec", c_text("spec", text), None, None,
                                    ctypes.byref(handle)))
    try:
        n = lib.kvtier_ns_layout_spec(handle, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        lib.kvtier_ns_layout_spec(handle, buf, n + 1)
        return buf.value.decode()
    finally:
        lib.kvtier_ns_free(handle)


def _dtype(name: str) -> tuple[int, int]:
    try:
        return _DTYPES[name]
    except KeyError:
        raise KvtierError(Status.INVALID_ARGUMENT,
                          f"unknown dtype {name!r}; known: {', '.join(_DTYPES)}") from None


def key_of(data: bytes | str) -> bytes:
    """A 32-byte chunk key for an engine's own key (e.g. a block hash): SHA-256 of its bytes (str: UTF-8)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).digest()


def _key_array(keys: Sequence[bytes]) -> Any:
    """A kvtier_key array (copied: keys are small) from 32-byte bytes-like keys."""
    if isinstance(keys, (bytes, bytearray, memoryview)):
        raise KvtierError(Status.INVALID_ARGUMENT, "keys must be a sequence of 32-byte keys")
    joined = bytearray()
    for i, key in enumerate(keys):
        raw = bytes(key)
        if len(raw) != KEY_BYTES:
            raise KvtierError(Status.INVALID_ARGUMENT, f"key {i} has {len(raw)} bytes, not {KEY_BYTES}")
        joined += raw
    n = len(joined) // KEY_BYTES
    return (KvKey * max(n, 1)).from_buffer_copy(joined or bytes(KEY_BYTES)), n


def _tokens_array(tokens: Any) -> array.array:
    """Tokens as an array.array('I'): from ints, or from a buffer of 4-byte integers (uint32; int32 is
    taken as is). Copied: token arrays are small next to chunks."""
    try:
        view = memoryview(tokens)
    except TypeError:
        try:
            return array.array("I", tokens)
        except (OverflowError, TypeError) as e:
            raise KvtierError(Status.INVALID_ARGUMENT, f"tokens must be uint32 values: {e}") from None
    with view:
        if view.itemsize != 4 or view.format[-1:] not in ("I", "i"):
            raise KvtierError(Status.INVALID_ARGUMENT,
                              f"token buffer must hold uint32 values, not format {view.format!r}")
        out = array.array("I")
        out.frombytes(view.tobytes())
        return out


def _uint32_pointer(values: array.array) -> Any:
    if not values:
        return None
    return ctypes.cast((ctypes.c_uint32 * len(values)).from_buffer(values), ctypes.POINTER(ctypes.c_uint32))


class Namespace(_Handle):
    """A model's namespace: chunk keys of one (model, layout, tenant, salt) never collide with another's.

    Create with Namespace(model_id, layout, tenant="", salt="") or Store.namespace(...). Immutable;
    usable from many threads; close() (or the context manager) frees it. Keep it open while an
    asynchronous operation that uses it runs (its Handle holds a reference).
    """

    _what = "namespace"

    def __init__(self, model_id: str, layout: Layout, tenant: str = "", salt: str = "") -> None:
        lib = _lib.lib()
        self.layout = layout
        # Strings go with their lengths (kvtier_ns_create_n); a NUL in one is refused, here and in C.
        model, ten, slt = c_text("model_id", model_id), c_text("tenant", tenant), c_text("salt", salt)
        handle = ctypes.c_void_p()
        if layout.spec:
            check(lib.kvtier_ns_create_spec(model, c_text("spec", layout.spec), ten, slt, ctypes.byref(handle)))
        else:
            c_layout = layout._c()
            check(lib.kvtier_ns_create_n(model, len(model), ctypes.byref(c_layout), ten, len(ten), slt,
                                         len(slt), ctypes.byref(handle)))
        self._adopt(handle.value, layout)

    def _adopt(self, handle: int, layout: Layout) -> None:
        """Takes a kvtier_ns* just created (by any of the C constructors): a counted handle, so close()
        waits for the calls inside C, and the figures read from it."""
        lib = _lib.lib()
        self.layout = layout
        self._set_handle(handle)
        self.chunk_bytes: int = lib.kvtier_ns_chunk_bytes(handle)
        self.tokens_per_chunk: int = lib.kvtier_ns_tokens_per_chunk(handle)
        raw = (ctypes.c_uint8 * KEY_BYTES)()
        lib.kvtier_ns_id(handle, raw)
        self.id: str = bytes(raw).hex()

    @property
    def handle(self) -> int:
        """The kvtier_ns* (KvtierError once closed)."""
        if self._handle is None:
            raise KvtierError(Status.INVALID_ARGUMENT, "namespace is closed")
        return self._handle

    def chunk_keys(self, tokens: Any) -> list[bytes]:
        """32-byte keys of every full chunk of `tokens` (a sequence of ints or a buffer of uint32)."""
        values = _tokens_array(tokens)
        cap = len(values) // self.tokens_per_chunk
        out = (KvKey * max(cap, 1))()
        with self._use() as handle:
            n = _lib.lib().kvtier_chunk_keys(handle, _uint32_pointer(values), len(values), out, cap)
        if n > cap:
            raise KvtierError(Status.INTERNAL, f"kvtier_chunk_keys wants {n} keys, expected {cap}")
        raw = bytes(out)
        return [raw[i * KEY_BYTES:(i + 1) * KEY_BYTES] for i in range(n)]

    def next_chunk_key(self, prev: Optional[bytes], tokens: Any) -> bytes:
        """Key of the chunk after `prev` (None for the first) holding exactly tokens_per_chunk tokens."""
        values = _tokens_array(tokens)
        prev_key = None
        if prev is not None:
            prev_key, _ = _key_array([prev])
        out = KvKey()
        with self._use() as handle:
            check(_lib.lib().kvtier_next_chunk_key(handle, prev_key, _uint32_pointer(values), len(values),
                                                   ctypes.byref(out)))
        return bytes(out)

    def _free(self, handle: Any) -> None:
        """close() frees the namespace; idempotent."""
        _lib.lib().kvtier_ns_free(handle)

    def __repr__(self) -> str:
        return f"Namespace(id={self.id[:16]}..., layout={self.layout})"


class Handle:
    """An asynchronous load or save. Keeps the key array and the caller's buffers alive until the
    operation is done; wait() returns the count (chunks loaded or saved).

    done() never blocks. wait(timeout) raises KvtierError(BUSY) when the timeout passes first and
    KvtierError(status) when the operation failed. close() (or the context manager) waits, then frees
    the operation. A handle dropped while its operation runs is freed on garbage collection, which
    waits for the operation first, so no buffer is released while kvtier may still write into it.
    """

    def __init__(self, op: int, keepalive: tuple) -> None:
        self._op: Optional[int] = op
        self._keepalive: Optional[tuple] = keepalive
        self._result: Optional[tuple[int, int, str]] = None  # (status, count, message)
        self._lock = threading.Condition()
        self._users = 0

    def _enter(self) -> Optional[int]:
        with self._lock:
            if self._op is not None:
                self._users += 1
            return self._op

    def _leave(self) -> None:
        with self._lock:
            self._users -= 1
            self._lock.notify_all()

    def done(self) -> bool:
        """True once the operation finished (successfully or not); never blocks."""
        op = self._enter()
        if op is None:
            return True
        try:
            return bool(_lib.lib().kvtier_op_done(op))
        finally:
            self._leave()

    def wait(self, timeout: Optional[float] = None) -> int:
        """Blocks until done or `timeout` seconds passed (None: no limit) and returns the count."""
        op = self._enter()
        if op is not None:
            try:
                self._wait_op(op, timeout)
            finally:
                self._leave()
        status, count, message = self._result  # type: ignore[misc]
        if status != Status.OK:
            raise KvtierError(status, message)
        return count

    def _wait_op(self, op: int, timeout: Optional[float]) -> None:
        lib = _lib.lib()
        if timeout is not None and not timeout >= 0:  # negative or NaN
            raise KvtierError(Status.INVALID_ARGUMENT, f"timeout must be >= 0 seconds, not {timeout}")
        ms = -1 if timeout is None else min(int(timeout * 1000), (1 << 63) - 1)
        status = lib.kvtier_op_wait(op, ms)
        if status == Status.BUSY and ms >= 0:
            # Not finished in time (or the operation's own Busy): nothing cached, a later wait asks again.
            raise KvtierError(Status.BUSY, _lib.last_error() or f"operation not done after {timeout} s")
        message = lib.kvtier_op_error(op)
        with self._lock:
            if self._result is None:
                self._result = (status, lib.kvtier_op_count(op),
                                message.decode("utf-8", "replace") if message else "")

    def wait_bytes(self, nbytes: int, timeout: Optional[float] = None) -> int:
        """Of a load: blocks until the first ``nbytes`` bytes of every chunk are verified and in the
        buffers (a chunk holds layer 0 K, layer 0 V, layer 1 K, ...), until the load is done, or until
        ``timeout`` seconds passed (KvtierError(BUSY)); returns how many leading chunks have their first
        ``nbytes`` bytes in place (once done, only chunks it loaded). A chunk that fails after its first
        bytes landed is zeroed and not counted by wait(): whoever used those bytes recomputes it."""
        nbytes = checked_int("nbytes", nbytes, "uint64", minimum=0)
        if timeout is not None and not timeout >= 0:
            raise KvtierError(Status.INVALID_ARGUMENT, f"timeout must be >= 0 seconds, not {timeout}")
        ms = -1 if timeout is None else min(int(timeout * 1000), (1 << 63) - 1)
        op = self._enter()
        if op is None:  # closed: the load is over and its count final
            status, count, message = self._result  # type: ignore[misc]
            return count if status == Status.OK else 0
        try:
            ready = ctypes.c_size_t()
            check(_lib.lib().kvtier_op_wait_bytes(op, nbytes, ms, ctypes.byref(ready)))
            return ready.value
        finally:
            self._leave()

    def result(self) -> int:
        """Same as wait()."""
        return self.wait()

    def close(self) -> None:
        """Waits for the operation, frees it and lets go of the buffers; idempotent."""
        op = self._enter()
        if op is not None:
            try:
                self._wait_op(op, None)
            finally:
                self._leave()
        with self._lock:
            while self._users:
                self._lock.wait()
            op, self._op = self._op, None
            keepalive, self._keepalive = self._keepalive, None
        if op is not None:
            _lib.lib().kvtier_op_free(op)
        if keepalive is not None:
            keepalive[0].release()

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        op, self._op = getattr(self, "_op", None), None
        if op is not None:
            try:
                _lib.lib().kvtier_op_free(op)  # waits for a running operation before freeing it
            except Exception:  # interpreter shutdown
                pass


class Store(_Handle):
    """A kvtier Store over tiers (URLs, fastest first), e.g. ["mem://?capacity=4GiB",
    "file:///var/lib/kvtier?capacity=200GiB"]. Thread-safe: many threads may load and save at once.
    close() (or the context manager) waits for asynchronous operations and background writes.

    Buffers: see kvtier._buffers. `dsts` / `srcs` hold one chunk buffer (or list of pieces) per key, each
    of exactly ns.chunk_bytes bytes (KvtierError(INVALID_ARGUMENT) otherwise). Nothing is copied in Python.
    """

    def __init__(self, tiers: Sequence[str], *, promote_on_load: bool = True,
                 admit_on_second_use: bool = False, save_queue_bytes: int = 1 << 30,
                 save_queue_chunks: int = 4096, background_threads: int = 8, async_threads: int = 4,
                 key_file: Optional[str] = None, events: Optional[str] = None,
                 events_topic: Optional[str] = None) -> None:
        """`events`: a ZeroMQ endpoint ("tcp://127.0.0.1:5557") the store publishes its chunk events on
        (stored, removed, evicted; msgpack in the shape of vLLM's KV event batches, docs/serve.md);
        `events_topic`: the first frame of each message (default "kvtier")."""
        if isinstance(tiers, str):
            tiers = [tiers]
        lib = _lib.lib()
        opts = KvStoreOptions()
        lib.kvtier_store_options_init(ctypes.byref(opts))
        # Every value is checked against its C type here: nothing is cut at a NUL or wrapped.
        encoded = [c_text(f"tiers[{i}]", t) for i, t in enumerate(tiers)]
        urls = (ctypes.c_char_p * max(len(encoded), 1))(*encoded)
        opts.tiers = ctypes.cast(urls, ctypes.POINTER(ctypes.c_char_p))
        opts.tier_count = len(encoded)
        opts.promote_on_load = int(bool(promote_on_load))
        opts.admit_on_second_use = int(bool(admit_on_second_use))
        opts.save_queue_bytes = checked_int("save_queue_bytes", save_queue_bytes, "uint64")
        opts.save_queue_chunks = checked_int("save_queue_chunks", save_queue_chunks, "uint32")
        opts.background_threads = checked_int("background_threads", background_threads, "uint32")
        opts.async_threads = checked_int("async_threads", async_threads, "uint32")
        opts.key_file = c_text("key_file", key_file) if key_file else None
        opts.events = c_text("events", events) if events else None
        opts.events_topic = c_text("events_topic", events_topic) if events_topic else None
        handle = ctypes.c_void_p()
        check(lib.kvtier_store_open(ctypes.byref(opts), ctypes.byref(handle)))
        self._set_handle(handle.value)
        self.tiers = list(tiers)

    _what = "store"

    @property
    def handle(self) -> int:
        """The kvtier_store* (KvtierError once closed)."""
        if self._handle is None:
            raise KvtierError(Status.INVALID_ARGUMENT, "store is closed")
        return self._handle

    def namespace(self, model_id: str, layout: Layout, tenant: str = "", salt: str = "") -> Namespace:
        """A Namespace (the same as Namespace(model_id, layout, tenant, salt))."""
        return Namespace(model_id, layout, tenant, salt)

    def lookup(self, ns: Namespace, keys: Sequence[bytes]) -> int:
        """Number of leading keys present in some tier (a later load may still return fewer)."""
        arr, n = _key_array(keys)
        with self._use() as handle, ns._use() as ns_handle:
            return _lib.lib().kvtier_lookup(handle, ns_handle, arr, n)

    def load(self, ns: Namespace, keys: Sequence[bytes], dsts: Sequence[ChunkBuf]) -> int:
        """Loads chunks into dsts, verified; returns how many leading chunks were loaded. Destinations of
        chunks read but not loaded (after a miss or a corrupt chunk) are zeroed."""
        arr, n = _key_array(keys)
        pieces = self._pieces(dsts, n, writable=True)
        loaded = ctypes.c_size_t()
        try:
            with self._use() as handle, ns._use() as ns_handle:
                check(_lib.lib().kvtier_load(handle, ns_handle, arr, n, pieces.bufs, pieces.per_chunk,
                                             ctypes.byref(loaded)))
        finally:
            pieces.release()
        return loaded.value

    def save(self, ns: Namespace, keys: Sequence[bytes], srcs: Sequence[ChunkBuf]) -> None:
        """Copies each chunk into the top tier; lower tiers are written in the background."""
        arr, n = _key_array(keys)
        pieces = self._pieces(srcs, n, writable=False)
        try:
            with self._use() as handle, ns._use() as ns_handle:
                check(_lib.lib().kvtier_save(handle, ns_handle, arr, n, pieces.bufs, pieces.per_chunk))
        finally:
            pieces.release()

    def load_async(self, ns: Namespace, keys: Sequence[bytes], dsts: Sequence[ChunkBuf],
                   notify_fd: int = -1) -> Handle:
        """Starts a load and returns at once; Handle.wait() gives the count loaded. When notify_fd >= 0
        (an eventfd) kvtier writes the 8-byte value 1 to it once done."""
        return self._start(_lib.lib().kvtier_load_async, ns, keys, dsts, True, notify_fd)

    def save_async(self, ns: Namespace, keys: Sequence[bytes], srcs: Sequence[ChunkBuf],
                   notify_fd: int = -1) -> Handle:
        """Starts a save and returns at once; Handle.wait() gives the count saved."""
        return self._start(_lib.lib().kvtier_save_async, ns, keys, srcs, False, notify_fd)

    def _start(self, fn: Any, ns: Namespace, keys: Sequence[bytes], bufs: Sequence[ChunkBuf],
               writable: bool, notify_fd: int) -> Handle:
        notify_fd = checked_int("notify_fd", notify_fd, "int", minimum=-1)
        arr, n = _key_array(keys)
        pieces = self._pieces(bufs, n, writable)
        op = ctypes.c_void_p()
        try:
            with self._use() as handle, ns._use() as ns_handle:
                check(fn(handle, ns_handle, arr, n, pieces.bufs, pieces.per_chunk, notify_fd,
                         ctypes.byref(op)))
        except BaseException:
            pieces.release()
            raise
        return Handle(op.value, (pieces, arr, ns, self))

    @staticmethod
    def _pieces(bufs: Sequence[ChunkBuf], n_keys: int, writable: bool) -> Pieces:
        pieces = Pieces(bufs, writable)
        if pieces.count != n_keys:
            pieces.release()
            raise KvtierError(Status.INVALID_ARGUMENT,
                              f"{n_keys} keys but {pieces.count} chunk buffers")
        return pieces

    def prefetch(self, ns: Namespace, keys: Sequence[bytes]) -> None:
        """Promotes the leading available chunks into the top tier in the background."""
        arr, n = _key_array(keys)
        with self._use() as handle, ns._use() as ns_handle:
            _lib.lib().kvtier_prefetch(handle, ns_handle, arr, n)

    def remove(self, ns: Namespace, keys: Sequence[bytes]) -> None:
        """Removes the chunks of `keys` from every tier (an engine's own eviction; kvtier_remove)."""
        arr, n = _key_array(keys)
        with self._use() as handle, ns._use() as ns_handle:
            check(_lib.lib().kvtier_remove(handle, ns_handle, arr, n))

    def flush(self) -> None:
        """Waits for every queued background write, then flushes every tier."""
        with self._use() as handle:
            check(_lib.lib().kvtier_store_flush(handle))

    def stats(self) -> dict:
        """The store's statistics (the fields of kvtier::StoreStats) as a dict."""
        with self._use() as handle:
            return json.loads(_lib.read_text(_lib.lib().kvtier_store_stats_json, handle))

    def metrics_text(self) -> str:
        """Counters and latency histograms in the Prometheus text exposition format (kvtier_*)."""
        with self._use() as handle:
            return _lib.read_text(_lib.lib().kvtier_store_metrics_text, handle)

    def _free(self, handle: Any) -> None:
        """close() waits for asynchronous operations and background writes, then frees the store;
        idempotent. Handles of operations still open stay valid."""
        _lib.lib().kvtier_store_close(handle)
