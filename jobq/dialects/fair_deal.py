"""How a capture deals a page of a fair queue's keys (deficit round robin; see
jobq.limits.fair_capture): the page, the order its keys' rows are dealt in, and what the
capture of a page tells the caller. Pure: the statements are in jobq.dialects.fair.

A page is the keys a capture visits, in visit order. The first visit of each key takes up
to its quota (its weight; the first key's less what it took of a visit a full capture cut
short), each later visit up to its weight; never more than the key's room (its cap less
its runs). So the n-th row of a key (n = 0, 1, ...) is dealt in round 0 if n < quota, else
in round 1 + (n - quota) // weight, and the rows go by round, then position, then n. Later
rounds are dealt only when the page holds every key with work (``every_key``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FairKey:
    """A key as a capture reads it: its name, weight (the rows of its visit), version, and
    where the dialect read them with the key, its first rows (up to ``first_limit``, in
    capture order, locked; None: not read)."""

    name: str
    weight: int
    version: int
    first_rows: list[int] | None = None
    first_limit: int = 0


@dataclass(frozen=True)
class FairPage:
    """A page of keys as a capture deals it (see the module's docstring)."""

    keys: list[str]
    quotas: list[int]
    weights: list[int]
    rooms: list[int]
    #: The rows the capture still wants.
    left: int
    #: The page holds every key with work: the capture goes round more than once.
    every_key: bool
    #: Each key's first rows, where they were read with the key, and how many at most were
    #: read (FairKey.first_rows, first_limit).
    known: list[tuple[list[int], int] | None] = field(default_factory=list)

    def known_rows(self, position: int, want: int) -> list[int] | None:
        """The first ``want`` rows of the key at ``position`` if the rows read with the key
        hold them (or all it has: fewer than were asked for were found), else None."""
        known = self.known[position] if self.known else None
        if known is None or (want > len(known[0]) and len(known[0]) >= known[1]):
            return None
        return known[0][:want]

    def wants(self, *, bounded: bool) -> list[int]:
        """The rows to read of each key: its first visit's, or with ``every_key`` as many as
        the page could deal (``bounded``: as many as the rounds that fill the capture take
        if every key has rows for them), never more than its room."""
        if not self.every_key:
            reads = self.quotas
        elif bounded:
            rounds = 1 - (-max(self.left - sum(self.quotas), 0) // sum(self.weights))
            reads = [q + (rounds - 1) * w for q, w in zip(self.quotas, self.weights, strict=True)]
        else:
            reads = [self.left] * len(self.keys)
        return [max(min(n, room), 0) for n, room in zip(reads, self.rooms, strict=True)]

    def round_of(self, position: int, n: int) -> int:
        """The round the ``n``-th row of the key at ``position`` is dealt in."""
        quota = self.quotas[position]
        return 0 if n < quota else 1 + (n - quota) // self.weights[position]


@dataclass
class Dealt:
    """What the capture of a page took: the rows (every column, as the driver gives them),
    the positions of the keys asked for rows that had none, and where the visits stopped
    (stop_of; written with the capture if it took rows)."""

    rows: Sequence[Sequence[Any]] = ()
    empty: list[int] = field(default_factory=list)
    stop: tuple[str, int] = ("", 0)


def stop_of(page: FairPage, dealt: list[tuple[int, int]], cut: bool) -> tuple[str, int]:
    """Where the visits of ``page`` stopped, given the (position, round) of the rows dealt:
    its last key if the capture is not full, else the key of the last row dealt, with the
    rows of its visit if ``cut`` (the next row in deal order was its own in the same round:
    the next capture finishes the visit), those its first visit had before this capture
    counted in."""
    if len(dealt) < page.left:
        return (page.keys[-1], 0)
    last = dealt[-1]
    if not cut:
        return (page.keys[last[0]], 0)
    before = page.weights[0] - page.quotas[0] if last == (0, 0) else 0
    return (page.keys[last[0]], dealt.count(last) + before)


def deal_order(page: FairPage, rows: Mapping[int, Sequence[int]]) -> list[tuple[int, int, int]]:
    """Every row read, ``rows`` (the ids of each position's key in capture order), as
    (round, position, id), in the order a capture deals them."""
    order = [
        (page.round_of(position, n), position, n, id)
        for position, ids in rows.items()
        for n, id in enumerate(ids)
    ]
    order.sort()
    return [(round_, position, id) for round_, position, _n, id in order]
