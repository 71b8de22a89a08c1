"""The guard of every store call HiCache's threads make: none runs after close, close waits for those
running, and none raises into the engine (a leaf: imports no module of this package)."""

from __future__ import annotations

import functools
import logging
from typing import Any

logger = logging.getLogger(__name__)


def while_open(closed_result: Any) -> Any:
    """Runs a store call unless the backend is closed (then ``closed_result(keys)``); close()
    waits for the calls that have started. Nothing raises into HiCache's threads: any exception is
    logged and answered with ``closed_result(keys)``."""
    def wrap(method: Any) -> Any:
        @functools.wraps(method)
        def guarded(self: Any, keys: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                if not self._enter():
                    return closed_result(keys)
            except Exception:  # pragma: no cover - a lock cannot fail
                return closed_result(keys)
            try:
                return method(self, keys, *args, **kwargs)
            except Exception as e:  # the engine's thread must survive any failure of ours
                logger.warning("kvtier %s of %d pages failed: %s", method.__name__,
                               len(keys) if hasattr(keys, "__len__") else -1, e)
                return closed_result(keys)
            finally:
                self._leave()
        return guarded
    return wrap
