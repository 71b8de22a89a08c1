"""`kvtier serve` against real HTTP clients (curl and urllib) on a loopback port it chose: /metrics
passes the strict Prometheus parser (tests/metrics), /v1/lookup agrees with Store::Lookup (the
library's, through the Python package) on a pool this process wrote, bad requests get a 4xx and a JSON
error, and the pool is byte-for-byte unchanged by everything the server did."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import kvtier  # noqa: E402

CLI = os.environ["KVTIER_CLI"]
PROM_CHECK = os.environ["KVTIER_PROM_CHECK"]
LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=8, dtype="fp16", tokens_per_chunk=16)


def prompt(n_chunks: int, first: int, extra: int = 0) -> list[int]:
    return list(range(first, first + n_chunks * LAYOUT.tokens_per_chunk + extra))


PROMPTS = {  # name: (tokens, chunks written)
    "whole": (prompt(6, 1000), 6),
    "half": (prompt(5, 5000), 3),
    "none": (prompt(4, 9000), 0),
    "ragged": (prompt(6, 1000, extra=7), 6),  # the same prefix as "whole" and a partial chunk
}


def snapshot(root: Path) -> dict:
    """Every entry below root: kind, size, mtime and content hash; equal snapshots = nothing changed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """An fs:// pool written by this process; the lookups Store::Lookup gives on it; a snapshot."""
    root = tmp_path_factory.mktemp("serve") / "pool"
    url = f"fs://{root}"
    with kvtier.Store([url]) as store:
        ns = store.namespace("test/serve", LAYOUT, tenant="t")
        for toks, written in PROMPTS.values():
            keys = ns.chunk_keys(toks)[:written]
            if keys:
                store.save(ns, keys, [bytes([i + 1]) * LAYOUT.chunk_bytes for i in range(len(keys))])
        store.flush()
        expected = {name: store.lookup(ns, ns.chunk_keys(toks)) for name, (toks, _) in PROMPTS.items()}
        keys = {name: [k.hex() for k in ns.chunk_keys(toks)] for name, (toks, _) in PROMPTS.items()}
    assert expected == {"whole": 6, "half": 3, "none": 0, "ragged": 6}
    return {"root": root, "url": url, "ns": ns.id, "expected": expected, "keys": keys, "before": snapshot(root)}


class Server:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([CLI, "serve", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("kvtier serve: listening on "), line + self.proc.stderr.read()
        self.base = line.split("listening on ")[1].split(";")[0].strip()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=60) == 0, self.proc.stderr.read()


@pytest.fixture(scope="module")
def server(pool):
    s = Server("--target", pool["url"], "--listen", "127.0.0.1:0")
    yield s
    s.stop()
    assert snapshot(pool["root"]) == pool["before"], "serving changed the pool"


def request(url: str, body: bytes | None = None, method: str | None = None, headers: dict | None = None,
            context=None) -> tuple[int, bytes, str]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60, context=context) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def lookup_body(pool, names, how) -> bytes:
    reqs = [{"tokens": PROMPTS[n][0]} if how == "tokens" else {"keys": pool["keys"][n]} for n in names]
    doc = {"namespace": pool["ns"], "requests": reqs}
    if how == "tokens":
        doc["tokens_per_chunk"] = LAYOUT.tokens_per_chunk
    return json.dumps(doc).encode()


def test_health_and_readiness(server):
    assert request(server.base + "/healthz")[:2] == (200, b'{"status":"ok"}\n')
    status, body, ctype = request(server.base + "/readyz")
    assert status == 200 and json.loads(body) == {"status": "ready"} and ctype.startswith("application/json")


