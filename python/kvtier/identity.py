"""Engine identities: everything that decides the byte order and meaning of a block an engine stores.

An ``EngineIdentity`` is a set of named text fields (the C++ ``kvtier::EngineIdentity``,
include/kvtier/engine_identity.h). Its canonical encoding -- a version line, then ``name=value``
lines sorted by name -- is the input of the namespace id, so two identities that differ in any
field never share a chunk::

    ident = EngineIdentity(engine="sglang", model="meta-llama/Llama-3.1-8B", layout="page_first",
                           kv_dtype="bfloat16", tp_size=2, tp_rank=0)
    ns = ident.namespace(kvtier.connectors.byte_layout(page_bytes))

A Store writes the encoding beside the namespace's chunks on its first save (file://, fs://), and
``kvtier inspect`` shows it. Names are 1..64 of ``[a-z0-9_]``; values are text without control
characters (no NUL, no newline), at most 1024 bytes. ``engine`` and ``model`` are required. A field
that does not apply is left out (``None`` values are dropped), never set to a default.

The fields the connectors set (docs/connectors.md lists them per engine): ``engine``, ``layout``,
``io_path``, ``model``, ``model_revision``, ``kv_dtype``, ``attention``, ``page_tokens``,
``k_head_dim``, ``v_head_dim``, ``kv_heads``, ``layers``, ``tp_size``, ``tp_rank`` (``replicated``
where every rank holds the same bytes, e.g. MLA), ``pp_size``, ``pp_rank``, ``cp_size``,
``cp_rank``, ``split_heads``, ``host_pool``, ``block_bytes``, ``hash_scheme``, ``hash_seed``,
``salt``, and for vLLM the weights' ``weight_dtype``, ``quantization``, ``quant_config``,
``code_revision``, ``hf_overrides``, ``attention_dtype``, and on vLLM's CPU backend the kernel's
K packing ``cpu_attn_isa``. New fields are new names: existing
encodings do not change.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any, Mapping, Optional

from . import _lib
from ._lib import KvtierError, Status, check
from .store import Layout, Namespace

__all__ = ["EngineIdentity", "VERSION_LINE"]

VERSION_LINE = "kvtier-engine-identity-v1"
MAX_VALUE_BYTES = 1024
MAX_FIELDS = 64
_NAME = re.compile(r"[a-z0-9_]{1,64}\Z")
_REQUIRED = ("engine", "model")


def _value_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        text = "1" if value else "0"
    else:
        text = str(value)
    raw = text.encode()
    if len(raw) > MAX_VALUE_BYTES or any(b < 0x20 or b == 0x7F for b in raw):
        raise ValueError(f"engine identity: value of {name!r} holds a control character or exceeds "
                         f"{MAX_VALUE_BYTES} bytes: {text[:80]!r}")
    return text


class EngineIdentity:
    """An immutable set of identity fields (see the module docstring)."""

    __slots__ = ("_fields",)

    def __init__(self, fields: Optional[Mapping[str, Any]] = None, **more: Any) -> None:
        merged: dict[str, Any] = dict(fields or {})
        merged.update(more)
        out: dict[str, str] = {}
        for name, value in merged.items():
            if value is None:
                continue
            if not isinstance(name, str) or not _NAME.match(name):
                raise ValueError(f"engine identity: field name {name!r} is not 1..64 of [a-z0-9_]")
            out[name] = _value_text(name, value)
        if len(out) > MAX_FIELDS:
            raise ValueError(f"engine identity: more than {MAX_FIELDS} fields")
        for name in _REQUIRED:
            if not out.get(name):
                raise ValueError(f"engine identity: field {name!r} is required")
        self._fields = dict(sorted(out.items()))

    @property
    def fields(self) -> dict[str, str]:
        return dict(self._fields)

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self._fields.get(name, default)

    def replace(self, **changes: Any) -> "EngineIdentity":
        """A copy with some fields changed (``None`` removes one)."""
        fields: dict[str, Any] = dict(self._fields)
        fields.update(changes)
        return EngineIdentity(fields)

    def encode(self) -> str:
        """The canonical encoding (the namespace's fingerprint input)."""
        return VERSION_LINE + "\n" + "".join(f"{k}={v}\n" for k, v in self._fields.items())

    @classmethod
    def parse(cls, text: str) -> "EngineIdentity":
        """Strict inverse of encode(): ValueError for anything encode() could not have made."""
        lines = text.split("\n")
        if len(lines) < 2 or lines[0] != VERSION_LINE or lines[-1] != "":
            raise ValueError("not an engine identity encoding")
        fields = {}
        for line in lines[1:-1]:
            name, eq, value = line.partition("=")
            if not eq or name in fields:
                raise ValueError(f"not an engine identity encoding: line {line[:80]!r}")
            fields[name] = value
        ident = cls(fields)
        if ident.encode() != text:
            raise ValueError("not a canonical engine identity encoding (fields out of order)")
        return ident

    def namespace(self, layout: Layout, tenant: str = "") -> Namespace:
        """The namespace of blocks written under this identity with chunk geometry ``layout``."""
        return _identity_namespace(self.encode(), layout, tenant)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EngineIdentity) and other._fields == self._fields

    def __hash__(self) -> int:
        return hash(self.encode())

    def __repr__(self) -> str:
        return "EngineIdentity(" + ", ".join(f"{k}={v!r}" for k, v in self._fields.items()) + ")"


def _identity_namespace(encoding: str, layout: Layout, tenant: str) -> Namespace:
    lib = _lib.lib()
    handle = ctypes.c_void_p()
    if layout.spec:
        check(lib.kvtier_ns_create_identity_spec(_lib.c_text("identity", encoding), _lib.c_text("spec", layout.spec),
                                                 _lib.c_text("tenant", tenant), ctypes.byref(handle)))
    else:
        c_layout = layout._c()
        check(lib.kvtier_ns_create_identity(_lib.c_text("identity", encoding), ctypes.byref(c_layout),
                                            _lib.c_text("tenant", tenant), ctypes.byref(handle)))
    ns = Namespace.__new__(Namespace)  # the same object Namespace() makes, from another constructor
    ns._adopt(handle.value, layout)
    return ns


def namespace_identity(ns: Namespace) -> Optional[EngineIdentity]:
    """The identity a namespace was made from, or None for one made from a model id and salt."""
    lib = _lib.lib()
    n = lib.kvtier_ns_identity(ns.handle, None, 0)
    if n == 0:
        return None
    buf = ctypes.create_string_buffer(n + 1)
    if lib.kvtier_ns_identity(ns.handle, buf, n + 1) != n:
        raise KvtierError(Status.INTERNAL, "kvtier_ns_identity changed size")
    return EngineIdentity.parse(buf.value.decode())
