"""ctypes bindings of libkvtier.so (include/kvtier/kvtier.h): every function with argtypes and restype.

The library is found in this order:
  1. the path in the environment variable KVTIER_LIBRARY;
  2. libkvtier.so next to this file (copied there by `make python`, shipped by an installed package);
  3. <repository>/build/src/capi/libkvtier.so (a source checkout built with CMake);
  4. the installed library, by its SONAME libkvtier.so.<ABI_VERSION> through the dynamic loader (the
     .deb's /usr/lib, `cmake --install` into a prefix in ld.so.conf, or LD_LIBRARY_PATH).
It is loaded with ctypes.CDLL, which releases the GIL for the duration of every call, so loads and saves
of different threads run in parallel. kvtier_abi_version() must equal ABI_VERSION.
"""
from __future__ import annotations

import ctypes
import enum
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_int, c_int64, c_size_t, c_uint8, c_uint32,
                    c_uint64, c_void_p)
from pathlib import Path
from typing import Any, Optional

ABI_VERSION = 1
KEY_BYTES = 32


class Status(enum.IntEnum):
    """kvtier_status: the same values as kvtier::Code."""

    OK = 0
    NOT_FOUND = 1
    CORRUPTION = 2
    INVALID_ARGUMENT = 3
    IO_ERROR = 4
    NO_SPACE = 5
    BUSY = 6
    NOT_SUPPORTED = 7
    VERSION_MISMATCH = 8
    INTERNAL = 9


_STATUS_NAMES = {
    Status.OK: "OK", Status.NOT_FOUND: "NotFound", Status.CORRUPTION: "Corruption",
    Status.INVALID_ARGUMENT: "InvalidArgument", Status.IO_ERROR: "IOError", Status.NO_SPACE: "NoSpace",
    Status.BUSY: "Busy", Status.NOT_SUPPORTED: "NotSupported", Status.VERSION_MISMATCH: "VersionMismatch",
    Status.INTERNAL: "Internal",
}


class KvtierError(Exception):
    """A failed kvtier call. `status` is the kvtier Status; str(e) is "<StatusName>: <message>"."""

    def __init__(self, status: int, message: str = "") -> None:
        try:
            self.status = Status(status)
        except ValueError:
            self.status = Status.INTERNAL
        name = _STATUS_NAMES[self.status]
        if message.startswith(name + ": "):  # the C side's text often names the status already
            message = message[len(name) + 2:]
        self.message = message
        super().__init__(f"{name}: {message}")


class KvtierOverflowError(KvtierError, OverflowError):
    """An integer outside the range of the C type it is passed as (never wrapped): both a KvtierError
    (status INVALID_ARGUMENT) and an OverflowError."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.INVALID_ARGUMENT, message)


_RANGES = {"uint32": (0, (1 << 32) - 1), "uint64": (0, (1 << 64) - 1), "size_t": (0, (1 << 64) - 1),
           "int": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1)}


def checked_int(name: str, value: Any, ctype: str, minimum: Optional[int] = None) -> int:
    """`value` as an int within the range of C type `ctype` (and >= minimum): KvtierError
    (INVALID_ARGUMENT) for a non-integer (bool included), KvtierOverflowError outside the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise KvtierError(Status.INVALID_ARGUMENT, f"{name} must be an int, not {type(value).__name__}")
    lo, hi = _RANGES[ctype]
    if minimum is not None:
        lo = max(lo, minimum)
    if not lo <= value <= hi:
        raise KvtierOverflowError(f"{name}={value} is outside [{lo}, {hi}] ({ctype})")
    return value


def c_text(name: str, value: Any) -> bytes:
    """A str (UTF-8) or bytes argument as bytes without NUL: a NUL would end the string on the C side,
    so two different values would name the same thing. KvtierError(INVALID_ARGUMENT) otherwise."""
    if isinstance(value, str):
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise KvtierError(Status.INVALID_ARGUMENT, f"{name} is not valid UTF-8: {e}") from None
    elif isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    else:
        raise KvtierError(Status.INVALID_ARGUMENT, f"{name} must be a str, not {type(value).__name__}")
    if b"\0" in raw:
        raise KvtierError(Status.INVALID_ARGUMENT, f"{name} contains a NUL character: {value!r}")
    return raw


