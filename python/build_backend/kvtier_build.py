"""kvtier's PEP 517 build backend: ``pip install ./python`` and ``pip wheel ./python`` build libkvtier.so
with CMake from the repository this package sits in and put it inside the wheel.

Standard library only, so it needs nothing installed: it works offline, with or without pip's build
isolation, in a fresh ``python3 -m venv`` (which has no ``wheel`` package). pip builds a local directory
in place, so the C++ sources are the ones beside this folder (``python/..``).

Environment:

- ``CMAKE``: the cmake program (default: ``cmake`` on PATH; 3.25 or later).
- ``KVTIER_CMAKE_BUILD_DIR``: the CMake build directory (default ``build-wheel/cmake-<version>`` at the
  repository root, git-ignored and kept, so a second install rebuilds only what changed).
- ``KVTIER_CMAKE_ARGS``: more configure arguments, e.g. ``-DKVTIER_CUDA=ON`` (default: a lean Release
  build of the ``kvtier_shared`` target only, no tests, no benchmarks, no CUDA).
- ``KVTIER_SKIP_LIBRARY_BUILD=1``: package the Python code only (a ``py3-none-any`` wheel); the package
  then loads an installed libkvtier.so.1 (``make install``, the .deb) or ``$KVTIER_LIBRARY``.

ccache, when the CMake project finds it, compiles through it; ``CCACHE_BASEDIR`` defaults to the
repository root, so a fresh build directory reuses what another one compiled.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

HERE = pathlib.Path(__file__).resolve().parent.parent  # python/
PACKAGE = "kvtier"
LIBRARY = "libkvtier.so"
LEAN_OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DKVTIER_BUILD_TESTS=OFF", "-DKVTIER_BUILD_BENCH=OFF",
                "-DKVTIER_BUILD_FUZZ=OFF", "-DKVTIER_CUDA=OFF", "-DKVTIER_WERROR=OFF")


class BuildError(RuntimeError):
    """A wheel that cannot be built, with what to do about it."""


# ---- metadata -------------------------------------------------------------------------------------


def project() -> dict:
    """The flat string fields of pyproject.toml's [project] table (name, version, description,
    requires-python): read with a pattern, as tomllib is Python 3.11+ only."""
    text = (HERE / "pyproject.toml").read_text()
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if table is None:
        raise BuildError("kvtier: python/pyproject.toml has no [project] table")
    fields = dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"\s*$', table.group(1), re.M))
    for needed in ("name", "version"):
        if needed not in fields:
            raise BuildError(f"kvtier: python/pyproject.toml's [project] has no {needed}")
    return fields


def dist_name(fields: dict) -> str:
    return f"{re.sub(r'[-_.]+', '_', fields['name'])}-{fields['version']}"


def metadata_text(fields: dict) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {fields['name']}", f"Version: {fields['version']}"]
    if "description" in fields:
        lines.append(f"Summary: {fields['description']}")
    if "requires-python" in fields:
        lines.append(f"Requires-Python: {fields['requires-python']}")
    readme = HERE / fields.get("readme", "README.md")
    if readme.is_file():
        lines += ["Description-Content-Type: text/markdown", "", readme.read_text()]
    return "\n".join(lines) + "\n"


def platform_tag() -> str:
    """The wheel's platform tag (``linux_x86_64``): it holds a native library."""
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


# ---- libkvtier.so -------------------------------------------------------------------------------


def repository_root() -> pathlib.Path:
    root = HERE.parent
    if not ((root / "CMakeLists.txt").is_file() and (root / "src" / "capi").is_dir()):
        raise BuildError(
            f"kvtier: the C++ sources (CMakeLists.txt, src/) are not beside this package ({root}): build it "
            "from a kvtier checkout (`pip install ./python` in the clone), or set KVTIER_SKIP_LIBRARY_BUILD=1 "
            "to package the Python code only and use an installed libkvtier.so.1")
    return root


def cmake_program() -> str:
    name = os.environ.get("CMAKE") or "cmake"
    found = shutil.which(name)
    if found is None:
        raise BuildError(
            f"kvtier: building libkvtier.so needs CMake 3.25 or later, and {name!r} was not found (set CMAKE "
            "to its path; Debian 12: `apt-get install cmake`, or `bash scripts/install-deps.sh --python` "
            "for every build dependency)")
    return found


def default_build_dir(root: pathlib.Path, cmake: str) -> pathlib.Path:
    """``build-wheel/cmake-<version>``: a build directory keeps the CMake that configured it, so each
    CMake (Debian's 3.25, pip's 4.x) has its own."""
    done = subprocess.run([cmake, "--version"], capture_output=True, text=True)
    found = re.search(r"version (\S+)", done.stdout)
    if done.returncode or found is None:
        raise BuildError(f"kvtier: `{cmake} --version` failed: {done.stderr.strip() or done.stdout.strip()}")
    return root / "build-wheel" / f"cmake-{found.group(1)}"


