"""What the scheduler hands the workers once per step: the loads and saves of requests
(``LoadSpec``, ``SaveSpec``) and the preempted requests (``KvtierConnectorMetadata``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .engine_api import MetadataBase
from .request_keys import RequestKeys


@dataclass
class LoadSpec:
    req_id: str
    tokens: list           # the prompt tokens of the chunks [0, last_chunk)
    first_chunk: int       # chunks before it are held by the engine already
    blocks: list           # block ids of the chunks [first_chunk, last_chunk); -1: not written (held
                           # already, or a window group's null block); one list per KV cache group
                           # when there are several
    is_async: bool
    extras: Optional[RequestKeys] = None  # key material besides the tokens (_vllm_request_keys)


@dataclass
class SaveSpec:
    req_id: str
    tokens: list           # prompt tokens of the chunks [0, last_chunk)
    first_chunk: int
    blocks: list           # block ids of the chunks [first_chunk, last_chunk) (per group as in LoadSpec;
                           # -1: a window block vLLM freed, saved as zeros)
    extras: Optional[RequestKeys] = None
    context: list = field(default_factory=list)  # every block id of the request (all groups): a save
                                                 # is dropped when one of them failed to load this step


@dataclass
class KvtierConnectorMetadata(MetadataBase):  # type: ignore[misc,valid-type]
    """Scheduler -> workers, once per step."""

    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    preempted: set = field(default_factory=set)
