"""Caller buffers -> (address, size) without copying, and kvtier_buf arrays for one call.

A buffer ("Buf") is one of:
  * an object exporting the buffer protocol (bytearray, bytes, memoryview, numpy array, mmap, array.array,
    ctypes array), C-contiguous. Load destinations must be writable.
      - writable objects are pinned with ctypes' (c_char * n).from_buffer(obj);
      - read-only objects (bytes, read-only memoryviews and numpy arrays, mmap opened ACCESS_READ) are
        pinned with PyObject_GetBuffer through ctypes.pythonapi and released with PyBuffer_Release.
    Neither copies: C receives the address of the caller's memory. A pin holds the buffer export, so a
    bytearray cannot be resized (BufferError) while a call or an asynchronous operation uses it;
  * a tuple (address: int, size: int) of memory the caller keeps valid;
  * an object with __cuda_array_interface__: KvtierError(NOT_SUPPORTED) until the GPU path lands.
A chunk's buffer is one Buf or a list/tuple of Bufs (pieces, filled or read in order).
"""
from __future__ import annotations

import ctypes
from typing import Any, Sequence, Union

from ._lib import KvBuf, KvtierError, Status

Buf = Any  # buffer-protocol object | tuple[int, int]
ChunkBuf = Union[Buf, Sequence[Buf]]

_PyBUF_SIMPLE = 0
_MAX_ADDRESS = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1
_MAX_SIZE = (1 << (8 * ctypes.sizeof(ctypes.c_size_t) - 1)) - 1  # what a Py_ssize_t can count


class _PyBuffer(ctypes.Structure):
    """Py_buffer (stable since Python 3.3; in the stable ABI since 3.11)."""

    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


class _ReadOnlyPin:
    """A held Py_buffer of a read-only exporter: its address stays valid until release()."""

    def __init__(self, obj: Any) -> None:
        self._view = _PyBuffer()
        _get_buffer(obj, ctypes.byref(self._view), _PyBUF_SIMPLE)  # raises BufferError if not contiguous
        self._held = True
        self.address = self._view.buf or 0
        self.size = self._view.len

    def release(self) -> None:
        if self._held:
            self._held = False
            _release_buffer(ctypes.byref(self._view))

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass


def _invalid(message: str) -> KvtierError:
    return KvtierError(Status.INVALID_ARGUMENT, message)


def _is_address_tuple(obj: Any) -> bool:
    return (isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], int)
            and isinstance(obj[1], int))


def pin(obj: Any, writable: bool) -> tuple[int, int, Any]:
    """(address, size, keepalive) of one Buf. Keep `keepalive` referenced while C may use the address."""
    if hasattr(obj, "__cuda_array_interface__"):
        raise KvtierError(Status.NOT_SUPPORTED, "GPU buffers (__cuda_array_interface__) are not supported yet")
    if _is_address_tuple(obj):
        address, size = obj
        # Both cross into C as a pointer and a size_t: out of range is refused, never wrapped.
        if (size < 0 or address < 0 or (address == 0 and size > 0) or address > _MAX_ADDRESS
                or size > _MAX_SIZE or address + size - 1 > _MAX_ADDRESS):
            raise _invalid(f"bad (address, size) buffer: ({address:#x}, {size})")
        return address, size, None
    try:
        view = memoryview(obj)
    except TypeError:
        raise _invalid(f"{type(obj).__name__} is not a buffer: pass an object exporting the buffer "
                       "protocol or an (address, size) tuple") from None
    with view:
        if not view.c_contiguous:
            raise _invalid(f"{type(obj).__name__} buffer is not C-contiguous")
        size, readonly = view.nbytes, view.readonly
    if writable and readonly:
        raise _invalid(f"{type(obj).__name__} buffer is read-only; a load needs a writable destination")
    if size == 0:
        return 0, 0, None
    if not readonly:
        array = (ctypes.c_char * size).from_buffer(obj)
        return ctypes.addressof(array), size, array
    held = _ReadOnlyPin(obj)
    return held.address, held.size, held


class Pieces:
    """The kvtier_buf array and pieces_per_chunk array of one call, and what keeps the memory alive."""

    def __init__(self, chunks: Sequence[ChunkBuf], writable: bool) -> None:
        if isinstance(chunks, (bytes, bytearray, memoryview)) or _is_address_tuple(chunks):
            raise _invalid("buffers must be a sequence with one chunk buffer (or piece list) per key")
        flat: list[tuple[int, int]] = []
        counts: list[int] = []
        self.keepalive: list[Any] = []
        for chunk in chunks:
            parts = chunk if isinstance(chunk, list) or (isinstance(chunk, tuple)
                                                         and not _is_address_tuple(chunk)) else (chunk,)
            for part in parts:
                address, size, keep = pin(part, writable)
                flat.append((address, size))
                if keep is not None:
                    self.keepalive.append(keep)
            counts.append(len(parts))
        self.count = len(counts)
        self.bufs = (KvBuf * max(len(flat), 1))(*[KvBuf(a or None, s) for a, s in flat])
        self.per_chunk = None
        if any(c != 1 for c in counts):
            self.per_chunk = (ctypes.c_size_t * max(len(counts), 1))(*counts)

    def release(self) -> None:
        """Lets go of the caller's buffers (after the operation that used them is done)."""
        for keep in self.keepalive:
            if isinstance(keep, _ReadOnlyPin):
                keep.release()
        self.keepalive = []
