"""The adapter parameters the connector reads (the package docstring) and the slot format of its size
registry (a leaf: imports no module of this package)."""

from __future__ import annotations

import struct

from .. import STORE_OPTION_NAMES

OWN_OPTIONS = ("tiers", "model_id", "tenant", "salt", "chunk_bytes", "max_sizes", "exists_threads",
               "store") + STORE_OPTION_NAMES
SLOT = struct.Struct("<Q")
