"""python -m tests.cluster {up,build,dir}

up     start the local control plane with a few demo GPU nodes and keep it running
       until Ctrl-C / SIGTERM (prints the kubeconfig path and an `export KUBECONFIG=...`);
       --queue-backend volcano runs Volcano instead of Kueue
build  run build.sh (builds the binaries into the cache, or reuses them)
dir    print the cache dir for the pinned versions
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import threading
import time
from types import FrameType

from .harness import BUILD_SH, QUEUE_BACKENDS, ControlPlane, add_demo_nodes, cache_dir, ensure_built


def _up(args: argparse.Namespace) -> int:
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    cp = ControlPlane(ensure_built(), keep_workdir=args.keep_workdir, pod_run_seconds=args.pod_run_seconds,
                      queue_backend=args.queue_backend)
    t0 = time.monotonic()
    try:
        cp.start()
        nodes = [] if args.no_demo_nodes else add_demo_nodes(cp)
        if args.kubeconfig_out:
            shutil.copy(cp.kubeconfig_path, args.kubeconfig_out)
        kc = args.kubeconfig_out or cp.kubeconfig_path
        print(f"control plane up in {time.monotonic() - t0:.1f}s ({cp.server}); nodes: {', '.join(nodes) or '-'}")
        print(f"kubeconfig: {kc}")
        print(f"logs:       {cp.logs_dir}")
        print(f"kubectl:    {cp.bin_dir / 'kubectl'}")
        print(f"export KUBECONFIG={kc}", flush=True)
        while not stop.is_set():
            cp._check_alive()
            stop.wait(1.0)
        print("stopping...", flush=True)
    finally:
        cp.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the control plane and keep it running")
    up.add_argument("--no-demo-nodes", action="store_true", help="do not create the demo GPU nodes")
    up.add_argument("--kubeconfig-out", help="also copy the kubeconfig to this path")
    up.add_argument("--keep-workdir", action="store_true", help="keep the temp dir (logs) after stopping")
    up.add_argument("--pod-run-seconds", type=float, default=10.0,
                    help="how long fake Job pods run before succeeding (default 10)")
    up.add_argument("--queue-backend", choices=QUEUE_BACKENDS, default="kueue",
                    help="the queue backend the control plane runs (default kueue)")
    b = sub.add_parser("build", help="run build.sh")
    b.add_argument("--force", action="store_true")
    sub.add_parser("dir", help="print the cache dir")
    args = p.parse_args(argv)
    if args.cmd == "up":
        return _up(args)
    if args.cmd == "build":
        return subprocess.call(["bash", str(BUILD_SH), *(["--force"] if args.force else [])])
    print(cache_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