def test_metrics_pass_the_prometheus_parser_from_urllib_and_curl(server):
    status, body, ctype = request(server.base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    curl = subprocess.run(["curl", "-sS", "--fail", server.base + "/metrics"], capture_output=True, check=True)
    for text in (body, curl.stdout):
        checked = subprocess.run([PROM_CHECK], input=text, capture_output=True)
        assert checked.returncode == 0, checked.stderr.decode()
        assert b"kvtier_tier_chunks{" in text


@pytest.mark.parametrize("how", ["tokens", "keys"])
def test_lookup_agrees_with_store_lookup(server, pool, how):
    names = list(PROMPTS)
    status, body, _ = request(server.base + "/v1/lookup", lookup_body(pool, names, how))
    assert status == 200, body
    reply = json.loads(body)
    assert reply["namespace"] == pool["ns"]
    for name, r in zip(names, reply["results"]):
        assert r["chunks"] == pool["expected"][name], name
        assert r["keys"] == len(pool["keys"][name])
        assert [t["chunks"] for t in r["tiers"]] == [pool["expected"][name]]
        assert r["tokens"] == (r["chunks"] * LAYOUT.tokens_per_chunk if how == "tokens" else None)


def test_lookup_with_curl(server, pool):
    out = subprocess.run(["curl", "-sS", "--fail", "-H", "Content-Type: application/json", "--data-binary", "@-",
                          server.base + "/v1/lookup"], input=lookup_body(pool, ["half"], "keys"),
                         capture_output=True, check=True)
    assert json.loads(out.stdout)["results"][0]["chunks"] == 3


def test_namespaces(server, pool):
    status, body, _ = request(server.base + "/v1/namespaces")
    assert status == 200
    (tier,) = json.loads(body)["tiers"]
    assert tier["tier"] == pool["url"]
    assert [(n["namespace"], n["chunks"]) for n in tier["namespaces"]] == [(pool["ns"], 9)]


BAD = [
    (b"not json", 400),
    (b"[]", 400),
    (b'{"requests": [{"keys": []}]}', 400),                                       # no namespace
    (b'{"namespace": "zz", "requests": [{"keys": []}]}', 400),
    (b'{"namespace": "NS", "requests": []}', 400),
    (b'{"namespace": "NS", "requests": [{"keys": []}], "colour": 1}', 400),      # unknown field
    (b'{"namespace": "NS", "requests": [{"tokens": [1, 2]}]}', 400),             # no tokens_per_chunk
    (b'{"namespace": "NS", "tokens_per_chunk": 0, "requests": [{"tokens": [1]}]}', 400),
    (b'{"namespace": "NS", "tokens_per_chunk": 2, "requests": [{"tokens": [-1, 2]}]}', 400),
    (b'{"namespace": "NS", "tokens_per_chunk": 2, "requests": [{"tokens": [4294967296, 2]}]}', 400),
    (b'{"namespace": "NS", "tokens_per_chunk": 2, "requests": [{"tokens": [1.5, 2]}]}', 400),
    (b'{"namespace": "NS", "requests": [{"keys": ["abc"]}]}', 400),
    (b'{"namespace": "NS", "tokens_per_chunk": 2, "requests": [{"keys": [], "tokens": []}]}', 400),
    (b'{"namespace": "NS", "requests": [' + b",".join([b'{"keys": []}'] * 65) + b"]}", 413),
    (b'{"namespace": "NS", "tokens_per_chunk": 1, "requests": [{"tokens": [' + b",".join([b"1"] * 16385) + b"]}]}", 413),
    (b" " * (2 << 20), 413),                                                      # past the body bound
]


@pytest.mark.parametrize("body,status", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_lookups_get_4xx_with_a_json_error(server, pool, body, status):
    got, reply, ctype = request(server.base + "/v1/lookup", body.replace(b"NS", pool["ns"].encode()))
    assert got == status, reply
    assert ctype.startswith("application/json") and json.loads(reply)["error"]


@pytest.mark.parametrize("path,method", [("/nowhere", "GET"), ("/v1/lookup", "GET"), ("/metrics", "POST")])
def test_wrong_paths_and_methods_get_4xx(server, path, method):
    status, body, _ = request(server.base + path, b"{}" if method == "POST" else None, method=method)
    assert 400 <= status < 500 and json.loads(body)["error"]


def test_exposed_listener_needs_tls_and_a_token(pool):
    r = subprocess.run([CLI, "serve", "--target", pool["url"], "--listen", "0.0.0.0:0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--tls-cert, --tls-key and --token-file" in r.stderr


def secret(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_bearer_token(pool, tmp_path):
    token = secret(tmp_path / "token", "s3cret-token\n")
    s = Server("--target", pool["url"], "--listen", "127.0.0.1:0", "--token-file", str(token))
    try:
        status, body, _ = request(s.base + "/metrics")
        assert status == 401 and json.loads(body)["error"]
        assert request(s.base + "/metrics", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert request(s.base + "/metrics", headers={"Authorization": "Bearer s3cret-token"})[0] == 200
        assert request(s.base + "/healthz")[0] == 200, "probes need no token"
    finally:
        s.stop()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command to make a certificate")
def test_tls(pool, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    key.chmod(0o600)
    token = secret(tmp_path / "token", "tls-token")
    s = Server("--target", pool["url"], "--listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key),
               "--token-file", str(token))
    try:
        assert s.base.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(cert))
        ctx.check_hostname = False
        status, body, _ = request(s.base + "/v1/lookup", lookup_body(pool, ["whole"], "keys"),
                                  headers={"Authorization": "Bearer tls-token"}, context=ctx)
        assert status == 200 and json.loads(body)["results"][0]["chunks"] == 6
        out = subprocess.run(["curl", "-sS", "--fail", "--cacert", str(cert), "-k", "-H",
                              "Authorization: Bearer tls-token", s.base + "/metrics"], capture_output=True, check=True)
        assert subprocess.run([PROM_CHECK], input=out.stdout).returncode == 0
    finally:
        s.stop()


def test_a_missing_pool_is_refused_not_created(tmp_path):
    missing = tmp_path / "no-pool"
    r = subprocess.run([CLI, "serve", "--target", f"fs://{missing}", "--listen", "127.0.0.1:0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "kvtier serve:" in r.stderr
    assert not missing.exists(), "serving only looks: it never creates a pool"