class KvKey(Structure):
    """kvtier_key: 32 bytes."""

    _fields_ = [("bytes", c_uint8 * KEY_BYTES)]


class KvLayout(Structure):
    """kvtier_layout."""

    _fields_ = [("layers", c_uint32), ("kv_heads", c_uint32), ("head_dim", c_uint32),
                ("dtype", c_uint32), ("tokens_per_chunk", c_uint32)]


class KvBuf(Structure):
    """kvtier_buf: one caller buffer."""

    _fields_ = [("data", c_void_p), ("size", c_size_t)]


class KvStoreOptions(Structure):
    """kvtier_store_options."""

    _fields_ = [("struct_size", c_uint32), ("tiers", POINTER(c_char_p)), ("tier_count", c_size_t),
                ("promote_on_load", c_int), ("admit_on_second_use", c_int),
                ("save_queue_bytes", c_uint64), ("save_queue_chunks", c_uint32),
                ("background_threads", c_uint32), ("async_threads", c_uint32), ("key_file", c_char_p),
                ("events", c_char_p), ("events_topic", c_char_p)]


_NS = c_void_p     # kvtier_ns*
_STORE = c_void_p  # kvtier_store*
_OP = c_void_p     # kvtier_op*
_KEYS = POINTER(KvKey)
_BUFS = POINTER(KvBuf)
_SIZES = POINTER(c_size_t)
_STATUS = c_int

# name: (restype, argtypes). Every function of kvtier.h.
_SIGNATURES = {
    "kvtier_version": (c_char_p, []),
    "kvtier_abi_version": (c_uint32, []),
    "kvtier_status_name": (c_char_p, [c_int]),
    "kvtier_last_error": (c_char_p, []),
    "kvtier_ns_create": (_STATUS, [c_char_p, POINTER(KvLayout), c_char_p, c_char_p, POINTER(_NS)]),
    "kvtier_ns_create_n": (_STATUS, [c_char_p, c_size_t, POINTER(KvLayout), c_char_p, c_size_t, c_char_p,
                                     c_size_t, POINTER(_NS)]),
    "kvtier_ns_free": (None, [_NS]),
    "kvtier_ns_chunk_bytes": (c_uint64, [_NS]),
    "kvtier_ns_tokens_per_chunk": (c_uint32, [_NS]),
    "kvtier_ns_id": (None, [_NS, POINTER(c_uint8)]),
    "kvtier_chunk_keys": (c_size_t, [_NS, POINTER(c_uint32), c_size_t, _KEYS, c_size_t]),
    "kvtier_next_chunk_key": (_STATUS, [_NS, _KEYS, POINTER(c_uint32), c_size_t, _KEYS]),
    "kvtier_store_options_init": (None, [POINTER(KvStoreOptions)]),
    "kvtier_store_open": (_STATUS, [POINTER(KvStoreOptions), POINTER(_STORE)]),
    "kvtier_store_close": (None, [_STORE]),
    "kvtier_store_flush": (_STATUS, [_STORE]),
    "kvtier_lookup": (c_size_t, [_STORE, _NS, _KEYS, c_size_t]),
    "kvtier_load": (_STATUS, [_STORE, _NS, _KEYS, c_size_t, _BUFS, _SIZES, POINTER(c_size_t)]),
    "kvtier_save": (_STATUS, [_STORE, _NS, _KEYS, c_size_t, _BUFS, _SIZES]),
    "kvtier_prefetch": (None, [_STORE, _NS, _KEYS, c_size_t]),
    "kvtier_load_async": (_STATUS, [_STORE, _NS, _KEYS, c_size_t, _BUFS, _SIZES, c_int, POINTER(_OP)]),
    "kvtier_save_async": (_STATUS, [_STORE, _NS, _KEYS, c_size_t, _BUFS, _SIZES, c_int, POINTER(_OP)]),
    "kvtier_op_done": (c_int, [_OP]),
    "kvtier_op_wait": (_STATUS, [_OP, c_int64]),
    "kvtier_op_wait_bytes": (_STATUS, [_OP, c_uint64, c_int64, POINTER(c_size_t)]),
    "kvtier_op_count": (c_size_t, [_OP]),
    "kvtier_op_error": (c_char_p, [_OP]),
    "kvtier_op_free": (None, [_OP]),
    "kvtier_store_metrics_text": (c_size_t, [_STORE, POINTER(c_char), c_size_t]),
    "kvtier_store_stats_json": (c_size_t, [_STORE, POINTER(c_char), c_size_t]),
    # engine identities (python/kvtier/identity.py)
    "kvtier_ns_create_identity": (_STATUS, [c_char_p, POINTER(KvLayout), c_char_p, POINTER(_NS)]),
    "kvtier_ns_identity": (c_size_t, [_NS, c_char_p, c_size_t]),
    "kvtier_remove": (_STATUS, [_STORE, _NS, _KEYS, c_size_t]),
    # layouts of every model family (Layout.from_spec, Layout.preset)
    "kvtier_ns_create_spec": (_STATUS, [c_char_p, c_char_p, c_char_p, c_char_p, POINTER(_NS)]),
    "kvtier_ns_create_identity_spec": (_STATUS, [c_char_p, c_char_p, c_char_p, POINTER(_NS)]),
    "kvtier_ns_layout_spec": (c_size_t, [_NS, c_char_p, c_size_t]),
    "kvtier_preset_layout_spec": (c_size_t, [c_char_p, c_char_p, c_size_t]),
}


