"""What a capture is asked for: its options checked, and the shape and parameters of its
statement (shared by capture, complete_and_capture and heartbeat)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobq.db.tasks import NO_NAMED_LEASES, Leases
from jobq.db.validation import INT32, check_int, check_key, check_seconds, queue_list


def capture_options(
    limit: int, queues: Sequence[str] | str | None, worker_id: str, lease: float | Leases | None
) -> list[str] | None:
    """Check capture's options; the queue names (None: every queue)."""
    check_int("limit", limit, minimum=0, maximum=INT32[1])
    check_key("worker_id", worker_id, required=True)
    if lease is not None and not isinstance(lease, Leases):
        check_seconds("lease", lease, positive=True)
    return queue_list(queues)


def capture_shape(
    names: list[str] | None, lease: float | Leases | None
) -> tuple[int | None, int | None]:
    """What a capture statement is built for: how many queues, and how many named leases
    (None: one lease for every row)."""
    named = len(leases_of(lease).by_name) if lease is None or isinstance(lease, Leases) else None
    return (None if names is None else len(names), named)


def leases_of(lease: float | Leases | None) -> Leases:
    return lease if isinstance(lease, Leases) else NO_NAMED_LEASES


def capture_parameters(
    limit: int, names: list[str] | None, worker_id: str, lease: float | Leases | None
) -> dict[str, Any]:
    params: dict[str, Any] = {"limit": limit, "worker_id": worker_id, **lease_parameters(lease)}
    if names is not None:
        params.update({f"queue_{i}": name for i, name in enumerate(names)})
    return params


def lease_parameters(lease: float | Leases | None) -> dict[str, Any]:
    """The bound values of jobq.dialects.base.lease_of for ``lease``."""
    if lease is None or isinstance(lease, Leases):
        return leases_of(lease).parameters()
    return {"lease_seconds": float(lease)}
