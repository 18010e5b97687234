"""RunLog: the table a test app's tasks record their runs in, beside its tasks' table."""

from __future__ import annotations

import os

import sqlalchemy as sa


class RunLog:
    """``table`` in the database of $JOBQ_DATABASE_URL (the app's), one engine per URL."""

    def __init__(self, table: sa.Table) -> None:
        self.table = table
        self._engines: dict[str, sa.Engine] = {}

    def engine(self) -> sa.Engine:
        """The engine runs are recorded with."""
        url = os.environ["JOBQ_DATABASE_URL"]
        if url not in self._engines:
            self._engines[url] = sa.create_engine(url)
        return self._engines[url]

    def preload(self) -> None:
        """Import the driver of $JOBQ_DATABASE_URL now, if it is set, without connecting:
        a module that calls this on import has it in a fork server's children already,
        so a child's first statement costs a connection only, not imports that a
        loaded machine can stretch to seconds."""
        if "JOBQ_DATABASE_URL" in os.environ:
            self.engine()

    def create(self) -> None:
        """Create the table if it is missing."""
        self.table.create(self.engine(), checkfirst=True)

    def empty(self) -> None:
        """Create the table if it is missing, and delete every run recorded in it."""
        self.create()
        with self.engine().begin() as conn:
            conn.execute(sa.delete(self.table))

    def dispose(self) -> None:
        """Close the engines' connections."""
        for engine in self._engines.values():
            engine.dispose()
