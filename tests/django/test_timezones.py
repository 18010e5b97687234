"""A project with ``USE_TZ = False``: Django's times are naive, in TIME_ZONE. jobq stores
UTC; the backend reads a naive ``run_after`` as TIME_ZONE's and gives naive local times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.tasks import TaskResultStatus, default_task_backend
from django.utils import timezone
from shop import tasks

CLOSE = timedelta(seconds=10)  # far less than the zone's 5 h 30 min from UTC


def test_without_use_tz_times_are_naive_local_ones(settings: Any, run_worker) -> None:
    settings.USE_TZ = False
    settings.TIME_ZONE = "Asia/Kolkata"  # UTC+05:30 all year: no day is ambiguous
    local_now = timezone.now()
    assert timezone.is_naive(local_now)
    assert abs(local_now - datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=5.5)) < CLOSE

    later = tasks.add.using(run_after=local_now + timedelta(hours=1)).enqueue(1, 1)
    row = default_task_backend.app.store.get(int(later.id))
    assert row is not None and abs(row.run_at - (datetime.now(UTC) + timedelta(hours=1))) < CLOSE
    assert timezone.is_naive(later.enqueued_at) and abs(later.enqueued_at - local_now) < CLOSE
    # The row's time, read back naive too (the read-back task has no run_after: see
    # test_contract.py).
    assert tasks.add.get_result(later.id).enqueued_at == later.enqueued_at

    now = tasks.add.enqueue(2, 3)
    run_worker()
    done = tasks.add.get_result(now.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 5
    for moment in (done.enqueued_at, done.started_at, done.finished_at):
        assert timezone.is_naive(moment) and abs(moment - local_now) < CLOSE + CLOSE
    assert done.enqueued_at == now.enqueued_at <= done.started_at <= done.finished_at
    assert tasks.add.get_result(later.id).status == TaskResultStatus.READY
