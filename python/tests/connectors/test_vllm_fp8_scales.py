"""The vLLM connector and fp8 KV caches: the scales that turn the fp8 bytes back into K and V are part of
what makes a chunk right. From the checkpoint they are the weights' (in the identity); computed by each
engine from its first batch (cache_config.calculate_kv_scales) they differ between engines, so such an
engine is refused rather than sharing chunks that verify and are read under other scales."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from vllm_v1_driver import vllm_config  # noqa: E402

from kvtier.connectors.vllm.config import spec_of_vllm_config  # noqa: E402


def _cfg(cache_dtype: str, calculate: bool):
    cfg = vllm_config("test/fp8", 2, 2, 8, 16, {}, cache_dtype=cache_dtype)
    cfg.cache_config.calculate_kv_scales = calculate
    return cfg


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_fp8_kv_with_scales_each_engine_calculates_is_refused(dtype):
    with pytest.raises(ValueError, match="calculate_kv_scales"):
        spec_of_vllm_config(_cfg(dtype, True))


def test_fp8_kv_with_the_checkpoints_scales_and_other_dtypes_are_served():
    assert spec_of_vllm_config(_cfg("fp8", False)).kv_dtype == "fp8"
    # calculate_kv_scales means nothing to a bf16/fp16/auto cache: served as before
    assert spec_of_vllm_config(_cfg("auto", True)).kv_dtype == "float32"
    assert spec_of_vllm_config(_cfg("bfloat16", True)).kv_dtype == "bfloat16"
