"""A real, local Kubernetes control plane for tests: etcd + kube-apiserver +
kube-controller-manager + kube-scheduler + Kueue + KWOK, all as plain processes on
127.0.0.1 (no Docker, no kubelet).

Only the standard library, ``pyyaml`` and the ``kubernetes`` client are used; Django is
never imported. Binaries come from ``build.sh`` (see ``cache_dir()`` / ``ensure_built()``).

    from tests.cluster.harness import ControlPlane
    with ControlPlane() as cp:                       # builds if needed, then start()
        cp.add_gpu_node("gpu-0", labels={...}, allocatable={"nvidia.com/gpu": "8"})
        api = kubernetes.client.CoreV1Api(cp.api_client())

Fake pods (KWOK): a pod bound to a fake node becomes Running at once. A pod owned by a
Job becomes Succeeded after ``pod_run_seconds`` (default 2 s). Per pod, the annotations
``ANNOTATION_RUN_DURATION`` (e.g. "30s") and ``ANNOTATION_OUTCOME`` ("Succeeded",
"Failed" or "Running" = never finishes; also applies to pods not owned by a Job)
override that. Deleted pods finish terminating immediately.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, V1Node

HERE = Path(__file__).resolve().parent
BUILD_SH = HERE / "build.sh"
BUILD_VOLCANO_SH = HERE / "build-volcano.sh"
VERSIONS_ENV = HERE / "versions.env"

#: Nodes carrying this annotation are managed (kept Ready, pods run) by KWOK.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
#: Pod annotation: how long the fake container "runs" before finishing, Go duration ("30s").
ANNOTATION_RUN_DURATION = "kwok.gpu-portal.test/run-duration"
#: Pod annotation: "Succeeded" | "Failed" | "Running" (never finishes).
ANNOTATION_OUTCOME = "kwok.gpu-portal.test/outcome"

#: Kueue's configuration as the portal ships it; the harness runs Kueue with it (kueue_configuration).
SHIPPED_KUEUE_CONFIG = HERE.parents[1] / "deploy" / "kueue" / "controller_manager_config.yaml"
SYSTEM_NAMESPACES = ("kube-system", "kueue-system")
#: Volcano's scheduler configuration as the portal ships it; the harness runs Volcano with it.
SHIPPED_VOLCANO_SCHEDULER_CONF = HERE.parents[1] / "deploy" / "volcano" / "volcano-scheduler.conf"
#: Volcano's /pods/validate webhook registration as its chart makes it; the harness fills in where it listens.
VOLCANO_WEBHOOKS = HERE / "volcano-webhooks.yaml"
#: The queue backends the harness can start; the control plane runs one of them.
QUEUE_BACKENDS = ("kueue", "volcano")
#: Volcano's controllers the harness runs: jobs, their PodGroups, queues (open, close) and garbage
#: collection. Not JobFlow's, whose CRDs it does not install (its informers would wait forever).
VOLCANO_CONTROLLERS = "gc-controller,job-controller,pg-controller,queue-controller"
# Where a process in a pod finds its service account; Kueue's visibility server reads it.
IN_CLUSTER_DIR = "/run/secrets/kubernetes.io/serviceaccount"

DEFAULT_NODE_ALLOCATABLE = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}


#: waitForPodsReady's timings the tests shorten, so that a contract test sees an eviction and the
#: requeue in seconds; a shipped file without the block gets none (and the gang test fails).
TEST_REQUEUE_BACKOFF = {"backoffBaseSeconds": 1, "backoffMaxSeconds": 10}


def kueue_configuration(shipped: Mapping[str, Any], *, pods_ready_timeout: float,
                        local: Mapping[str, Any]) -> dict[str, Any]:
    """Kueue's Configuration for the harness: what deploy/kueue ships (read, never copied, so a
    setting removed there is removed here too), its waitForPodsReady timings shortened where it
    has them, and `local`'s top-level fields (loopback addresses, certificates, no leader
    election) on top."""
    cfg = copy.deepcopy(dict(shipped))
    if "waitForPodsReady" in cfg:
        cfg["waitForPodsReady"]["timeout"] = f"{pods_ready_timeout:g}s"
        if "requeuingStrategy" in cfg["waitForPodsReady"]:
            cfg["waitForPodsReady"]["requeuingStrategy"].update(TEST_REQUEUE_BACKOFF)
    return {**cfg, **copy.deepcopy(dict(local))}


class ControlPlaneError(RuntimeError):
    """Raised when a component fails to build, start or become ready."""


# ----------------------------------------------------------------------------- build


def read_versions(path: Path = VERSIONS_ENV) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().strip('"')
    return out


def cache_dir() -> Path:
    """The directory build.sh builds into for the pinned versions (may not exist yet)."""
    res = subprocess.run(["bash", str(BUILD_SH), "--print-dir"], capture_output=True, text=True, check=True)
    return Path(res.stdout.strip().splitlines()[-1])


def is_built(path: Path | None = None) -> bool:
    return ((path or cache_dir()) / ".complete").is_file()


def ensure_built(*, build_if_missing: bool = True, stream: IO[str] | None = None) -> Path:
    """Return the cache dir with complete binaries, running build.sh first if needed.

    Raises ControlPlaneError (with the tail of the build log) if the build fails.
    """
    path = cache_dir()
    if is_built(path):
        return path
    if not build_if_missing:
        raise ControlPlaneError(f"control-plane binaries missing in {path}; run: bash {BUILD_SH}")
    stream = stream if stream is not None else sys.stderr
    print(f"[gpu-portal cluster] building control-plane binaries into {path} (cold build: ~25 min on 2 cores)",
          file=stream, flush=True)
    log_path = Path(tempfile.gettempdir()) / f"gpu-portal-controlplane-build-{os.getpid()}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["bash", str(BUILD_SH)], stdout=log, stderr=subprocess.STDOUT)
        rc = proc.wait()
    if rc != 0 or not is_built(path):
        raise ControlPlaneError(f"build.sh failed (exit {rc}); log {log_path}:\n{_tail(log_path, 60)}")
    return path


def _volcano_built() -> bool:
    """The script decides, since it knows which binaries a complete build has."""
    return subprocess.run(["bash", str(BUILD_VOLCANO_SH), "--check"], capture_output=True).returncode == 0


def ensure_volcano_built(*, stream: IO[str] | None = None) -> Path:
    """Volcano's binaries and CRDs (build-volcano.sh's output), building them first if needed
    (about 3 minutes cold on 2 cores). Raises ControlPlaneError with the build log's tail."""
    path = Path(subprocess.run(["bash", str(BUILD_VOLCANO_SH), "--print"], capture_output=True, text=True,
                               check=True).stdout.strip().splitlines()[-1])
    if _volcano_built():
        return path
    print(f"[gpu-portal cluster] building Volcano into {path} (cold build: ~7 min on 2 cores)",
          file=stream if stream is not None else sys.stderr, flush=True)
    log_path = Path(tempfile.gettempdir()) / f"gpu-portal-volcano-build-{os.getpid()}.log"
    with open(log_path, "w") as log:
        rc = subprocess.run(["bash", str(BUILD_VOLCANO_SH)], stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0 or not _volcano_built():
        raise ControlPlaneError(f"build-volcano.sh failed (exit {rc}); log {log_path}:\n{_tail(log_path, 60)}")
    return path


# ----------------------------------------------------------------------------- helpers


def _tail(path: Path, lines: int = 40) -> str:
    try:
        data = Path(path).read_bytes()[-64 * 1024:].decode("utf-8", "replace")
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return "\n".join(data.splitlines()[-lines:])


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.2,
             message: str = "condition", on_poll: Callable[[], None] | None = None) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned); exceptions count as falsy."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        if on_poll is not None:
            on_poll()
        try:
            value = predicate()
            if value:
                return value
        except ControlPlaneError:
            raise
        except Exception as e:  # noqa: BLE001 - polling
            last_exc = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {message}{extra}")
        time.sleep(interval)


