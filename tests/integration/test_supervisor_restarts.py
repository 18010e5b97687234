"""The supervisor of `jobq worker --processes N` with real processes that are not workers:
a process that exits is started again after a doubling backoff; in burst mode one that
exits 0 is done, and the supervisor returns once all are."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobq.supervise import group
from jobq.supervise.group import Supervisor

#: Exits 3 on its first two starts (counted in a file), then 0.
FLAKY = """
import pathlib, sys
counter = pathlib.Path(sys.argv[1])
starts = int(counter.read_text() or 0) + 1 if counter.exists() else 1
counter.write_text(str(starts))
sys.exit(3 if starts <= 2 else 0)
"""


@pytest.fixture(autouse=True)
def own_signal_handlers() -> Iterator[None]:
    """Supervisor.run sets SIGTERM/SIGINT handlers: give pytest's back afterwards."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_process_that_exits_is_started_again_after_a_doubling_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(group, "FIRST_BACKOFF", 0.05)
    counters = [tmp_path / f"starts-{k}" for k in range(2)]
    supervisor = Supervisor(
        lambda k: [sys.executable, "-c", FLAKY, str(counters[k])], 2, grace=1, burst=True
    )
    with caplog.at_level(logging.INFO, logger="jobq.supervisor"):
        assert supervisor.run() == 0
    assert [counter.read_text() for counter in counters] == ["3", "3"]
    restarts = [r.getMessage() for r in caplog.records if "starting it again" in r.getMessage()]
    for k in range(2):
        mine = [line for line in restarts if line.startswith(f"worker process {k} ")]
        assert len(mine) == 2, restarts
        assert "exited with code 3" in mine[0] and mine[0].endswith("again in 0.05 s")
        assert mine[1].endswith("again in 0.1 s")
    assert any("every worker process has finished" in r.getMessage() for r in caplog.records)