def _run(command: list, env: dict) -> None:
    print("kvtier build:", " ".join(shlex.quote(str(c)) for c in command), file=sys.stderr, flush=True)
    done = subprocess.run([str(c) for c in command], env=env, stdout=sys.stderr)
    if done.returncode:
        raise BuildError(f"kvtier: `{' '.join(map(str, command))}` failed with exit status {done.returncode} "
                         "(its output is above)")


def build_library() -> pathlib.Path:
    """Configures and builds the ``kvtier_shared`` target; the path of the built libkvtier.so."""
    root = repository_root()
    cmake = cmake_program()
    build = pathlib.Path(os.environ.get("KVTIER_CMAKE_BUILD_DIR") or default_build_dir(root, cmake)).resolve()
    env = dict(os.environ)
    env.setdefault("CCACHE_BASEDIR", str(root))
    configure = [cmake, "-S", root, "-B", build, *LEAN_OPTIONS]
    if "CMAKE_GENERATOR" not in env and not (build / "CMakeCache.txt").exists() and shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    configure += shlex.split(os.environ.get("KVTIER_CMAKE_ARGS", ""))
    _run(configure, env)
    jobs = env.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(min(os.cpu_count() or 1, 8))
    _run([cmake, "--build", build, "--target", "kvtier_shared", "-j", jobs], env)
    library = build / "src" / "capi" / LIBRARY
    if not library.exists():
        raise BuildError(f"kvtier: the build finished without {library}")
    return library.resolve()  # the versioned file behind the symlinks


# ---- the wheel ------------------------------------------------------------------------------------


def package_files() -> list[tuple[str, pathlib.Path]]:
    """(path in the wheel, file) of the Python package: sources and data, no bytecode, and no copy of
    libkvtier.so that ``make python`` left (the wheel takes the one it builds)."""
    out = []
    for path in sorted((HERE / PACKAGE).rglob("*")):
        rel = path.relative_to(HERE).as_posix()
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc" and rel != f"{PACKAGE}/{LIBRARY}":
            out.append((rel, path))
    return out


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(directory: str, files: list[tuple[str, bytes]], tag: str, fields: dict) -> str:
    info = f"{dist_name(fields)}.dist-info"
    wheel_text = (f"Wheel-Version: 1.0\nGenerator: kvtier_build\nRoot-Is-Purelib: "
                  f"{'true' if tag.endswith('-any') else 'false'}\nTag: {tag}\n")
    files = files + [(f"{info}/METADATA", metadata_text(fields).encode()), (f"{info}/WHEEL", wheel_text.encode()),
                     (f"{info}/top_level.txt", f"{PACKAGE}\n".encode())]
    record = "\n".join([_record_line(n, d) for n, d in files] + [f"{info}/RECORD,,"]) + "\n"
    name = f"{dist_name(fields)}-{tag}.whl"
    with zipfile.ZipFile(pathlib.Path(directory) / name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for entry, data in files + [(f"{info}/RECORD", record.encode())]:
            mode = 0o755 if entry.endswith(".so") else 0o644
            zinfo = zipfile.ZipInfo(entry, date_time=(1980, 1, 1, 0, 0, 0))
            zinfo.external_attr = (0o100000 | mode) << 16
            zinfo.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(zinfo, data)
    return name


# ---- PEP 517 hooks --------------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None) -> list:
    return []


def get_requires_for_build_sdist(config_settings=None) -> list:
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    fields = project()
    files = [(name, path.read_bytes()) for name, path in package_files()]
    if os.environ.get("KVTIER_SKIP_LIBRARY_BUILD") == "1":
        return write_wheel(wheel_directory, files, "py3-none-any", fields)
    files.append((f"{PACKAGE}/{LIBRARY}", build_library().read_bytes()))
    return write_wheel(wheel_directory, files, f"py3-none-{platform_tag()}", fields)


def build_sdist(sdist_directory, config_settings=None) -> str:
    """The Python package alone (PKG-INFO, pyproject.toml, the backend, kvtier/): a wheel built from it
    needs KVTIER_SKIP_LIBRARY_BUILD=1, as the C++ sources are not in it."""
    fields = project()
    base = dist_name(fields)
    members = [("PKG-INFO", metadata_text(fields).encode()), ("pyproject.toml", (HERE / "pyproject.toml").read_bytes())]
    members += [(f"build_backend/{p.name}", p.read_bytes()) for p in sorted((HERE / "build_backend").glob("*.py"))]
    members += [(name, path.read_bytes()) for name, path in package_files()]
    readme = HERE / fields.get("readme", "README.md")
    if readme.is_file():
        members.append((readme.name, readme.read_bytes()))
    name = f"{base}.tar.gz"
    with tarfile.open(pathlib.Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as sdist:
        for member, data in members:
            entry = tarfile.TarInfo(f"{base}/{member}")
            entry.size, entry.mode, entry.mtime = len(data), 0o644, 0
            sdist.addfile(entry, io.BytesIO(data))
    return name