def _wait_established(ext: Any, names: list[str], *, what: str) -> None:
    """Until the API server serves every one of these CRDs (`ext`: an ApiextensionsV1Api)."""
    def established() -> bool:
        for n in names:
            crd = ext.read_custom_resource_definition(n)
            conds = {c.type: c.status for c in ((crd.status and crd.status.conditions) or [])}
            if conds.get("Established") != "True":
                return False
        return True

    wait_for(established, timeout=30, interval=0.1, message=f"{what} to be established")


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class _Proc:
    def __init__(self, name: str, popen: subprocess.Popen, log_path: Path):
        self.name, self.popen, self.log_path = name, popen, log_path


# ----------------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + KWOK + a queue backend:
    Kueue, or Volcano's scheduler and controller manager (``queue_backend="volcano"``).

    ``ControlPlane(cache_dir=None, *, workdir=None, keep_workdir=None, pod_run_seconds=2.0,
    start_timeout=120.0, queue_backend="kueue")``. ``cache_dir`` defaults to ``ensure_built()``.
    Everything lives in a fresh temp dir (``workdir``) that ``stop()`` removes unless ``keep_workdir`` (or
    env ``GPU_PORTAL_CP_KEEP_WORKDIR=1``). ``kueue_config`` replaces top-level fields of
    Kueue's Configuration (e.g. ``controller`` with Kueue's shipped ``groupKindConcurrency``,
    which the tests leave at one reconcile at a time).
    """

    def __init__(self, cache_dir: str | os.PathLike | None = None, *, workdir: str | os.PathLike | None = None,
                 keep_workdir: bool | None = None, pod_run_seconds: float = 2.0, start_timeout: float = 120.0,
                 verbosity: int = 1, pods_ready_timeout: float = 15.0, kueue_config: Mapping[str, Any] | None = None,
                 queue_backend: str = "kueue"):
        if queue_backend not in QUEUE_BACKENDS:
            raise ValueError(f"queue_backend must be one of {QUEUE_BACKENDS}, not {queue_backend!r}")
        self.queue_backend = queue_backend
        self.volcano: Path | None = None
        self._cache_arg = Path(cache_dir) if cache_dir else None
        self._workdir_arg = Path(workdir) if workdir else None
        if keep_workdir is None:
            keep_workdir = os.environ.get("GPU_PORTAL_CP_KEEP_WORKDIR", "") not in ("", "0", "false")
        self.keep_workdir = keep_workdir
        self.pod_run_seconds = pod_run_seconds
        self.start_timeout = start_timeout
        self.verbosity = verbosity
        self.pods_ready_timeout = pods_ready_timeout
        self.kueue_config = dict(kueue_config or {})
        # Whether Kueue serves visibility.kueue.x-k8s.io here: decided when Kueue starts.
        self.serves_visibility: bool | None = None
        self._procs: list[_Proc] = []
        self._started = False
        self.workdir: Path | None = None
        self.cache: Path | None = None
        self.ports: dict[str, int] = {}
        self.timings: dict[str, float] = {}
        self._etcd_dir: Path | None = None

    # ---- public properties -------------------------------------------------------------
    @property
    def kubeconfig_path(self) -> Path:
        return self._need_workdir() / "admin.kubeconfig"

    @property
    def logs_dir(self) -> Path:
        return self._need_workdir() / "logs"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def bin_dir(self) -> Path:
        return self._need_cache() / "bin"

    def _need_cache(self) -> Path:
        if self.cache is None:
            raise ControlPlaneError("control plane not started")
        return self.cache

    def _need_workdir(self) -> Path:
        if self.workdir is None:
            raise ControlPlaneError("control plane not started")
        return self.workdir

    # ---- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        if self._started:
            return self
        t0 = time.monotonic()
        self.cache = self._cache_arg or ensure_built()
        if not (self.cache / ".complete").is_file():
            raise ControlPlaneError(f"incomplete control-plane build in {self.cache}; run: bash {BUILD_SH}")
        if self._workdir_arg:
            self._workdir_arg.mkdir(parents=True, exist_ok=True)
            self.workdir = self._workdir_arg
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="gpu-portal-cp-"))
        self.logs_dir.mkdir(exist_ok=True)
        self._started = True
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Kill every component (process groups), then remove the temp dir."""
        procs, self._procs = self._procs, []
        for p in reversed(procs):
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 1.0  # throw-away cluster: no need for graceful drains
        for p in reversed(procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=max(0.05, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.popen.pid, signal.SIGKILL)  # also stray children of the group
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=5)
        if self._etcd_dir is not None:
            shutil.rmtree(self._etcd_dir, ignore_errors=True)
            self._etcd_dir = None
        if self.workdir is not None and not self.keep_workdir and self._workdir_arg is None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._started = False

    # ---- clients -----------------------------------------------------------------------
    def api_client(self) -> ApiClient:
        """A new ``kubernetes.client.ApiClient`` authenticated as cluster admin."""
        import kubernetes.client

        cfg = kubernetes.client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self._need_workdir() / "pki" / "ca.crt")
        cfg.cert_file = str(self._need_workdir() / "pki" / "admin.crt")
        cfg.key_file = str(self._need_workdir() / "pki" / "admin.key")
        cfg.verify_ssl = True
        return kubernetes.client.ApiClient(cfg)

    def kubectl(self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60) -> str:
        """Run the built kubectl against this cluster; returns stdout."""
        res = subprocess.run([str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig_path), *args],
                             capture_output=True, text=True, input=input, timeout=timeout)
        if check and res.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout

    # ---- nodes -------------------------------------------------------------------------
    def add_gpu_node(self, name: str, *, labels: dict[str, str] | None = None,
                     allocatable: Mapping[str, str | int] | None = None, taints: list[dict] | None = None,
                     timeout: float = 30.0) -> dict:
        """Create a KWOK-managed fake node and wait until it is Ready and schedulable.

        ``allocatable`` is merged over cpu=64, memory=512Gi, pods=110, ephemeral-storage=1Ti,
        e.g. ``{"nvidia.com/gpu": "8"}``; it is used for both capacity and allocatable.
        ``taints`` are dicts like ``{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}``.
        Returns the node as a dict.
        """
        import kubernetes.client

        res = {**DEFAULT_NODE_ALLOCATABLE, **{k: str(v) for k, v in (allocatable or {}).items()}}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    **(labels or {}),
                },
                "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {"taints": list(taints)} if taints else {},
            "status": {"allocatable": res, "capacity": dict(res)},
        }
        with self.api_client() as api:
            core = kubernetes.client.CoreV1Api(api)
            core.create_node(body)  # type: ignore[arg-type]  # the client sends a plain dict as it is

            def ready() -> V1Node | None:
                node = core.read_node(name)
                conds = {c.type: c.status for c in ((node.status and node.status.conditions) or [])}
                taints = (node.spec and node.spec.taints) or []
                not_ready_taints = [t for t in taints if t.key.startswith("node.kubernetes.io/")]
                return node if conds.get("Ready") == "True" and not not_ready_taints else None

            node = wait_for(ready, timeout=timeout, message=f"fake node {name} to become Ready",
                            on_poll=self._check_alive)
            return api.sanitize_for_serialization(node)

    def set_node_allocatable(self, name: str, allocatable: Mapping[str, str | int]) -> dict:
        """What a device plugin does when devices turn unhealthy: the node's allocatable drops
        below its capacity (a patch of its status; capacity stays). Returns the node as a dict."""
        import kubernetes.client

        with self.api_client() as api:
            core = kubernetes.client.CoreV1Api(api)
            patch = {"status": {"allocatable": {k: str(v) for k, v in allocatable.items()}}}
            node = core.patch_node_status(name, patch)
            return api.sanitize_for_serialization(node)

    def delete_node(self, name: str, *, timeout: float = 30.0) -> None:
        """Delete a node and wait until it is gone (its pods are then garbage-collected by podgc)."""
        import kubernetes.client
        from kubernetes.client.exceptions import ApiException

        with self.api_client() as api:
            core = kubernetes.client.CoreV1Api(api)
            try:
                core.delete_node(name)
            except ApiException as e:
                if e.status != 404:
                    raise

            def gone() -> bool:
                try:
                    core.read_node(name)
                    return False
                except ApiException as e:
                    return e.status == 404

            wait_for(gone, timeout=timeout, message=f"node {name} to be deleted")

    # ---- internals ---------------------------------------------------------------------
    def _start(self) -> None:
        names = ["etcd", "etcd_peer", "apiserver", "kcm", "scheduler", "kueue_webhook", "kueue_metrics",
                 "kueue_health", "kueue_visibility", "kwok", "volcano_scheduler", "volcano_scheduler_health",
                 "volcano_controllers_health", "volcano_webhook", "volcano_webhook_health"]
        self.ports = dict(zip(names, _free_ports(len(names)), strict=True))
        t = time.monotonic()
        self._make_pki()
        self._write_kubeconfig()
        self.timings["pki"] = time.monotonic() - t

        t = time.monotonic()
        self._start_etcd()
        self._start_apiserver()
        self._wait_https("apiserver", f"{self.server}/readyz", timeout=self.start_timeout)
        self.timings["apiserver"] = time.monotonic() - t

        t = self._t_addons = time.monotonic()
        self._start_kcm()
        self._start_scheduler()
        self._start_kwok()
        if self.queue_backend == "kueue":
            self._install_kueue_objects()
            self._start_kueue()
            self.timings["kueue_objects"] = time.monotonic() - t
        else:
            self._start_volcano()
        self._wait_https("kube-controller-manager", f"https://127.0.0.1:{self.ports['kcm']}/healthz", timeout=60)
        self.timings["kcm_ready"] = time.monotonic() - t
        self._wait_https("kube-scheduler", f"https://127.0.0.1:{self.ports['scheduler']}/healthz", timeout=60)
        self._wait_http("kwok", f"http://127.0.0.1:{self.ports['kwok']}/healthz", timeout=60)
        self.timings["scheduler_kwok_ready"] = time.monotonic() - t
        if self.queue_backend == "kueue":
            self._wait_kueue_ready()
        else:
            self._wait_volcano_ready()
        self.timings["addons"] = time.monotonic() - t

    # -- processes
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> _Proc:
        log_path = self.logs_dir / f"{name}.log"
        full_env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
        full_env.update(env or {})
        with open(self.logs_dir / "commands.txt", "a") as f:
            f.write(f"# {name}\n{' '.join(argv)}\n")
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=full_env, cwd=str(self.workdir), start_new_session=True,
                                     preexec_fn=_set_pdeathsig)
        proc = _Proc(name, popen, log_path)
        self._procs.append(proc)
        return proc

    def _check_alive(self) -> None:
        for p in self._procs:
            rc = p.popen.poll()
            if rc is not None:
                raise ControlPlaneError(
                    f"{p.name} exited with code {rc}; last lines of {p.log_path}:\n{_tail(p.log_path)}")

    def _fail(self, component: str, why: str) -> ControlPlaneError:
        p = next((p for p in self._procs if p.name == component), None)
        tail = f"\nlast lines of {p.log_path}:\n{_tail(p.log_path)}" if p else ""
        return ControlPlaneError(f"{component}: {why}{tail}")

    def _ssl_context(self, *, client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self._need_workdir() / "pki" / "ca.crt"))
        if client_cert:
            ctx.load_cert_chain(str(self._need_workdir() / "pki" / "admin.crt"),
                                str(self._need_workdir() / "pki" / "admin.key"))
        return ctx

    def _wait_https(self, component: str, url: str, *, timeout: float, client_cert: bool = True) -> None:
        ctx = self._ssl_context(client_cert=client_cert)

        def ok() -> bool:
            with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
                return r.status == 200

        try:
            wait_for(ok, timeout=timeout, interval=0.1, message=f"{component} at {url}", on_poll=self._check_alive)
        except TimeoutError as e:
            raise self._fail(component.split(" ")[0], str(e)) from None

    def _wait_http(self, component: str, url: str, *, timeout: float) -> None:
        def ok() -> bool:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status == 200

        try:
            wait_for(ok, timeout=timeout, interval=0.1, message=f"{component} at {url}", on_poll=self._check_alive)
        except TimeoutError as e:
            raise self._fail(component, str(e)) from None

    # -- PKI
    def _openssl(self, *args: str) -> None:
        res = subprocess.run(["openssl", *args], cwd=str(self._need_workdir() / "pki"), capture_output=True, text=True)
        if res.returncode != 0:
            raise ControlPlaneError(f"openssl {' '.join(args)} failed: {res.stderr.strip()}")

    def _make_pki(self) -> None:
        if shutil.which("openssl") is None:
            raise ControlPlaneError("openssl not found; run build.sh (it installs it) or apt-get install openssl")
        pki = self._need_workdir() / "pki"
        pki.mkdir()
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        (pki / "openssl.cnf").write_text(
            "[req]\ndistinguished_name=dn\n[dn]\n"
            "[ca]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\n"
            "subjectKeyIdentifier=hash\n"
            "[server]\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,"
            "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
            "[webhook]\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "[client]\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n")
        self._openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
                      "-subj", "/CN=gpu-portal-test-ca", "-config", "openssl.cnf", "-extensions", "ca")
        leaves = {
            "apiserver": ("/CN=kube-apiserver", "server"),
            "serving": ("/CN=localhost", "webhook"),           # kcm / scheduler secure port
            "kueue-webhook": ("/CN=kueue-webhook", "webhook"),
            "volcano-webhook": ("/CN=volcano-webhook", "webhook"),
            "admin": ("/O=system:masters/CN=gpu-portal-admin", "client"),
            "front-proxy-client": ("/CN=front-proxy-client", "client"),  # aggregation layer
        }
        for name, (subj, ext) in leaves.items():
            self._openssl("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj,
                          "-config", "openssl.cnf")
            self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                          "-CAcreateserial", "-days", "3650", "-out", f"{name}.crt", "-extfile", "openssl.cnf",
                          "-extensions", ext)
        # service-account token signing key pair
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", "sa.key")
        self._openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        certs = self._need_workdir() / "kueue-webhook-certs"
        certs.mkdir()
        shutil.copy(pki / "kueue-webhook.crt", certs / "tls.crt")
        shutil.copy(pki / "kueue-webhook.key", certs / "tls.key")
        shutil.copy(pki / "ca.crt", certs / "ca.crt")

    def _write_kubeconfig(self) -> None:
        pki = self._need_workdir() / "pki"
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gpu-portal-test", "cluster": {
                "server": self.server, "certificate-authority": str(pki / "ca.crt")}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}}],
            "contexts": [{"name": "gpu-portal-test", "context": {"cluster": "gpu-portal-test", "user": "admin"}}],
            "current-context": "gpu-portal-test",
        }
        self.kubeconfig_path.write_text(yaml.safe_dump(cfg, sort_keys=False))

    # -- etcd / apiserver / kcm / scheduler
    def _start_etcd(self) -> None:
        etcd = self.bin_dir / "etcd"
        if not etcd.exists():
            raise ControlPlaneError(f"{etcd} missing; run: bash {BUILD_SH}")
        # tmpfs + --unsafe-no-fsync: durability is irrelevant for a throw-away test cluster.
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.workdir
        self._etcd_dir = Path(tempfile.mkdtemp(prefix="gpu-portal-etcd-", dir=str(base)))
        c, p = self.ports["etcd"], self.ports["etcd_peer"]
        self._spawn("etcd", [
            str(etcd), "--name=default", f"--data-dir={self._etcd_dir}",
            f"--listen-client-urls=http://127.0.0.1:{c}", f"--advertise-client-urls=http://127.0.0.1:{c}",
            f"--listen-peer-urls=http://127.0.0.1:{p}", f"--initial-advertise-peer-urls=http://127.0.0.1:{p}",
            f"--initial-cluster=default=http://127.0.0.1:{p}", "--initial-cluster-state=new",
            "--unsafe-no-fsync", "--snapshot-count=100000", "--quota-backend-bytes=2147483648",
            "--log-level=warn",
        ])

    def _start_apiserver(self) -> None:
        self._spawn("kube-apiserver", self._apiserver_argv(self.ports["apiserver"]))

    def start_apiserver_replica(self, *extra_flags: str) -> str:
        """Another kube-apiserver on the same etcd, as in a highly available control plane, with
        extra flags: `--watch-cache=false` makes every watch read etcd, so one resumed after
        `etcd_compact()` gets a real 410. Returns its URL; it stops with the control plane."""
        port = _free_ports(1)[0]
        name = f"kube-apiserver-{port}"
        self._spawn(name, [*self._apiserver_argv(port), *extra_flags])
        url = f"https://127.0.0.1:{port}"
        self._wait_https(name, f"{url}/readyz", timeout=self.start_timeout)
        return url

    def stop_apiserver_replica(self, url: str) -> None:
        name = f"kube-apiserver-{url.rsplit(':', 1)[1]}"
        for proc in [p for p in self._procs if p.name == name]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=10)
            self._procs.remove(proc)

    def etcd_compact(self) -> int:
        """Compacts etcd's history up to its current revision, as the API server does every five
        minutes; a watch resumed from an older resourceVersion then gets 410 Gone. Returns the revision."""
        base = f"http://127.0.0.1:{self.ports['etcd']}/v3/kv"

        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            request = urllib.request.Request(f"{base}/{path}", data=json.dumps(body).encode(), method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                return dict(json.load(answer))

        revision = int(post("range", {"key": base64.b64encode(b"/registry/").decode(), "limit": 1})["header"]["revision"])
        post("compaction", {"revision": str(revision), "physical": True})
        return revision

    def _apiserver_argv(self, port: int) -> list[str]:
        pki = self._need_workdir() / "pki"
        return [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--requestheader-client-ca-file={pki / 'ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            f"--token-auth-file={self._visibility_token_file()}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=Node,RBAC",
            (
                "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,PodSecurity,"
                "ResourceQuota,Priority,DefaultTolerationSeconds,TaintNodesByCondition,NodeRestriction,"
                "MutatingAdmissionWebhook,ValidatingAdmissionWebhook"
            ),
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",  # 127.0.0.1 is not a valid Endpoints address
            f"--cert-dir={self._need_workdir() / 'apiserver-certs'}",
            "--profiling=false",
            "--event-ttl=1h",
            "--delete-collection-workers=4",
            f"--v={self.verbosity}",
        ]

    def _component_common(self, port: int) -> list[str]:
        kc = str(self.kubeconfig_path)
        pki = self._need_workdir() / "pki"
        return [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={port}",
                f"--tls-cert-file={pki / 'serving.crt'}", f"--tls-private-key-file={pki / 'serving.key'}",
                f"--client-ca-file={pki / 'ca.crt'}", f"--v={self.verbosity}"]

    def _start_kcm(self) -> None:
        pki = self._need_workdir() / "pki"
        self._spawn("kube-controller-manager", [
            str(self.bin_dir / "kube-controller-manager"), *self._component_common(self.ports["kcm"]),
            # Every default-on controller: the Job, Deployment, ReplicaSet and StatefulSet ones, resource
            # quota, namespace, garbage collector, service-account tokens, node lifecycle, pod GC and more.
            "--controllers=*",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--use-service-account-credentials=false",
            "--resource-quota-sync-period=5s", "--concurrent-resource-quota-syncs=10",
            "--concurrent-job-syncs=10", "--concurrent-namespace-syncs=10", "--concurrent-gc-syncs=20",
            "--kube-api-qps=200", "--kube-api-burst=400",
            "--node-monitor-grace-period=50s",
        ])

    def _start_scheduler(self) -> None:
        self._spawn("kube-scheduler", [
            str(self.bin_dir / "kube-scheduler"), *self._component_common(self.ports["scheduler"]),
            "--kube-api-qps=200", "--kube-api-burst=400",
        ])

    # -- KWOK
    def _kwok_stages(self) -> list[dict]:
        stage_dir = self._need_cache() / "kwok" / "stage"

        def load(rel: str) -> dict:
            return yaml.safe_load((stage_dir / rel).read_text())

        node_init = load("node/fast/node-initialize.yaml")
        heartbeat = load("node/heartbeat-with-lease/node-heartbeat-with-lease.yaml")
        pod_ready = load("pod/fast/pod-ready.yaml")
        pod_delete = load("pod/fast/pod-delete.yaml")
        base_complete = load("pod/fast/pod-complete.yaml")

        delay_ms = int(self.pod_run_seconds * 1000)
        not_deleted = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
        running = {"key": ".status.phase", "operator": "In", "values": ["Running"]}
        outcome_key = f'.metadata.annotations["{ANNOTATION_OUTCOME}"]'
        delay = {"durationMilliseconds": delay_ms,
                 "durationFrom": {"expressionFrom": f'.metadata.annotations["{ANNOTATION_RUN_DURATION}"]'}}

        def finishing(name: str, match: list[dict], phase: str, exit_code: int, reason: str) -> dict:
            st = copy.deepcopy(base_complete)
            st["metadata"]["name"] = name
            st["spec"]["selector"] = {"matchExpressions": [not_deleted, running, *match]}
            st["spec"]["delay"] = copy.deepcopy(delay)
            tmpl = st["spec"]["next"]["statusTemplate"]
            tmpl = tmpl.replace("exitCode: 0", f"exitCode: {exit_code}").replace("reason: Completed",
                                                                                 f"reason: {reason}")
            st["spec"]["next"]["statusTemplate"] = tmpl.replace("phase: Succeeded", f"phase: {phase}")
            return st

        job_owned = {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]}
        stages = [
            node_init,
            heartbeat,
            pod_ready,
            # Job pods finish after the delay unless told otherwise ...
            finishing("pod-complete", [job_owned, {"key": outcome_key, "operator": "NotIn",
                                                   "values": ["Failed", "Running"]}], "Succeeded", 0, "Completed"),
            # ... any pod annotated outcome=Succeeded / Failed finishes that way.
            finishing("pod-complete-annotated", [{"key": outcome_key, "operator": "In", "values": ["Succeeded"]}],
                      "Succeeded", 0, "Completed"),
            finishing("pod-fail", [{"key": outcome_key, "operator": "In", "values": ["Failed"]}],
                      "Failed", 1, "Error"),
            pod_delete,
        ]
        return stages

    def _start_kwok(self) -> None:
        cfg = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "metadata": {"name": "gpu-portal"},
            "options": {
                "manageNodesWithAnnotationSelector": f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
                "serverAddress": f"127.0.0.1:{self.ports['kwok']}",
                "nodeLeaseDurationSeconds": 40,
                # defaults only applied by kwokctl; the bare binary needs them explicitly
                "nodeLeaseParallelism": 4,
                "nodePlayStageParallelism": 4,
                "podPlayStageParallelism": 4,
                "podsOnNodeSyncParallelism": 2,
                "cidr": "10.244.0.0/16",
                "nodeIP": "10.255.0.1",
            },
        }
        path = self._need_workdir() / "kwok.yaml"
        path.write_text(yaml.safe_dump_all([cfg, *self._kwok_stages()], sort_keys=False))
        self._spawn("kwok", [
            str(self.bin_dir / "kwok"), f"--kubeconfig={self.kubeconfig_path}", f"--config={path}",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
            f"--server-address=127.0.0.1:{self.ports['kwok']}",
            "--node-lease-duration-seconds=40", "--cidr=10.244.0.0/16",
        ])

    # -- Kueue
    def _ca_bundle(self) -> str:
        return base64.b64encode((self._need_workdir() / "pki" / "ca.crt").read_bytes()).decode()

    def _webhook_url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.ports['kueue_webhook']}{path}"

    def _install_kueue_objects(self) -> None:
        import kubernetes.client
        from kubernetes.client.exceptions import ApiException

        crd_dir = self._need_cache() / "kueue" / "crd"
        kust = yaml.safe_load((crd_dir / "kustomization.yaml").read_text()) or {}
        conversion_crds = set()
        for patch in kust.get("patches") or []:
            ppath = patch.get("path", "") if isinstance(patch, dict) else ""
            if "webhook_in_" in ppath:
                doc = yaml.safe_load((crd_dir / ppath).read_text())
                conversion_crds.add(doc["metadata"]["name"])
        ca = self._ca_bundle()
        with self.api_client() as api:
            ext = kubernetes.client.ApiextensionsV1Api(api)
            names = []
            for f in sorted((crd_dir / "bases").glob("*.yaml")):
                crd = yaml.safe_load(f.read_text())
                if crd["metadata"]["name"] in conversion_crds:
                    crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                        "clientConfig": {"url": self._webhook_url("/convert"), "caBundle": ca},
                        "conversionReviewVersions": ["v1"]}}
                ext.create_custom_resource_definition(crd)
                names.append(crd["metadata"]["name"])
            self.timings["crds_created"] = time.monotonic() - self._t_addons
            core = kubernetes.client.CoreV1Api(api)
            try:
                core.create_namespace({"metadata": {"name": "kueue-system"}})  # type: ignore[arg-type]  # as create_node
            except ApiException as e:
                if e.status != 409:
                    raise

            adm = kubernetes.client.AdmissionregistrationV1Api(api)
            for doc in yaml.safe_load_all((self._need_cache() / "kueue" / "webhook" / "manifests.yaml").read_text()):
                if not doc:
                    continue
                doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
                for wh in doc.get("webhooks") or []:
                    path = wh["clientConfig"]["service"]["path"]
                    wh["clientConfig"] = {"url": self._webhook_url(path), "caBundle": ca}
                    groups = {g for r in wh.get("rules") or [] for g in r.get("apiGroups") or []}
                    if "kueue.x-k8s.io" not in groups:  # job webhooks: like Kueue's kustomization
                        wh["namespaceSelector"] = {"matchExpressions": [{
                            "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                            "values": list(SYSTEM_NAMESPACES)}]}
                    wh.setdefault("timeoutSeconds", 10)
                if doc["kind"] == "MutatingWebhookConfiguration":
                    adm.create_mutating_webhook_configuration(doc)
                else:
                    adm.create_validating_webhook_configuration(doc)

            self.timings["webhooks_created"] = time.monotonic() - self._t_addons
            _wait_established(ext, names, what="Kueue CRDs")

    def _ensure_kueue_certs(self) -> None:
        # Kueue >= 0.13 hard-codes the serving cert paths of its metrics endpoint
        # (/etc/kueue/metrics/certs) and of its visibility server (/visibility) when internal
        # cert management is off, and exits (metrics) or serves no visibility API without them.
        # Their content does not matter to us (both are only on loopback; the apiserver reaches
        # the visibility server with insecureSkipTLSVerify), so install a self-signed pair once.
        for d in (Path("/etc/kueue/metrics/certs"), Path("/visibility")):
            if (d / "tls.crt").is_file() and (d / "tls.key").is_file():
                continue
            try:
                d.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(dir=str(d)))
                subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                "-nodes", "-keyout", str(tmp / "tls.key"), "-out", str(tmp / "tls.crt"), "-days",
                                "36500", "-subj", "/CN=kueue-local", "-addext",
                                "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                               check=True, capture_output=True)
                os.replace(tmp / "tls.key", d / "tls.key")
                os.replace(tmp / "tls.crt", d / "tls.crt")
                shutil.rmtree(tmp, ignore_errors=True)
            except (OSError, subprocess.CalledProcessError) as e:
                raise ControlPlaneError(
                    f"Kueue needs a serving cert in {d} (tls.crt/tls.key) and it could not be created ({e}); "
                    "run once as root or create it by hand") from None

    def _start_kueue(self) -> None:
        self._ensure_kueue_certs()
        cfg = kueue_configuration(
            yaml.safe_load(SHIPPED_KUEUE_CONFIG.read_text()), pods_ready_timeout=self.pods_ready_timeout,
            local={
                "namespace": "kueue-system",
                "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports['kueue_health']}"},
                "metrics": {"bindAddress": f"127.0.0.1:{self.ports['kueue_metrics']}"},
                "webhook": {"port": self.ports["kueue_webhook"], "host": "127.0.0.1",
                            "certDir": str(self._need_workdir() / "kueue-webhook-certs")},
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": self.ports["kueue_visibility"]},
                "clientConnection": {"qps": 200, "burst": 400},
                **self.kueue_config,
            })
        path = self._need_workdir() / "kueue-config.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        argv = [str(self.bin_dir / "kueue"), f"--config={path}", f"--zap-log-level={max(self.verbosity, 1) + 1}"]
        env = {"KUBECONFIG": str(self.kubeconfig_path)}
        if self._in_cluster_identity():
            # The visibility server authenticates its callers through the apiserver with the
            # in-cluster service-account files only (no flag names another kubeconfig). Each
            # control plane has its own CA, so Kueue sees its own files at the fixed path in a
            # private mount namespace rather than files shared between concurrent harnesses.
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    'mount --bind "$0" ' + IN_CLUSTER_DIR + ' && exec "$@"', str(self._need_workdir() / "in-cluster"), *argv]
            env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(self.ports["apiserver"]))
            self.serves_visibility = True
        else:
            argv.append("--feature-gates=VisibilityOnDemand=false")
        self._spawn("kueue", argv, env=env)

    def _visibility_token_file(self) -> Path:
        """A static token for Kueue's visibility server to ask the apiserver who its callers are."""
        workdir = self._need_workdir()
        token = secrets.token_hex(16)
        (workdir / "in-cluster").mkdir(exist_ok=True)
        (workdir / "in-cluster" / "token").write_text(token)
        path = workdir / "static-tokens.csv"
        path.write_text(f'{token},kueue-visibility,kueue-visibility,"system:masters"\n')
        return path

    def _in_cluster_identity(self) -> bool:
        """Whether Kueue can be given in-cluster files in a mount namespace of its own (root, and
        a kernel that lets it unshare one); without them the harness runs Kueue without its
        visibility server and the portal falls back to its own queue estimate, as on a cluster
        that does not serve the API."""
        if self.serves_visibility is not None:
            return self.serves_visibility
        shutil.copy(self._need_workdir() / "pki" / "ca.crt", self._need_workdir() / "in-cluster" / "ca.crt")
        try:
            Path(IN_CLUSTER_DIR).mkdir(parents=True, exist_ok=True)
            probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                    f'mount --bind "$0" {IN_CLUSTER_DIR} && test -s {IN_CLUSTER_DIR}/token',
                                    str(self._need_workdir() / "in-cluster")], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return False
        return probe.returncode == 0

    def _wait_kueue_ready(self) -> None:
        import kubernetes.client

        self._wait_http("kueue", f"http://127.0.0.1:{self.ports['kueue_health']}/readyz", timeout=90)
        self.timings["kueue_readyz"] = time.monotonic() - self._t_addons
        with self.api_client() as api:
            co = kubernetes.client.CustomObjectsApi(api)
            body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                    "metadata": {"name": "harness-readiness-probe"}, "spec": {}}
            try:
                wait_for(lambda: co.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "resourceflavors",
                                                                 body, dry_run="All"),
                         timeout=60, interval=0.2, message="Kueue webhooks to answer (dry-run ResourceFlavor)",
                         on_poll=self._check_alive)
            except TimeoutError as e:
                raise self._fail("kueue", str(e)) from None
        if self.serves_visibility:
            self._register_visibility_api()

    def _register_visibility_api(self) -> None:
        """Serves Kueue's pending-workloads API (visibility.kueue.x-k8s.io) through the apiserver,
        as Kueue's own manifests do. An ExternalName Service lets the aggregator reach the
        visibility server on loopback without a Service network; its cert is self-signed."""
        import kubernetes.client

        port = self.ports["kueue_visibility"]
        service = {"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "kueue-visibility-server", "namespace": "kueue-system"},
                   "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]}}
        with self.api_client() as api:
            kubernetes.client.CoreV1Api(api).create_namespaced_service("kueue-system", service)  # type: ignore[arg-type]
            registration = kubernetes.client.ApiregistrationV1Api(api)
            for version in ("v1beta1", "v1beta2"):
                registration.create_api_service({  # type: ignore[arg-type]
                    "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                    "metadata": {"name": f"{version}.visibility.kueue.x-k8s.io"},
                    "spec": {"group": "visibility.kueue.x-k8s.io", "version": version, "groupPriorityMinimum": 100,
                             "versionPriority": 100 if version == "v1beta2" else 90, "insecureSkipTLSVerify": True,
                             "service": {"name": "kueue-visibility-server", "namespace": "kueue-system", "port": port}},
                })

    # -- Volcano
    def _start_volcano(self) -> None:
        """Volcano's CRDs, then its controller manager and scheduler (with the portal's shipped
        configuration), on loopback and without leader election, and its webhook manager serving
        /pods/validate alone: in 1.10 only that webhook keeps pods out of a closed Queue. No
        mutating webhook: the portal writes every field it would default (queue, scheduler, minMember)."""
        import kubernetes.client

        self.volcano = ensure_volcano_built()
        with self.api_client() as api:
            ext = kubernetes.client.ApiextensionsV1Api(api)
            names = []
            for f in sorted((self.volcano / "crd").glob("*.yaml")):
                crd = yaml.safe_load(f.read_text())
                ext.create_custom_resource_definition(crd)
                names.append(crd["metadata"]["name"])
            _wait_established(ext, names, what="Volcano's CRDs")
            self.timings["volcano_crds"] = time.monotonic() - self._t_addons
            # The manager only waits for its configuration (then sets caBundle); the chart makes it.
            hook = yaml.safe_load(VOLCANO_WEBHOOKS.read_text())
            for wh in hook["webhooks"]:
                wh["clientConfig"] = {"url": self._volcano_webhook_url() + "/pods/validate", "caBundle": self._ca_bundle()}
            kubernetes.client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(hook)
        kc = str(self.kubeconfig_path)
        env = {"KUBECONFIG": kc}  # its vGPU code reads a kubeconfig at start, from here or ~/.kube/config
        self._spawn("vc-controller-manager", [
            str(self.volcano / "bin" / "vc-controller-manager"), f"--kubeconfig={kc}", "--leader-elect=false",
            f"--controllers={VOLCANO_CONTROLLERS}", "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{self.ports['volcano_controllers_health']}",
            "--kube-api-qps=200", "--kube-api-burst=400", "--logtostderr", f"-v={self.verbosity + 1}",
        ], env=env)
        self._spawn("vc-scheduler", [
            str(self.volcano / "bin" / "vc-scheduler"), f"--kubeconfig={kc}", "--leader-elect=false",
            f"--scheduler-conf={SHIPPED_VOLCANO_SCHEDULER_CONF}", "--schedule-period=500ms",
            f"--listen-address=127.0.0.1:{self.ports['volcano_scheduler']}", "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{self.ports['volcano_scheduler_health']}", "--cache-dumper=false",
            "--kube-api-qps=200", "--kube-api-burst=400", "--logtostderr", f"-v={self.verbosity + 1}",
        ], env=env)
        pki = self._need_workdir() / "pki"
        # No --admission-conf: it only configures /pods/mutate (it logs "loadAdmissionConf failed.").
        self._spawn("vc-webhook-manager", [
            str(self.volcano / "bin" / "vc-webhook-manager"), f"--kubeconfig={kc}",
            "--enabled-admission=/pods/validate", "--listen-address=127.0.0.1",
            f"--port={self.ports['volcano_webhook']}", f"--webhook-url={self._volcano_webhook_url()}",
            f"--ca-cert-file={pki / 'ca.crt'}", f"--tls-cert-file={pki / 'volcano-webhook.crt'}",
            f"--tls-private-key-file={pki / 'volcano-webhook.key'}", "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{self.ports['volcano_webhook_health']}",
            "--kube-api-qps=200", "--kube-api-burst=400", "--logtostderr", f"-v={self.verbosity + 1}",
        ], env=env)

    def _volcano_webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['volcano_webhook']}"

    def _wait_volcano_webhook(self, api: ApiClient) -> None:
        """Until the API server gets the webhook's own refusal of a pod (dry run) whose PodGroup
        does not exist: then the manager serves and its configuration leads to it. Its health
        check answers sooner, while the manager still waits for that configuration."""
        import kubernetes.client
        from kubernetes.client.exceptions import ApiException

        # Served over TLS, and a client cert it cannot verify is refused: none is sent.
        self._wait_https("vc-webhook-manager", f"https://127.0.0.1:{self.ports['volcano_webhook_health']}/healthz",
                         timeout=60, client_cert=False)
        core = kubernetes.client.CoreV1Api(api)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "harness-webhook-probe", "annotations": {"scheduling.k8s.io/group-name": "harness-no-such-group"}},
            "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "image": "registry.invalid/probe:1"}]}}

        def refused() -> bool:
            try:
                core.create_namespaced_pod("default", pod, dry_run="All")  # type: ignore[arg-type]  # a dict, as create_node
            except ApiException as e:  # also: the namespace's ServiceAccount not made yet
                message = json.loads(e.body or "{}").get("message", "")
                return message.startswith('admission webhook "validatepod.volcano.sh" denied')
            raise ControlPlaneError("vc-webhook-manager: a pod of a missing PodGroup was admitted")

        try:
            wait_for(refused, timeout=60, interval=0.2, message="Volcano's /pods/validate webhook to refuse a dry-run pod",
                     on_poll=self._check_alive)
        except TimeoutError as e:
            raise self._fail("vc-webhook-manager", str(e)) from None
        self.timings["volcano_webhook_ready"] = time.monotonic() - self._t_addons

    def _wait_volcano_ready(self) -> None:
        """All three components answer their health checks, the webhook refuses what it should,
        and the queue `default` the scheduler makes is open (the queue controller's doing):
        Volcano schedules from then on."""
        import kubernetes.client

        for component, port in (("vc-controller-manager", "volcano_controllers_health"),
                                ("vc-scheduler", "volcano_scheduler_health")):
            self._wait_http(component, f"http://127.0.0.1:{self.ports[port]}/healthz", timeout=60)
        with self.api_client() as api:
            self._wait_volcano_webhook(api)
            co = kubernetes.client.CustomObjectsApi(api)

            def default_open() -> bool:
                try:
                    queue: dict[str, Any] = co.get_cluster_custom_object(  # type: ignore[assignment]  # a dict, untyped
                        "scheduling.volcano.sh", "v1beta1", "queues", "default")
                except kubernetes.client.exceptions.ApiException:
                    return False
                return (queue.get("status") or {}).get("state") == "Open"

            try:
                wait_for(default_open, timeout=60, interval=0.2, message="Volcano's queue `default` to open",
                         on_poll=self._check_alive)
            except TimeoutError as e:
                raise self._fail("vc-controller-manager", str(e)) from None
        self.timings["volcano_ready"] = time.monotonic() - self._t_addons

