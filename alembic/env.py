"""Alembic environment for jobq's own tables (version table: jobq_alembic_version)."""

from __future__ import annotations

import os

import sqlalchemy as sa

from alembic import context
from jobq.dialects.mysql_ddl import autogenerate_filter
from jobq.dialects.schema import metadata
from jobq.engine.database import Database
from jobq.engine.migrations import VERSION_TABLE


def _run(connection: sa.Connection) -> None:
    mysql = connection.dialect.name in ("mysql", "mariadb")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        # MySQL's emulated partial indexes are beyond autogenerate (see mysql_ddl).
        include_object=autogenerate_filter(metadata) if mysql else None,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    # Plain `alembic -c ...` use: take the URL from the config file or the environment.
    # jobq's Database reads it as jobq does everywhere: postgres:// and plain postgresql://
    # are PostgreSQL with psycopg, a pooler's parameter is understood.
    url = context.config.get_main_option("sqlalchemy.url") or os.environ["JOBQ_DATABASE_URL"]
    database = Database(url)
    try:
        with database.engine.begin() as conn:
            _run(conn)
    finally:
        database.dispose()
