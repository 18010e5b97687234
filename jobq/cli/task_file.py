"""`jobq enqueue --file`: a JSON-lines file enqueued as it is read, all or nothing.

The file is read a chunk of lines at a time, each chunk enqueued before the next is read,
all in one transaction: memory stays flat however long the file, the progress bar moves
from the first chunk, and a bad line anywhere rolls back every line before it.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import groupby
from typing import IO, Protocol

import click
from sqlalchemy.engine import Connection

from jobq.app.store import Store
from jobq.cli.params import TaskLine, task_line
from jobq.db.errors import InvalidTaskArguments, JobqError
from jobq.db.payload import encode_args

#: Lines enqueued together: enough to amortise a statement, few enough to stay small.
CHUNK_LINES = 5000

Resolve = Callable[[TaskLine], TaskLine]


def enqueue_file(store: Store, file: IO[bytes], resolve: Resolve | None) -> int:
    """Enqueue every line of ``file`` in one transaction; how many distinct tasks that is.

    Lines naming a unique key already held count as the one task holding it. A bad line
    raises JobqError naming it, and nothing is written.
    """
    with _rereadable(file) as source:
        total = os.fstat(source.fileno()).st_size
        with _progress(total) as bar:

            def enqueue_all(conn: Connection) -> int:
                source.seek(0)  # from the start again, should a deadlock undo a first try
                bar.update(-bar.pos)
                new = 0
                held: set[int] = set()  # ids of unique-key lines: some may be one task
                for chunk, size in _chunks(source, _name(file), resolve):
                    new_ids, unique_ids = _enqueue_chunk(store, conn, chunk, _name(file))
                    new += new_ids
                    held.update(unique_ids)
                    bar.update(size)
                return new + len(held)

            # One transaction, read again from the start: it waits for an unreachable
            # database as an enqueue does, tried again only if it certainly did not commit.
            with store.enqueuer.waiting(None):
                return store.db.write(enqueue_all, atomic=True)


class _Bar(Protocol):
    """What enqueue_file moves: click's progress bar, or _Silent."""

    pos: int

    def update(self, n_steps: int) -> None: ...


class _Silent:
    """A progress bar that shows nothing: for a stderr that is not a terminal."""

    pos = 0

    def update(self, n_steps: int) -> None:
        self.pos += n_steps


@contextmanager
def _progress(total: int) -> Iterator[_Bar]:
    """A bar on stderr moving through ``total`` bytes, where stderr is a terminal; else one
    that shows nothing (click's prints its label once, a stray line in a log or a pipe)."""
    if not sys.stderr.isatty():
        yield _Silent()
        return
    with click.progressbar(length=total, label="enqueueing", file=sys.stderr) as bar:
        yield bar


@contextmanager
def _rereadable(file: IO[bytes]) -> Iterator[IO[bytes]]:
    """``file`` if it is a regular file (seekable, its size known), else a temporary
    file holding its bytes (a pipe, say): a retried transaction reads it again."""
    try:
        regular = stat.S_ISREG(os.fstat(file.fileno()).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation):  # no descriptor: in memory
        regular = False
    if regular:
        yield file
        return
    with tempfile.TemporaryFile() as copy:
        shutil.copyfileobj(file, copy, 1 << 20)
        copy.flush()
        yield copy


def _name(file: IO[bytes]) -> str:
    name = getattr(file, "name", "<stdin>")
    return name if isinstance(name, str) else "<stdin>"


Numbered = tuple[int, TaskLine]


def _chunks(
    file: IO[bytes], name: str, resolve: Resolve | None
) -> Iterator[tuple[list[Numbered], int]]:
    """The file's tasks with their line numbers, CHUNK_LINES at a time, each chunk with
    the bytes it took; JobqError naming the first bad line."""
    chunk: list[Numbered] = []
    size = 0
    for number, raw in enumerate(file, start=1):
        size += len(raw)
        try:
            # utf-8-sig: a byte order mark, which some editors write, only at the start.
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            raise JobqError(f"{name} is not UTF-8 text: line {number}: {error}") from None
        if not text.strip():
            continue
        try:
            line = task_line(text)
            chunk.append((number, line if resolve is None else resolve(line)))
        except (ValueError, JobqError) as error:
            raise JobqError(f"{name} line {number}: {error}") from None
        if len(chunk) >= CHUNK_LINES:
            yield chunk, size
            chunk, size = [], 0
    if chunk or size:
        yield chunk, size


def _enqueue_chunk(
    store: Store, conn: Connection, chunk: list[Numbered], file_name: str
) -> tuple[int, list[int]]:
    """Enqueue ``chunk`` on ``conn``: how many new tasks without a unique key, and the ids
    of those with one. Consecutive lines of one name and options share one enqueue_many;
    arguments it cannot store raise JobqError naming their line."""
    new = 0
    unique_ids: list[int] = []
    for (name, shared), numbered in groupby(chunk, key=lambda n: (n[1].name, n[1].options)):
        group = list(numbered)
        batch = [line.kwargs for _, line in group]
        options = dict(shared)
        try:
            if options.get("unique_key") is not None:
                unique_ids += [store.enqueue(name, kw, connection=conn, **options) for kw in batch]
            else:
                new += len(store.enqueue_many(name, batch, connection=conn, **options))
        except InvalidTaskArguments as error:
            raise JobqError(f"{file_name} line {_culprit(group)}: {error}") from None
    return new, unique_ids


def _culprit(group: list[Numbered]) -> str:
    """The number of the first line of ``group`` whose arguments cannot be stored."""
    for number, line in group:
        try:
            encode_args(line.name, line.kwargs)
        except InvalidTaskArguments:
            return str(number)
    return f"{group[0][0]}-{group[-1][0]}"
