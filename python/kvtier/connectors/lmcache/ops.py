"""An operation in flight and the completion tuple LMCache's bridge drains (a leaf: imports no module
of this package)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import List, Optional, Tuple

Completion = Tuple[int, bool, str, Optional[List[bool]]]


@dataclasses.dataclass
class Op:
    kind: str                       # "get", "set", "exists" or "delete"
    n_keys: int
    handles: list = dataclasses.field(default_factory=list)  # (positions, Handle) per size group
    future: Optional[concurrent.futures.Future] = None      # exists checks and deletes
    error: str = ""                 # set when the operation could not start
    kv_keys: list = dataclasses.field(default_factory=list)