def candidate_paths() -> list[Path]:
    """Where the library is looked for, in order."""
    here = Path(__file__).resolve().parent
    paths = []
    env = os.environ.get("KVTIER_LIBRARY")
    if env:
        paths.append(Path(env))
    paths.append(here / "libkvtier.so")
    paths.append(here.parent.parent / "build" / "src" / "capi" / "libkvtier.so")
    return paths


def system_library() -> str:
    """The installed library's SONAME: the dynamic loader finds it in its own search path."""
    return f"libkvtier.so.{ABI_VERSION}"


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def _open() -> ctypes.CDLL:
    tried = []
    for path in candidate_paths():
        if not path.is_file():
            tried.append(f"{path} (absent)")
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        return _check_abi(_bind(lib), path)
    try:
        lib = ctypes.CDLL(system_library())
    except OSError as e:
        tried.append(f"{system_library()} in the loader's search path ({e})")
    else:
        return _check_abi(_bind(lib), Path(system_library()))
    raise KvtierError(Status.NOT_FOUND,
                      "libkvtier.so not found; install kvtier, run `make python` or set KVTIER_LIBRARY. "
                      "Tried: " + "; ".join(tried))


def _check_abi(lib: ctypes.CDLL, path: Path) -> ctypes.CDLL:
    abi = lib.kvtier_abi_version()
    if abi != ABI_VERSION:
        raise KvtierError(Status.VERSION_MISMATCH,
                          f"{path} has ABI version {abi}; this package needs {ABI_VERSION}")
    return lib


_lib: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """The loaded, bound library (loaded on first use)."""
    global _lib
    if _lib is None:
        _lib = _open()
    return _lib


def last_error() -> str:
    """Message of the last failed call on this thread."""
    msg = lib().kvtier_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status: int) -> None:
    """Raises KvtierError with this thread's last error message unless status is OK."""
    if status != Status.OK:
        raise KvtierError(status, last_error())


def read_text(fn, handle) -> str:
    """Calls a kvtier_*_text style function (buf, cap) -> length until the whole text fits."""
    cap = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = fn(handle, buf, cap)
        if n < cap:
            return buf.raw[:n].decode("utf-8", "replace")
        cap = n + 1
