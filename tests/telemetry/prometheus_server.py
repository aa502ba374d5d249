"""A real Prometheus (Debian's package) on loopback for the tests: a private data directory,
a scrape of the DCGM stand-in every half second and the rules deploy/prometheus/ ships (read from
there, never copied, so a rule removed there is missing here), evaluated every half second so
tests need not wait a minute."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SHIPPED_RULES = [Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / name
                 for name in ("recording_rules.yaml", "alerting_rules.yaml")]
TEST_INTERVAL = "500ms"


def shipped_rules(interval: str = TEST_INTERVAL) -> dict[str, Any]:
    """deploy/prometheus's recording and alerting rules in one rules file, every group evaluated
    at `interval` instead of its shipped minute."""
    groups = [group for path in SHIPPED_RULES for group in yaml.safe_load(path.read_text())["groups"]]
    return {"groups": [{**group, "interval": interval} for group in groups]}


class PrometheusError(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    def __init__(self, *, scrape_targets: list[str], data_dir: Path | None = None, extra_flags: list[str] | None = None) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="gpu-portal-prometheus."))
        self.data_dir = data_dir or self.work / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra_flags = extra_flags or []
        targets = ", ".join(f'"{t}"' for t in scrape_targets)
        scrape = (f"scrape_configs:\n  - job_name: dcgm-exporter\n    honor_labels: true\n"
                  f"    static_configs:\n      - targets: [{targets}]\n") if scrape_targets else ""
        rules = self.work / "rules.yml"
        rules.write_text(yaml.safe_dump(shipped_rules(), sort_keys=False))
        (self.work / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {TEST_INTERVAL}\n  evaluation_interval: {TEST_INTERVAL}\n"
            f"rule_files:\n  - {rules}\n{scrape}")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, timeout: float = 30) -> None:
        if not Path(PROMETHEUS).exists():
            raise PrometheusError("Debian's prometheus is missing: scripts/test.sh installs it (apt-get install prometheus)")
        log = (self.work / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.work / 'prometheus.yml'}", f"--storage.tsdb.path={self.data_dir}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=400d",
             "--log.level=warn", *self.extra_flags],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PrometheusError(f"prometheus exited ({self.process.returncode}): {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise PrometheusError(f"prometheus was not ready within {timeout:.0f}s: {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return (self.work / "prometheus.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.work, ignore_errors=True)
