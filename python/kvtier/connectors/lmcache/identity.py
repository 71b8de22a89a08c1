"""Identity and namespaces of the LMCache connector's objects: one namespace per object byte size, and
the size registry that keeps those sizes in the pool itself, so exists finds the objects of every size
earlier processes wrote (the package docstring)."""

from __future__ import annotations

import logging

import kvtier

from .. import byte_layout
from .options import SLOT

logger = logging.getLogger(__name__)


class SizeRegistry:
    """The namespaces of ``KvtierNativeConnector`` (its ``_store``, ``_lock``, ``_namespaces`` and
    registry state, set by its constructor)."""

    def _identity(self, layout: str, size: int) -> kvtier.EngineIdentity:
        return kvtier.EngineIdentity(engine="lmcache", layout=layout, model=self._model_id,
                                     block_bytes=size, salt=self._salt)

    def _ns(self, size: int) -> kvtier.Namespace:
        with self._lock:
            ns = self._namespaces.get(size)
        if ns is None:
            ns = self._identity("object", size).namespace(byte_layout(size), tenant=self._tenant)
            with self._lock:
                ns = self._namespaces.setdefault(size, ns)
        return ns

    def _slot_key(self, i: int) -> bytes:
        return kvtier.key_of(f"kvtier-lmcache-size-slot:{i}")

    def _read_registry(self) -> None:
        """Reads the registry slots written since the last read (by any process)."""
        while self._slots < self._max_sizes:
            buf = bytearray(SLOT.size)
            key = self._slot_key(self._slots)
            if self._store.lookup(self._registry, [key]) != 1 or \
                    self._store.load(self._registry, [key], [buf]) != 1:
                return
            self._ns(SLOT.unpack(buf)[0])
            self._slots += 1

    def _register_size(self, size: int) -> None:
        """Makes ``size`` known to later processes: the first free registry slot gets it."""
        with self._lock:
            if size in self._namespaces:
                return
        self._read_registry()
        with self._lock:
            if size in self._namespaces:
                return
        self._ns(size)
        if self._slots >= self._max_sizes:
            logger.warning("kvtier: more than %d LMCache object sizes; objects of %d bytes are found "
                           "by exists only in this process", self._max_sizes, size)
            return
        self._store.save(self._registry, [self._slot_key(self._slots)], [SLOT.pack(size)])
        self._slots += 1
