"""The service files of deploy/ (docs/deploy.md): systemd units checked by systemd-analyze (verify, and
an exposure bound from `security --offline`), Kubernetes manifests parsed (python3-yaml) and checked
for what kvtier needs of them, rendered by `kubectl kustomize` and, where a cluster answers, applied with
--dry-run=client. Every kvtier command line in them is checked against the built CLI's flags, and the gc
lines are run on a scratch pool. Tools that are absent are skipped with the reason printed (-rs).

Environment (tests/deploy/CMakeLists.txt): KVTIER_CLI, the built `kvtier`; KVTIER_DEPLOY_DIR, deploy/;
KVTIER_LIBRARY and PYTHONPATH, the package that writes the scratch pool.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(os.environ.get("KVTIER_DEPLOY_DIR", Path(__file__).resolve().parents[2] / "deploy"))
CLI = os.environ.get("KVTIER_CLI", "")
SYSTEMD = DEPLOY / "systemd"
K8S = DEPLOY / "kubernetes"
GC_INSTANCE = "mnt-kvpool-kvtier"  # systemd-escape --path /mnt/kvpool/kvtier
SECRET_FLAGS = ("--tls-key", "--token-file", "--key-file")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def cli():
    if not CLI or not os.access(CLI, os.X_OK):
        pytest.fail(f"KVTIER_CLI={CLI!r} is not the built kvtier")
    return CLI


def unit(path):
    """A unit file as {section: [(key, value), ...]} (keys repeat: SystemCallFilter=)."""
    sections, current = {}, None
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
        else:
            key, _, value = line.partition("=")
            current.append((key, value))
    return sections


def values(sections, section, key):
    return [v for k, v in sections.get(section, []) if k == key]


def env_file(path):
    """KEY=VALUE lines of an EnvironmentFile (quotes removed)."""
    out = {}
    for line in Path(path).read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = shlex.split(value)[0] if value.strip() else ""
    return out


def flags(argv):
    return [a.split("=")[0] for a in argv if a.startswith("--")]


def help_flags(command):
    """The long flags `kvtier COMMAND --help` lists, or None when the CLI has no such command."""
    top = run([cli(), "--help"])
    assert top.returncode == 0, top.stderr
    if not re.search(rf"^\s+{command}\s", top.stdout, re.M):
        return None
    r = run([cli(), command, "--help"])
    assert r.returncode == 0, r.stderr
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", r.stdout))


def make_pool(path):
    """A shared pool holding 3 chunks, written through the Python package (KVTIER_LIBRARY)."""
    import kvtier
    layout = kvtier.Layout(layers=2, kv_heads=2, head_dim=8, dtype="fp16", tokens_per_chunk=16)
    with kvtier.Store([f"fs://{path}"]) as store, store.namespace("deploy-test/model", layout) as ns:
        keys = ns.chunk_keys(list(range(48)))
        store.save(ns, keys, [bytearray([i]) * ns.chunk_bytes for i in range(3)])
        store.flush()


def systemd_analyze():
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (package systemd)")
    return "systemd-analyze"


@pytest.fixture
def units(tmp_path):
    """The units in a scratch directory, ExecStart's /usr/bin/kvtier replaced by the built CLI, the gc
    template instantiated for /mnt/kvpool/kvtier."""
    for f in SYSTEMD.glob("*.service"):
        shutil.copy(f, tmp_path)
    shutil.copy(SYSTEMD / "kvtier-gc@.timer", tmp_path)
    for f in tmp_path.iterdir():
        f.write_text(f.read_text().replace("/usr/bin/kvtier", cli()))
    for suffix in ("service", "timer"):
        shutil.copy(tmp_path / f"kvtier-gc@.{suffix}", tmp_path / f"kvtier-gc@{GC_INSTANCE}.{suffix}")
    return [tmp_path / "kvtier-serve.service", tmp_path / f"kvtier-gc@{GC_INSTANCE}.service",
            tmp_path / f"kvtier-gc@{GC_INSTANCE}.timer"]


def test_systemd_units_verify(units):
    r = run([systemd_analyze(), "verify", "--man=no"] + [str(u) for u in units])
    # verify exits 0 on an unknown key or a bad value and only warns: any output is a failure.
    assert r.returncode == 0 and r.stderr.strip() == "" and r.stdout.strip() == "", r.stderr + r.stdout


def test_systemd_units_hardened(units):
    for u in units[:2]:
        r = run([systemd_analyze(), "security", "--offline=true", "--threshold=20", str(u)])
        assert r.returncode == 0, f"{u.name}: exposure above 2.0\n{r.stdout[-600:]}{r.stderr}"
    gc = unit(SYSTEMD / "kvtier-gc@.service")
    assert values(gc, "Service", "ReadWritePaths") == ["%f"], "gc may write only its pool"
    for name in ("kvtier-serve.service", "kvtier-gc@.service"):
        s = unit(SYSTEMD / name)
        assert values(s, "Service", "ProtectSystem") == ["strict"], name
        assert values(s, "Service", "User") == ["kvtier"], name
    serve = unit(SYSTEMD / "kvtier-serve.service")
    # shm:// pools: the host's /dev/shm, and other users' /proc/<pid>/stat for the holders' liveness.
    assert not values(serve, "Service", "PrivateDevices") and not values(serve, "Service", "ProtectProc")
    sysusers = (SYSTEMD / "kvtier.sysusers.conf").read_text()
    assert re.search(r"^u kvtier - ", sysusers, re.M), "kvtier.sysusers.conf does not create the user"


def gc_argv_of_unit():
    """ExecStart of kvtier-gc@.service for /mnt/kvpool/kvtier with deploy/systemd/gc.env."""
    (line,) = values(unit(SYSTEMD / "kvtier-gc@.service"), "Service", "ExecStart")
    env = {"KVTIER_GC_GRACE": "10m", **env_file(SYSTEMD / "gc.env")}
    line = line.replace("%f", "/mnt/kvpool/kvtier")
    line = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], line)
    return shlex.split(line)


def k8s_docs():
    docs = []
    for f in sorted(K8S.glob("*.yaml")):
        docs += [(f.name, d) for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


def pod_specs():
    for name, d in k8s_docs():
        if d["kind"] == "Deployment":
            yield name, d["spec"]["template"]["spec"]
        elif d["kind"] == "CronJob":
            yield name, d["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def container(kind, name):
    for _, spec in pod_specs():
        for c in spec.get("initContainers", []) + spec["containers"]:
            if c["name"] == name:
                return spec, c
    pytest.fail(f"no container {name}")


def configmap_literals():
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    (gen,) = [g for g in kust["configMapGenerator"] if g["name"] == "kvtier-gc"]
    return dict(lit.split("=", 1) for lit in gen["literals"])


def gc_argv_of_cronjob():
    _, c = container("CronJob", "gc")
    env = configmap_literals()
    return c["command"] + [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in c["args"]]


@pytest.mark.parametrize("argv_of", [gc_argv_of_unit, gc_argv_of_cronjob])
def test_gc_command_lines_run(argv_of, tmp_path):
    """The gc lines of the unit and the CronJob take only flags `kvtier gc` has, and run on a pool."""
    argv = argv_of()
    assert argv[:2] in (["/usr/bin/kvtier", "gc"], ["kvtier", "gc"]), argv
    assert set(flags(argv)) <= help_flags("gc"), f"{argv} vs kvtier gc --help"
    target = argv[argv.index("--target") + 1]
    assert target.startswith("fs:///"), target
    pool = tmp_path / "pool"
    make_pool(pool)
    argv = [cli()] + argv[1:] + ["--json"]
    argv[argv.index("--target") + 1] = f"fs://{pool}"
    r = run(argv)
    assert r.returncode == 0, f"{argv}: {r.stdout}{r.stderr}"
    summary = json.loads(r.stdout)
    assert summary["chunks_scanned"] == 3 and summary["chunks_evicted"] == 0, summary


def serve_argvs():
    args = shlex.split(env_file(SYSTEMD / "serve.env")["KVTIER_SERVE_ARGS"])
    _, c = container("Deployment", "kvtier-serve")
    return [("serve.env", ["kvtier", "serve"] + args), ("engine-deployment.yaml", c["command"] + c["args"])]


def test_serve_command_lines_take_serve_flags():
    known = help_flags("serve")
    if known is None:
        pytest.skip("this kvtier has no serve command (issue 27 item 1): its flags are not checked")
    for name, argv in serve_argvs():
        assert set(flags(argv)) <= known, f"{name}: {argv} vs kvtier serve --help"


def test_serve_off_loopback_has_tls_and_token():
    """The rule of `kvtier serve`: listening beyond loopback needs TLS and a bearer token."""
    for name, argv in serve_argvs():
        listen = argv[argv.index("--listen") + 1] if "--listen" in argv else "127.0.0.1:9400"
        if not listen.startswith(("127.", "[::1]", "localhost")):
            assert {"--tls-cert", "--tls-key", "--token-file"} <= set(argv), f"{name}: {argv}"


def test_kubernetes_pods_restricted():
    for name, spec in pod_specs():
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["seccompProfile"]["type"] == "RuntimeDefault", name
        assert spec.get("automountServiceAccountToken") is False, name
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["capabilities"]["drop"] == ["ALL"], c["name"]
    kinds = [d["kind"] for _, d in k8s_docs()]
    assert "Secret" not in kinds, "credentials belong in Secrets created outside the repository"


def test_gc_cronjob_never_overlaps():
    """A second gc of a pool gets Busy and exits 1: the CronJob never starts one beside another."""
    (cron,) = [d for _, d in k8s_docs() if d["kind"] == "CronJob"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0


def mounts_by_path(spec, c):
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in c.get("volumeMounts", [])}


def volume_of(spec, c, path):
    """The volume that holds `path` in container c (the longest mount path above it)."""
    best = None
    for mount, vol in mounts_by_path(spec, c).items():
        if (path == mount or path.startswith(mount.rstrip("/") + "/")) and (best is None or len(mount) > len(best[0])):
            best = (mount, vol)
    return best[1] if best else None


def test_kubernetes_pool_and_secret_paths():
    """The pool URLs point into the PVC; secrets are read from the init container's copies (a Secret
    volume's files are links and group-readable, which kvtier refuses), never from a Secret volume."""
    spec, gc = container("CronJob", "gc")
    pool_vol = volume_of(spec, gc, gc["args"][gc["args"].index("--target") + 1][len("fs://"):])
    assert pool_vol and pool_vol["persistentVolumeClaim"]["claimName"] == "kvtier-pool"
    spec, serve = container("Deployment", "kvtier-serve")
    argv = serve["args"]
    target = argv[argv.index("--target") + 1]
    assert volume_of(spec, serve, target[len("fs://"):].split("?")[0])["persistentVolumeClaim"]
    _, init = container("Deployment", "secrets")
    copied = set(re.findall(r"install -m 0[46]00 \S+ (\S+)", init["args"][0]))
    for flag in SECRET_FLAGS:
        path = argv[argv.index(flag) + 1]
        vol = volume_of(spec, serve, path)
        assert vol and "emptyDir" in vol and vol["emptyDir"].get("medium") == "Memory", f"{flag} {path}"
        assert path in copied, f"{flag} {path} is not written by the init container"


def kubectl():
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    return "kubectl"


def test_kustomize_renders():
    r = run([kubectl(), "kustomize", str(K8S)])
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "CronJob", "Deployment", "Namespace",
                                               "PersistentVolumeClaim", "Service"]
    for d in docs:
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == "kvtier", d["metadata"]["name"]
    images = re.findall(r"image: (\S+)", r.stdout)
    assert images and all("/" in i for i in images), f"an image not set by kustomization.yaml: {images}"


def test_kubectl_apply_dry_run(tmp_path):
    rendered = run([kubectl(), "kustomize", str(K8S)])
    assert rendered.returncode == 0, rendered.stderr
    (tmp_path / "all.yaml").write_text(rendered.stdout)
    r = run([kubectl(), "apply", "--dry-run=client", "-f", str(tmp_path / "all.yaml")])
    if r.returncode != 0 and re.search(r"connection refused|no such host|failed to download openapi|"
                                       r"unable to recognize|server could not|i/o timeout", r.stderr):
        pytest.skip("kubectl apply --dry-run=client needs an API server for discovery and none "
                    "answers here: " + r.stderr.strip().splitlines()[-1][:200])
    assert r.returncode == 0, r.stderr
