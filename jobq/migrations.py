"""Running the Alembic migrations that ship with jobq, against a given engine."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import sqlalchemy as sa
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from alembic import command

#: jobq keeps its own version table, so it can share a database with an application
#: that runs Alembic for its own tables.
VERSION_TABLE = "jobq_alembic_version"


def script_location() -> str:
    """Where the migration scripts are: inside the installed wheel, else in the checkout."""
    packaged = resources.files("jobq") / "_migrations"
    if packaged.is_dir():
        return str(packaged)
    checkout = Path(__file__).resolve().parent.parent / "alembic"
    if checkout.is_dir():
        return str(checkout)
    raise RuntimeError("jobq's migration scripts are missing from this installation")


def _config(connection: sa.Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", script_location())
    config.attributes["connection"] = connection
    return config


def upgrade(connection: sa.Connection, revision: str = "head") -> None:
    """Upgrade the jobq schema to ``revision`` inside ``connection``'s transaction."""
    command.upgrade(_config(connection), revision)


def downgrade(connection: sa.Connection, revision: str = "base") -> None:
    """Downgrade the jobq schema to ``revision`` inside ``connection``'s transaction."""
    command.downgrade(_config(connection), revision)


def current(connection: sa.Connection) -> str | None:
    """The revision the database is at, or None when jobq was never migrated there."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def head() -> str:
    """The newest revision shipped with this jobq."""
    config = Config()
    config.set_main_option("script_location", script_location())
    revision = ScriptDirectory.from_config(config).get_current_head()
    assert revision is not None
    return revision
