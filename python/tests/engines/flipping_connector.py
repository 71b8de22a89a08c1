"""Test code, the deliberate break of lmcache_l2_adapter.py: kvtier's LMCache connector with one byte of
every loaded object flipped after kvtier wrote it, so ``lmcache bench l2 --no-skip-verify`` must fail."""

from __future__ import annotations

from kvtier.connectors.lmcache import KvtierNativeConnector


class FlippingConnector(KvtierNativeConnector):
    def __init__(self, **adapter_params):
        super().__init__(**adapter_params)
        self._gets = {}

    def submit_batch_get(self, keys, memoryviews):
        future_id = super().submit_batch_get(keys, memoryviews)
        self._gets[future_id] = memoryviews
        return future_id

    def drain_completions(self):
        done = super().drain_completions()
        for future_id, _ok, _error, _results in done:
            for view in self._gets.pop(future_id, []):
                byte = memoryview(view).cast("B")  # LMCache's views have format "<B"
                byte[0] ^= 0xFF
        return done