def add_demo_nodes(cp: ControlPlane) -> list[str]:
    """GPU nodes matching the demo catalog (demo/site.py): four
    8-GPU H100 nodes, one A100 node cut into 56 1g.10gb MIG slices, one T4 node time-sliced into
    32 shares (GPU Feature Discovery's sharing labels on it, and the shared pool's taint). Each
    node carries the taint its flavor tolerates."""
    gpu_taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    shared_taint = [{"key": "nvidia.com/gpu.shared", "value": "present", "effect": "NoSchedule"}]
    time_sliced = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4",
                   "nvidia.com/gpu.count": "8"}
    nodes = [
        *((f"gpu-h100-{i}", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": "8"}, gpu_taint)
          for i in range(4)),
        ("gpu-a100-mig-0", {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe", "nvidia.com/mig.config": "all-1g.10gb"},
         {"nvidia.com/mig-1g.10gb": "56"}, gpu_taint),
        ("gpu-t4-0", {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/device-plugin.config": "time-sliced-4",
                      **time_sliced}, {"nvidia.com/gpu.shared": "32"}, shared_taint),
    ]
    for name, labels, alloc, taints in nodes:
        cp.add_gpu_node(name, labels=labels, allocatable=alloc, taints=taints)
    return [n[0] for n in nodes]
