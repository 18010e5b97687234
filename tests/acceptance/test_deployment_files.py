"""The worker definitions in workers/ stop workers no faster than their --grace allows."""

from __future__ import annotations

import re
from pathlib import Path

WORKERS = Path(__file__).resolve().parents[2] / "workers"


def grace(text: str) -> float:
    (value,) = re.findall(r"--grace[= ](\d+)", text)
    return float(value)


def test_kubernetes_grace_period_exceeds_the_worker_grace() -> None:
    text = (WORKERS / "kubernetes" / "deployment.yaml").read_text()
    (period,) = re.findall(r"terminationGracePeriodSeconds: (\d+)", text)
    assert float(period) > grace(text)
    assert '"worker"' in text and "--app=" in text and '"--processes=' in text


def test_systemd_stop_timeout_exceeds_the_worker_grace() -> None:
    text = (WORKERS / "jobq-worker@.service").read_text()
    (timeout,) = re.findall(r"^TimeoutStopSec=(\d+)$", text, re.MULTILINE)
    assert float(timeout) > grace(text)
    assert re.search(r"^KillSignal=SIGTERM$", text, re.MULTILINE)
    assert re.search(r"^ExecStart=.*jobq worker --app \$\{JOBQ_APP\}", text, re.MULTILINE)
    # SIGTERM to the --processes supervisor only: it passes it on to its processes.
    assert re.search(r"^ExecStart=.* --processes ", text, re.MULTILINE)
    assert re.search(r"^KillMode=mixed$", text, re.MULTILINE)


def test_procfile_grace_fits_the_platforms_30_second_shutdown() -> None:
    text = (WORKERS / "Procfile").read_text()
    worker_line = next(line for line in text.splitlines() if line.startswith("worker:"))
    assert "jobq worker --app" in worker_line and grace(worker_line) < 30
    assert "--processes " in worker_line
    assert any(line.startswith("release: jobq migrate") for line in text.splitlines())
