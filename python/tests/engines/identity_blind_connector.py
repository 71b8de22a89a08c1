"""A deliberately broken KvtierConnector, for the engine tests only: it keys every request by its tokens
alone, as if kvtier did not mix a request's ``cache_salt`` and LoRA adapter into its chunk keys.

vLLM loads it through ``kv_connector_module_path`` like the real one (the test puts this folder on the
engine's PYTHONPATH). Importing this module replaces ``request_material`` in kvtier's scheduler module
(its only caller) with one that drops the extra key material, in the engine process that imports it.
Nothing of this is in kvtier's product code.
"""

from __future__ import annotations

from kvtier.connectors.vllm import request_keys, scheduler
from kvtier.connectors.vllm_v1 import KvtierConnector


def _tokens_only(request):
    return request_keys.cacheable_tokens(request), None


scheduler.request_material = _tokens_only


class IdentityBlindKvtierConnector(KvtierConnector):
    pass
