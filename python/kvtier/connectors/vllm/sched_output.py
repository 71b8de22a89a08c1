"""How the vLLM connector reads vLLM's ``SchedulerOutput`` across revisions (vllm/v1/core/sched/output.py).

``CachedRequestData`` is one object for every running request: ``req_ids`` with per-request lists
beside it. A request resumed after a preemption gets its whole block list in ``new_block_ids``; newer
revisions name such requests in ``resumed_req_ids`` (a set), older ones in ``resumed_from_preemption``
(one bool per request). Revisions whose ``CachedRequestData`` is one object per request (no
``req_ids``), or that tell neither, are refused at construction (``check_revision``): the connector
could not tell a resumed request's block list from an addition to it. Imports no other connector module.
"""

from __future__ import annotations

from typing import Any

RESUMED_FIELDS = ("resumed_req_ids", "resumed_from_preemption")


def resumed_ids(cached: Any) -> set:
    """The ids of the requests of a CachedRequestData that were resumed after a preemption."""
    ids = getattr(cached, "resumed_req_ids", None)
    if ids is not None:
        return set(ids)
    flags = getattr(cached, "resumed_from_preemption", None) or ()
    return {rid for rid, flag in zip(cached.req_ids, flags) if flag}


def _field_names(cls: Any) -> set:
    names = set(getattr(cls, "__dataclass_fields__", None) or ())
    names |= set(getattr(cls, "__annotations__", None) or ())
    names |= set(getattr(cls, "__struct_fields__", None) or ())  # msgspec structs
    return names


def check_revision() -> None:
    """ValueError naming the reason when the installed vLLM's CachedRequestData cannot be read (see the
    module docstring); nothing when vLLM is not importable."""
    try:
        from vllm.v1.core.sched.output import CachedRequestData  # type: ignore
    except Exception:  # no vLLM (tests, stand-ins): nothing to check
        return
    names = _field_names(CachedRequestData)
    if not names:
        return  # fields not introspectable: read defensively at run time
    if "req_ids" not in names:
        raise ValueError("KvtierConnector: this vLLM revision's CachedRequestData has no req_ids (one object per "
                         "request); the connector reads the batched form of vLLM 0.10 and later")
    if not names & set(RESUMED_FIELDS):
        raise ValueError("KvtierConnector: this vLLM revision's CachedRequestData has neither resumed_req_ids nor "
                         "resumed_from_preemption: a request resumed after a preemption could not be told from a "
                         "running one, and its saves would read the wrong blocks")
