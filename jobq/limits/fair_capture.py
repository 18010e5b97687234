"""The capture of a fair queue: weighted fair shares between its keys (stride scheduling).

Each key of a fair queue has a row in jobq_fair_keys with its ``turn``, a virtual time:
each row a capture takes of the key moves it on by 1/weight, and a capture serves the
rows with the lowest tags, ``turn + r/weight`` for a key's r-th next row (r = 0, 1, ...).
Over time each key with work waiting is served in proportion to its weight, whatever its
backlog; within a key rows go by priority, then due time, then id.

A capture runs in its queue's transaction, the queue's jobq_limits row locked (captures
of one fair queue take turns, so a key's cap is exact), and reads:

1. the runs of the queue whose lease expired (they had their turn; they run again first);
2. a page of keys in turn order, as many as rows are wanted: the smallest tags of all keys
   can only belong to these (each further key's first tag is no lower than theirs);
3. their runs, where keys are capped;
4. each key's next rows along jobq_tasks_fair, no more than its tags could win:
   ``floor((last turn of the page - its turn) * weight) + 1``;

then takes the rows of the smallest tags, captures them by id, and writes each served
key's new turn. A key (re)joining (turn -1, set by the enqueue that woke it) starts at
the queue's present turn: served at once, without credit for the time it was away. A key
found with nothing waiting or running is idled (skipped until an enqueue wakes it).
Its cost grows with the keys served, not with the rows waiting.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from jobq.core.capture_options import capture_parameters, capture_shape
from jobq.db.tasks import Leases, Task
from jobq.limits import FairShare

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

#: Seconds between the looks of a Store for a fair queue's runs whose lease expired.
EXPIRED_EVERY = 1.0

#: Pages of keys a capture looks through at most: more only when keys are capped or have
#: nothing due, and each page costs a round trip.
PAGES = 4


@dataclass
class _Key:
    """A key as a capture sees it: where its turn starts, its weight and room."""

    name: str
    #: As stored: -1 for a key joining (the page cursor goes by it).
    turn: float
    start: float
    weight: int
    version: int
    joining: bool
    want: int = 0


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
        *,
        worker_id: str,
        lease: float | Leases | None,
    ) -> list[Task]:
        """Capture at most ``room`` tasks of fair queue ``share.queue`` on ``conn``, whose
        transaction holds the queue's jobq_limits row locked; fair shares between keys."""
        if room <= 0:
            return []
        queue = share.queue
        ids = self._expired(conn, queue, room)
        turns: dict[str, float] = {}
        after: tuple[float, str] | None = None
        for _ in range(PAGES):
            left = room - len(ids)
            if left <= 0:
                break
            page = self._keys(conn, share, left, after)
            if not page:
                break
            ids += self._serve(conn, share, page, left, turns)
            if len(page) < left:
                break  # no key is left to look at
            after = (page[-1].turn, page[-1].name)
        if turns:
            self._set_turns(conn, queue, turns)
        if not ids:
            return []
        params = capture_parameters(len(ids), [queue], worker_id, lease)
        named = capture_shape([queue], lease)[1]
        return self.store.capturer.captured(self.dialect.capture_ids(conn, ids, named, params))

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

    def _keys(
        self,
        conn: Connection,
        share: FairShare,
        left: int,
        after: tuple[float, str] | None,
    ) -> list[_Key]:
        """The next page of keys of the queue in turn order, at most ``left``."""
        params: dict[str, Any] = {"f_queue": share.queue, "limit": left}
        if after is not None:
            params["after_turn"], params["after_key"] = after
        rows = conn.execute(self.dialect.fair_keys_in_turn(after is not None), params).all()
        present: float | None = None
        keys = []
        for name, turn, weight, version in rows:
            joining = turn < 0
            if joining and present is None:  # read once a page, when a key joins
                found = conn.execute(self.dialect.present_turn(), {"f_queue": share.queue})
                present = float(found.scalar() or 0.0)
            start = float(present if joining and present is not None else turn)
            weight = weight or share.default_weight
            keys.append(_Key(name, float(turn), start, weight, version, joining))
        return keys

    def _serve(
        self,
        conn: Connection,
        share: FairShare,
        page: list[_Key],
        left: int,
        turns: dict[str, float],
    ) -> list[int]:
        """Of ``page``'s keys, the ids of the (at most ``left``) rows with the lowest tags,
        locked; each served key's next turn into ``turns``; keys with nothing idled."""
        caps = self._caps(conn, share, page, left)
        full = len(page) >= left
        last = max(key.start for key in page)
        for key in page:
            want = caps.get(key.name, left)
            if full:  # rows whose tags cannot be among the lowest ``left`` are not read
                want = min(want, int((last - key.start) * key.weight) + 1)
            key.want = max(want, 0)
        asked = [key for key in page if key.want > 0]
        if not asked:
            return []
        found = self.dialect.fair_rows(
            conn, [key.name for key in asked], [key.want for key in asked], share.queue
        )
        rows: dict[int, list[int]] = {}
        for position, id in found:
            rows.setdefault(position, []).append(id)
        # The lowest tags, start + r/weight, merged across keys; ties by start, then name.
        heap = [(key.start, key.start, key.name, i, 0) for i, key in enumerate(asked) if i in rows]
        heapq.heapify(heap)
        taken: dict[int, int] = {}
        ids: list[int] = []
        while heap and len(ids) < left:
            _tag, start, name, i, r = heapq.heappop(heap)
            ids.append(rows[i][r])
            taken[i] = r + 1
            if r + 1 < len(rows[i]):
                key = asked[i]
                heapq.heappush(heap, (start + (r + 1) / key.weight, start, name, i, r + 1))
        for i, key in enumerate(asked):
            count = taken.get(i, 0)
            if count:
                turns[key.name] = key.start + count / key.weight
            elif i not in rows:
                self._idle(conn, share.queue, key)
        return ids

    def _caps(
        self,
        conn: Connection,
        share: FairShare,
        page: Sequence[_Key],
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

    def _idle(self, conn: Connection, queue: str, key: _Key) -> None:
        """Idle ``key``, which had nothing to capture, if nothing of it waits or runs and no
        enqueue of it came since its row was read; a joining key that stays takes the
        present turn, so that it does not stay at the head of the turns."""
        params = {"f_queue": queue, "f_key": key.name, "f_version": key.version}
        idled = conn.execute(self.dialect.idle_fair_key(), params).rowcount
        if not idled and key.joining:
            self._set_turns(conn, queue, {key.name: key.start})

    def _set_turns(self, conn: Connection, queue: str, turns: dict[str, float]) -> None:
        self.dialect.set_fair_turns(conn, queue, turns)
