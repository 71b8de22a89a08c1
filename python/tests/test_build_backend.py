"""The package's in-tree build backend (python/build_backend/kvtier_build.py) without running CMake: the
wheel it writes (files, tags, RECORD), and its refusals when CMake or the C++ sources are missing. The
CMake build itself is run by tests/python/pip_install_check.sh (ctest python_pip_install)."""

from __future__ import annotations

import base64
import hashlib
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "build_backend"))
import kvtier_build  # noqa: E402


def _record(wheel: zipfile.ZipFile) -> dict:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/RECORD")]
    rows = [line.split(",") for line in wheel.read(name).decode().splitlines()]
    return {path: (digest, size) for path, digest, size in rows}


def test_a_wheel_without_the_library_is_pure_and_its_record_matches_its_files(tmp_path, monkeypatch):
    monkeypatch.setenv("KVTIER_SKIP_LIBRARY_BUILD", "1")
    name = kvtier_build.build_wheel(str(tmp_path))
    assert name == "kvtier-0.1.0-py3-none-any.whl"
    wheel = zipfile.ZipFile(tmp_path / name)
    names = set(wheel.namelist())
    assert {"kvtier/__init__.py", "kvtier/connectors/vllm_v1.py", "kvtier/connectors/vllm/connector.py"} <= names
    assert "kvtier/libkvtier.so" not in names and not any("__pycache__" in n for n in names)
    record = _record(wheel)
    assert set(record) == names
    for path in names - {p for p in names if p.endswith("RECORD")}:
        data = wheel.read(path)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert record[path] == (f"sha256={digest}", str(len(data))), path
    assert "Root-Is-Purelib: true" in wheel.read("kvtier-0.1.0.dist-info/WHEEL").decode()
    assert "Name: kvtier" in wheel.read("kvtier-0.1.0.dist-info/METADATA").decode()


def test_a_wheel_with_the_library_carries_it_under_a_platform_tag(tmp_path, monkeypatch):
    monkeypatch.delenv("KVTIER_SKIP_LIBRARY_BUILD", raising=False)
    built = tmp_path / "libkvtier.so.1.0"
    built.write_bytes(b"\x7fELF not really")
    monkeypatch.setattr(kvtier_build, "build_library", lambda: built)
    name = kvtier_build.build_wheel(str(tmp_path))
    assert name == f"kvtier-0.1.0-py3-none-{kvtier_build.platform_tag()}.whl" and not name.endswith("-any.whl")
    wheel = zipfile.ZipFile(tmp_path / name)
    assert wheel.read("kvtier/libkvtier.so") == built.read_bytes()
    assert (wheel.getinfo("kvtier/libkvtier.so").external_attr >> 16) & 0o777 == 0o755
    assert "Root-Is-Purelib: false" in wheel.read("kvtier-0.1.0.dist-info/WHEEL").decode()


def test_no_cmake_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CMAKE", "/nonexistent/cmake")
    with pytest.raises(kvtier_build.BuildError, match="needs CMake 3.25 or later"):
        kvtier_build.cmake_program()


def test_a_package_without_the_cpp_sources_beside_it_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(kvtier_build, "HERE", tmp_path / "python")
    with pytest.raises(kvtier_build.BuildError, match="C\\+\\+ sources .* are not beside this package"):
        kvtier_build.build_library()


def test_the_sdist_holds_the_package_and_the_backend(tmp_path):
    name = kvtier_build.build_sdist(str(tmp_path))
    members = set(tarfile.open(tmp_path / name).getnames())
    assert {"kvtier-0.1.0/PKG-INFO", "kvtier-0.1.0/pyproject.toml", "kvtier-0.1.0/build_backend/kvtier_build.py",
            "kvtier-0.1.0/kvtier/__init__.py"} <= members
