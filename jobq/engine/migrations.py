"""Running the Alembic migrations that ship with jobq, against a given engine.

Store.migrate upgrades one migration at a time (upgrade_database), and a worker starts
only on a database at this jobq's newest revision (check). Alembic (and Mako, which it
imports) takes a tenth of a second to import: a worker starting on a database at HEAD
never imports it.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from jobq.db.errors import SchemaConflict, SchemaNotMigrated, SchemaTooNew
from jobq.engine.database import Database

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

#: The newest revision shipped with this jobq, as head() finds it among the scripts (a
#: test keeps the two the same): what check() compares with, without Alembic.
HEAD = "0017"

#: jobq keeps its own version table, so it can share a database with an application
#: that runs Alembic for its own tables.
VERSION_TABLE = "jobq_alembic_version"
_VERSIONS = sa.table(VERSION_TABLE, sa.column("version_num", sa.String))


def script_location() -> str:
    """Where the migration scripts are: inside the installed wheel, else in the checkout."""
    packaged = resources.files("jobq") / "_migrations"
    if packaged.is_dir():
        return str(packaged)
    checkout = Path(__file__).resolve().parents[2] / "alembic"
    if checkout.is_dir():
        return str(checkout)
    raise RuntimeError("jobq's migration scripts are missing from this installation")


def _config(connection: sa.Connection) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", script_location())
    config.attributes["connection"] = connection
    return config


def upgrade(connection: sa.Connection, revision: str = "head") -> None:
    """Upgrade the jobq schema to ``revision`` inside ``connection``'s transaction."""
    from alembic import command

    command.upgrade(_config(connection), revision)


def downgrade(connection: sa.Connection, revision: str = "base") -> None:
    """Downgrade the jobq schema to ``revision`` inside ``connection``'s transaction."""
    from alembic import command

    command.downgrade(_config(connection), revision)


def current(connection: sa.Connection) -> str | None:
    """The revision the database is at, or None when jobq was never migrated there."""
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


@functools.cache
def _scripts() -> ScriptDirectory:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", script_location())
    return ScriptDirectory.from_config(config)


def head() -> str:
    """The newest revision shipped with this jobq."""
    revision = _scripts().get_current_head()
    assert revision is not None
    return revision


@functools.cache
def known() -> frozenset[str]:
    """Every revision shipped with this jobq."""
    return frozenset(script.revision for script in _scripts().walk_revisions())


def upgrade_database(db: Database, revision: str = "head") -> None:
    """Upgrade ``db``'s jobq schema to ``revision``, one migration at a time.

    Concurrent callers (many processes deployed at once) wait for the dialect's migration
    lock, then read the revision afresh and find nothing left to do. A database at a
    revision this jobq does not know raises SchemaTooNew, and nothing changes.
    """
    try:
        # A SQLite file is created here, and only here: connections never create one.
        db.dialect.create_missing(db.engine)
        conn = db.engine.connect()
    except (sa.exc.DBAPIError, db.engine.dialect.loaded_dbapi.Error) as error:
        raise db.unavailable(error) from None
    with conn, db.translated(), db.dialect.migration_lock(conn), conn.begin():
        at = current(conn)
        _refuse_unknown(at, db)
        if at is None:
            _refuse_strangers(conn, db)
        upgrade(conn, revision)


def _refuse_strangers(conn: sa.Connection, db: Database) -> None:
    """SchemaConflict if a database jobq never migrated has tables by jobq's names (left by
    a hand-made schema, or a failed restore): the first CREATE TABLE would fail halfway."""
    from jobq.dialects.schema import metadata

    found = sorted(set(sa.inspect(conn).get_table_names()) & set(metadata.tables))
    if found:
        tables = ", ".join(found)
        raise SchemaConflict(database=db.shown_database, tables=tables)


def check(db: Database) -> None:
    """Return if ``db``'s jobq schema is at this jobq's newest revision; else raise
    SchemaNotMigrated (never migrated, or older) or SchemaTooNew (newer than this jobq)."""
    # The version table read directly: a missing one is SchemaNotMigrated (Database.unit).
    with db.unit() as conn:
        revisions = set(conn.execute(sa.select(_VERSIONS.c.version_num)).scalars())
    if revisions == {HEAD}:
        return
    for revision in revisions:
        _refuse_unknown(revision, db)
    if revisions != {head()}:
        raise SchemaNotMigrated(database=db.shown_database)


def _refuse_unknown(revision: str | None, db: Database) -> None:
    """SchemaTooNew if ``revision`` is not one this jobq ships (a newer jobq migrated)."""
    if revision is not None and revision not in known():
        raise SchemaTooNew(database=db.shown_database, revision=revision)
