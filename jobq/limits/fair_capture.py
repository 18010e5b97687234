"""The capture of a fair queue: weighted fair shares between its keys (deficit round robin).

Captures visit the keys of a fair queue that have work (jobq_fair_keys rows not idle) in
key order, round and round; a visit takes up to the key's weight in rows, by the usual
priority, due time and id order within the key. Where the last capture stopped is the
queue's jobq_limits row (``fair_cursor``: the last key visited; ``fair_cursor_taken``: the
rows of a visit that a full capture cut short, which the next capture finishes). Over a
round each key with work waiting is served in proportion to its weight, whatever its
backlog; a key that joins (its first row, or back from idle) is visited when the round
reaches it, within one round, without credit for the time it was away.

A capture runs in its queue's transaction, the queue's jobq_limits row locked (captures
of one fair queue take turns, so a key's cap and the cursor are exact), and reads:

1. the runs of the queue whose lease expired (they had their visit; they run again first);
2. a page of keys from the cursor on, in key order, round to the key before it: as many
   as rows are wanted, each visited key taking at least one row or none;
3. their runs, where keys are capped;
4. each key's next rows along jobq_tasks_fair, no more than its visit may take;

then deals the rows visit by visit (jobq.dialects.fair_deal), captures them by id and
writes the cursor: one row (the queue's) whatever the number of keys served. When the page
holds every key with work (fewer than the rows wanted), the capture goes round again, as
many rounds as the rows wanted take. A key found with nothing waiting or running is idled
(skipped until an enqueue wakes it). Its cost grows with the keys served, not with the
rows waiting.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from jobq.core.capture_options import capture_parameters, capture_shape
from jobq.db.tasks import Leases, Task
from jobq.dialects.fair_deal import FairKey, FairPage
from jobq.limits import FairShare

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

#: Seconds between the looks of a Store for a fair queue's runs whose lease expired.
EXPIRED_EVERY = 1.0

#: Pages of keys a capture looks through at most: more only when keys are capped or have
#: nothing due, and each page costs a round trip.
PAGES = 4

#: Where a fair queue's captures stopped: the last key visited (None: none yet), and the
#: rows it took of a visit cut short (0: its visit ended).
Cursor = tuple[str | None, int]


class _Ring:
    """The keys of a fair queue not idle, page by page, in key order from a cursor round to
    the key before it: each key once."""

    def __init__(self, dialect: Any, conn: Connection, share: FairShare, cursor: Cursor):
        self._dialect, self._conn, self._share = dialect, conn, share
        start, taken = cursor
        #: Where the ring starts: the cursor's key itself when its visit was cut short.
        self._start = start
        self._start_in = taken > 0
        # The next page's lower bound: (key, whether it is in), or None: from the first key.
        self._lower: tuple[str, bool] | None = None if start is None else (start, self._start_in)
        self._wrapped = start is None  # from the first key: no second half to read
        self.done = False

    def page(self, limit: int) -> list[FairKey]:
        """At most ``limit`` more keys of the ring; ``done`` once none are left."""
        keys = self._read(limit)
        if len(keys) < limit and not self._wrapped:
            self._wrapped, self._lower = True, None
            keys += self._read(limit - len(keys))
        if len(keys) < limit:
            self.done = True
        if keys:
            self._lower = (keys[-1].name, False)
        return keys

    def _read(self, limit: int) -> list[FairKey]:
        upper = None
        params: dict[str, Any] = {"f_queue": self._share.queue, "limit": limit}
        if self._lower is not None:
            params["lower_key"] = self._lower[0]
        if self._wrapped and self._start is not None:  # the second half ends at the start
            upper, params["upper_key"] = not self._start_in, self._start
        lower = None if self._lower is None else self._lower[1]
        params["default_weight"] = self._share.default_weight
        keys: list[FairKey] = self._dialect.read_fair_keys(self._conn, lower, upper, params)
        return keys


class FairCapture:
    """The captures of fair queues of one TaskStore (see the module's docstring)."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.dialect = store.dialect
        #: When (time.monotonic()) each queue's expired runs are looked for next.
        self._expired_next: dict[str, float] = {}

    def take(
        self,
        conn: Connection,
        share: FairShare,
        room: int,
        cursor: Cursor,
        worker_id: str,
        lease: float | Leases | None,
    ) -> list[Task]:
        """Capture at most ``room`` tasks of fair queue ``share.queue`` on ``conn``, whose
        transaction holds the queue's jobq_limits row locked, read with its ``cursor``;
        fair shares between keys."""
        if room <= 0:
            return []
        queue = share.queue
        params = capture_parameters(room, [queue], worker_id, lease)
        named = capture_shape([queue], lease)[1]
        rows: list[Sequence[Any]] = []
        expired = self._expired(conn, queue, room)
        if expired:
            rows += self.dialect.capture_ids(conn, expired, named, params)
        ring = _Ring(self.dialect, conn, share, cursor)
        stop = stored = cursor
        empty: list[FairKey] = []
        for n in range(PAGES):
            left = room - len(rows)
            if left <= 0:
                break
            page = ring.page(left)
            if not page:
                break
            # The rows the cursor's key had of a visit cut short, if the ring starts there.
            taken = cursor[1] if n == 0 and page[0].name == cursor[0] else 0
            dealt = self.dialect.capture_page(
                conn, queue, self._page(conn, share, page, left, taken, n == 0 and ring.done),
                named, params, stored,
            )  # fmt: skip
            rows += dealt.rows
            empty += [page[i] for i in dealt.empty]
            stop = dealt.stop
            if dealt.rows:  # the capture wrote the cursor where it was not there
                stored = stop
            if ring.done:
                break
        for key in empty:
            self._idle(conn, queue, key)
        if stop != stored and stop[0] is not None:
            self.dialect.write_fair_cursor(conn, queue, (stop[0], stop[1]))
        return self.store.capturer.captured(rows)

    def _expired(self, conn: Connection, queue: str, room: int) -> list[int]:
        """The ids of the queue's runs whose lease expired, locked, at most ``room``; looked
        for at most once every EXPIRED_EVERY s a queue (a lease is many seconds long). They
        still hold their keys' places under a cap (see _caps), so taking them again keeps
        each key within it."""
        now = time.monotonic()
        if now < self._expired_next.get(queue, 0.0):
            return []
        self._expired_next[queue] = now + EXPIRED_EVERY
        rows = conn.execute(self.dialect.fair_expired(), {"f_queue": queue, "limit": room})
        return [row[0] for row in rows]

    def _page(
        self,
        conn: Connection,
        share: FairShare,
        page: list[FairKey],
        left: int,
        taken: int,
        every_key: bool,
    ) -> FairPage:
        """``page``'s keys to deal, its first key owing ``taken`` rows of its visit already;
        round after round if ``every_key`` (the page is the whole ring)."""
        caps = self._caps(conn, share, page, left)
        quotas = [key.weight for key in page]
        quotas[0] = max(quotas[0] - taken, 0)
        return FairPage(
            [key.name for key in page],
            quotas,
            [key.weight for key in page],
            [caps.get(key.name, left) for key in page],
            left,
            every_key,
            [None if key.first_rows is None else (key.first_rows, key.first_limit) for key in page],
        )

    def _caps(
        self,
        conn: Connection,
        share: FairShare,
        page: Sequence[FairKey],
        left: int,
    ) -> dict[str, int]:
        """How many more runs each key of ``page`` may start: its cap less its runs, those
        whose lease expired too (until they are taken again, or rescue ends them)."""
        cap = share.max_running_per_key
        if cap is None:
            return {}
        params: dict[str, Any] = {"f_queue": share.queue}
        params.update({f"key_{i}": key.name for i, key in enumerate(page)})
        found = conn.execute(self.dialect.running_by_key(len(page)), params).all()
        running: Counter[str] = Counter(dict(found))
        return {key.name: min(left, cap - running[key.name]) for key in page}

    def _idle(self, conn: Connection, queue: str, key: FairKey) -> None:
        """Idle ``key``, which had nothing to capture, if nothing of it waits or runs and no
        enqueue of it came since its row was read."""
        params = {"f_queue": queue, "f_key": key.name, "f_version": key.version}
        conn.execute(self.dialect.idle_fair_key(), params)
